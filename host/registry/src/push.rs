//! A component file into a registry, in the layout `wkg` and ORAS read: the manifest's
//! config is `application/vnd.wasm.config.v0+json`, its one layer `application/wasm`, its
//! annotations the component's own metadata.

use crate::cache::sha256;
use crate::metadata::Metadata;
use crate::remote::{Remote, block_on, classify};
use crate::sign::Signer;
use crate::{
    CONFIG_MEDIA_TYPE, Credentials, Error, LAYER_MEDIA_TYPE, MANIFEST_MEDIA_TYPE, MAX_COMPONENT_BYTES, OciRef,
};
use oci_client::client::{Config, ImageLayer};
use oci_client::manifest::OciImageManifest;
use std::path::Path;

#[derive(Clone, Debug)]
pub struct Pushed {
    /// Where it now is, pinned to the manifest's digest.
    pub reference: OciRef,
    /// The component's own sha256.
    pub component: String,
    pub metadata: Metadata,
    pub signed: bool,
}

pub fn push(file: &Path, target: &OciRef, credentials: &Credentials, signer: Option<&Signer>) -> Result<Pushed, Error> {
    if target.digest().is_some() {
        return Err(Error::Reference {
            reference: target.to_string(),
            why: "a push names a tag (oci://REGISTRY/REPO:TAG); the digest is the registry's answer".into(),
        });
    }
    let bytes = vagen_files::read_regular(file, vagen_files::Links::Follow, MAX_COMPONENT_BYTES)
        .map_err(|e| Error::file(file, e))?;
    if bytes.get(..8) != Some(b"\0asm\x0d\x00\x01\x00") {
        return Err(Error::file(
            file,
            "not a WebAssembly component (a core module or another file): build it with the SDK",
        ));
    }
    let metadata = Metadata::read(&bytes)?;
    let component = sha256(&bytes);
    let config = serde_json::json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [component],
        "component": world(&bytes),
    });
    let title = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "component.wasm".into());
    let layer_annotations = [("org.opencontainers.image.title".to_string(), title)].into();
    let layers = [ImageLayer::new(bytes, LAYER_MEDIA_TYPE.into(), Some(layer_annotations))];
    let config = Config::new(serde_json::to_vec(&config).expect("plain JSON"), CONFIG_MEDIA_TYPE.into(), None);
    let annotations = metadata.annotations();
    let mut manifest = OciImageManifest::build(&layers, &config, (!annotations.is_empty()).then_some(annotations));
    manifest.media_type = Some(MANIFEST_MEDIA_TYPE.into());
    let remote = Remote::new(target, credentials)?;
    let digest = block_on(async {
        remote.client.push(&target.inner, &layers, config, &remote.auth, Some(manifest)).await?;
        remote.client.fetch_manifest_digest(&target.inner, &remote.auth).await
    })
    .map_err(|e| classify(target, e))?;
    let reference = target.pinned(&digest);
    if let Some(signer) = signer {
        crate::sign::sign(&reference, &remote, signer)?;
    }
    Ok(Pushed { reference, component, metadata, signed: signer.is_some() })
}

/// The layout's `component` field: the world's top-level imports and exports by name.
fn world(bytes: &[u8]) -> serde_json::Value {
    use wasmparser::{Parser, Payload};
    let (mut imports, mut exports) = (Vec::new(), Vec::new());
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes).flatten() {
        match payload {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(s) if depth == 0 => {
                imports.extend(s.into_iter().flatten().map(|i| i.name.name.to_string()));
            }
            Payload::ComponentExportSection(s) if depth == 0 => {
                exports.extend(s.into_iter().flatten().map(|e| e.name.name.to_string()));
            }
            _ => {}
        }
    }
    serde_json::json!({ "exports": exports, "imports": imports, "target": null })
}
