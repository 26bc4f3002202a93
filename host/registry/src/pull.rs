//! A reference to a component file on this machine: resolved to a digest, fetched into the
//! cache (or found there), every byte checked against the digest that named it.

use crate::cache::{Cache, Kind, sha256};
use crate::remote::{Remote, block_on, classify};
use crate::{
    CONFIG_MEDIA_TYPE, Credentials, Error, LAYER_MEDIA_TYPE, MANIFEST_MEDIA_TYPE, MAX_COMPONENT_BYTES, OciRef, Trust,
};
use oci_client::manifest::OciImageManifest;
use std::path::PathBuf;

/// A component on this machine, and what it came from.
#[derive(Clone, Debug)]
pub struct Fetched {
    /// The verified component in the cache.
    pub path: PathBuf,
    /// The reference pinned to its manifest's digest.
    pub reference: OciRef,
    /// The component's own sha256 (the layer's digest).
    pub component: String,
    /// The key whose signature was checked, where one was.
    pub verified_with: Option<PathBuf>,
}

/// `r` pinned to the digest its tag names now (asked of the registry), or `r` itself when it
/// pins one already.
pub fn resolve(r: &OciRef, credentials: &Credentials) -> Result<OciRef, Error> {
    if r.digest().is_some() {
        return Ok(r.clone());
    }
    pin(&Remote::new(r, credentials)?, r)
}

/// `r` (a tag) pinned to the digest `remote` gives it now.
fn pin(remote: &Remote, r: &OciRef) -> Result<OciRef, Error> {
    let digest = block_on(remote.client.fetch_manifest_digest(&r.inner, &remote.auth)).map_err(|e| classify(r, e))?;
    if !crate::reference::is_sha256(&digest) {
        return Err(Error::Registry {
            reference: r.to_string(),
            why: format!("the registry answered the digest {digest:?}"),
        });
    }
    Ok(r.pinned(&digest))
}

/// The component `r` names, from the cache when a pinned reference is there (no network),
/// else from its registry; its signature checked as `trust` asks.
pub fn fetch(r: &OciRef, credentials: &Credentials, trust: &Trust) -> Result<Fetched, Error> {
    // One connection, made only when needed, for the tag's digest, the manifest and the layer.
    let mut slot = None;
    let pinned = match r.digest() {
        Some(_) => r.clone(),
        None => pin(connect(&mut slot, r, credentials)?, r)?,
    };
    let digest = pinned.digest().expect("pinned").to_string();
    let cache = Cache::user()?;
    let manifest_bytes = match cache.get(Kind::Manifest, &digest) {
        Some(bytes) => bytes,
        None => {
            let remote = connect(&mut slot, &pinned, credentials)?;
            let (bytes, _) =
                block_on(remote.client.pull_manifest_raw(&pinned.inner, &remote.auth, &[MANIFEST_MEDIA_TYPE]))
                    .map_err(|e| classify(&pinned, e))?;
            check(&pinned, "the manifest", &digest, &bytes)?;
            cache.put(Kind::Manifest, &digest, &bytes)?;
            bytes.to_vec()
        }
    };
    let layer = component_layer(&pinned, &manifest_bytes)?;
    let path = match cache.get(Kind::Component, &layer.digest) {
        Some(_) => cache.path(Kind::Component, &layer.digest),
        None => {
            let remote = connect(&mut slot, &pinned, credentials)?;
            let mut bytes = Vec::with_capacity(layer.size.max(0) as usize);
            block_on(remote.client.pull_blob(&pinned.inner, &layer, &mut bytes)).map_err(|e| match e {
                oci_client::errors::OciDistributionError::DigestError(why) => Error::Digest {
                    reference: pinned.to_string(),
                    what: "the component layer".into(),
                    expected: layer.digest.clone(),
                    got: format!("other bytes ({why})"),
                },
                other => classify(&pinned, other),
            })?;
            check(&pinned, "the component layer", &layer.digest, &bytes)?;
            cache.put(Kind::Component, &layer.digest, &bytes)?
        }
    };
    let verified_with = crate::sign::check(&pinned, credentials, trust)?;
    Ok(Fetched { path, reference: pinned, component: layer.digest, verified_with })
}

/// The one connection `fetch` makes, on its first need.
fn connect<'a>(slot: &'a mut Option<Remote>, r: &OciRef, credentials: &Credentials) -> Result<&'a Remote, Error> {
    if slot.is_none() {
        *slot = Some(Remote::new(r, credentials)?);
    }
    Ok(slot.as_ref().expect("just made"))
}

fn check(r: &OciRef, what: &str, expected: &str, bytes: &[u8]) -> Result<(), Error> {
    let got = sha256(bytes);
    match got == expected {
        true => Ok(()),
        false => Err(Error::Digest { reference: r.to_string(), what: what.into(), expected: expected.into(), got }),
    }
}

/// The one `application/wasm` layer of a Wasm artifact manifest.
fn component_layer(r: &OciRef, bytes: &[u8]) -> Result<oci_client::manifest::OciDescriptor, Error> {
    let not = |why: String| Error::NotAComponent { reference: r.to_string(), why };
    let manifest: OciImageManifest =
        serde_json::from_slice(bytes).map_err(|e| not(format!("its manifest is not an OCI image manifest: {e}")))?;
    if manifest.config.media_type != CONFIG_MEDIA_TYPE {
        return Err(not(format!("its config is {}, not {CONFIG_MEDIA_TYPE}", manifest.config.media_type)));
    }
    let wasm: Vec<_> = manifest.layers.iter().filter(|l| l.media_type == LAYER_MEDIA_TYPE).collect();
    let [layer] = wasm.as_slice() else {
        return Err(not(format!("it has {} {LAYER_MEDIA_TYPE} layers, not one", wasm.len())));
    };
    if layer.size < 0 || layer.size as u64 > MAX_COMPONENT_BYTES {
        return Err(not(format!("its layer claims {} bytes (at most {MAX_COMPONENT_BYTES})", layer.size)));
    }
    if !crate::reference::is_sha256(&layer.digest) {
        return Err(not(format!("its layer's digest {} is not sha256", layer.digest)));
    }
    Ok((*layer).clone())
}
