//! The content-addressed store pulled components live in:
//! `$XDG_CACHE_HOME/vagen/components/sha256/HEX.wasm` for components (a layer's bytes) and
//! `…/manifests/sha256/HEX.json` for the manifests naming them. Every read is checked
//! against its name, so a file changed on disk is fetched again, never used.

use crate::Error;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

pub(crate) struct Cache {
    root: PathBuf,
}

pub(crate) enum Kind {
    Component,
    Manifest,
}

impl Cache {
    /// `VAGEN_COMPONENT_CACHE`, else `$XDG_CACHE_HOME/vagen/components` (`~/.cache` when unset).
    pub(crate) fn user() -> Result<Self, Error> {
        if let Some(dir) = std::env::var_os("VAGEN_COMPONENT_CACHE") {
            return Ok(Self { root: dir.into() });
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
            .ok_or_else(|| {
                Error::Other("neither XDG_CACHE_HOME nor HOME is set: no place for pulled components".into())
            })?;
        Ok(Self { root: base.join("vagen").join("components") })
    }

    pub(crate) fn path(&self, kind: Kind, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
        match kind {
            Kind::Component => self.root.join("sha256").join(format!("{hex}.wasm")),
            Kind::Manifest => self.root.join("manifests").join("sha256").join(format!("{hex}.json")),
        }
    }

    /// The bytes stored under `digest`, if there and still matching it.
    pub(crate) fn get(&self, kind: Kind, digest: &str) -> Option<Vec<u8>> {
        let bytes = std::fs::read(self.path(kind, digest)).ok()?;
        (sha256(&bytes) == digest).then_some(bytes)
    }

    /// Stores `bytes` (already checked against `digest`) whole: written aside, then renamed.
    pub(crate) fn put(&self, kind: Kind, digest: &str, bytes: &[u8]) -> Result<PathBuf, Error> {
        let path = self.path(kind, digest);
        let dir = path.parent().expect("cache paths have a folder");
        std::fs::create_dir_all(dir).map_err(|e| Error::file(dir, format!("creating the component cache: {e}")))?;
        let tmp = dir.join(format!(".{}.{}", std::process::id(), path.file_name().unwrap().to_string_lossy()));
        std::fs::write(&tmp, bytes).map_err(|e| Error::file(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| Error::file(&path, e))?;
        Ok(path)
    }
}

pub(crate) fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_file_is_not_served() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache { root: dir.path().into() };
        let d = sha256(b"component");
        let path = cache.put(Kind::Component, &d, b"component").unwrap();
        assert_eq!(cache.get(Kind::Component, &d).unwrap(), b"component");
        std::fs::write(&path, b"tampered").unwrap();
        assert!(cache.get(Kind::Component, &d).is_none());
        assert!(cache.get(Kind::Manifest, &d).is_none());
    }
}
