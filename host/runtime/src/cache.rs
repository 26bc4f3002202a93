//! Compiled code on disk, keyed by the plugin file's sha256 and by everything about the
//! engine that makes compiled code incompatible (wasmtime version and settings).

use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use wasmtime::Engine;
use wasmtime::component::Component;

pub(crate) struct CodeCache {
    dir: PathBuf,
    engine_key: String,
}

impl CodeCache {
    pub(crate) fn new(dir: PathBuf, engine: &Engine) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        // Covers the wasmtime version and every setting that changes compiled code.
        let engine_key = format!("{:016x}", h.finish());
        Self { dir, engine_key }
    }

    fn entry(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}-{}.cwasm", self.engine_key))
    }

    /// The cached component, if a valid entry exists. An entry that fails to load (a
    /// truncated file, another engine's code) is treated as a miss and overwritten later.
    pub(crate) fn get(&self, engine: &Engine, sha256: &str) -> Option<Component> {
        let path = self.entry(sha256);
        if !path.is_file() {
            return None;
        }
        // SAFETY: the file is one this process family wrote through `put`, into a
        // directory owned by the user, and wasmtime checks its header against the engine.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "ignoring unusable compiled-code cache entry");
                None
            }
        }
    }

    /// Stores compiled code atomically (temporary file + rename), so a reader never sees
    /// half an entry. Failure to cache is logged, never fatal.
    pub(crate) fn put(&self, sha256: &str, component: &Component) {
        let result = (|| -> std::io::Result<()> {
            let bytes = component.serialize().map_err(std::io::Error::other)?;
            std::fs::create_dir_all(&self.dir)?;
            let tmp = self.dir.join(format!(".{sha256}.{}.tmp", std::process::id()));
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(&tmp, self.entry(sha256))
        })();
        if let Err(e) = result {
            tracing::warn!(dir = %self.dir.display(), error = %e, "could not write compiled-code cache");
        }
    }
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// `$VAGEN_CACHE_DIR`, else `$XDG_CACHE_HOME/vagen/compiled`, else `~/.cache/vagen/compiled`.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("VAGEN_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))?;
    Some(base.join("vagen").join("compiled"))
}
