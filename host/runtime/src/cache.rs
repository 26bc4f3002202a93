//! Compiled code on disk, keyed by the plugin file's sha256 and by everything about the
//! engine that makes compiled code incompatible (wasmtime version and settings).
//!
//! Compiled code is native code that wasmtime runs without checking it (`deserialize` is
//! `unsafe` for bytes it did not write), so an entry is used only when it is provably ours:
//! the folder belongs to this user and nobody else may write it (created 0700; otherwise
//! the cache is not used at all), and every entry carries an HMAC-SHA256, under a key kept
//! in that folder (0600), of the plugin's sha256, the engine key and the code. A file put
//! under another plugin's key, edited, truncated or written by anyone without the key is
//! refused and the plugin compiled afresh.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Starts every entry: format tag, then the 32-byte tag, then the code.
const MAGIC: &[u8; 12] = b"vagen-cwasm1";
const TAG: usize = 32;

pub(crate) struct CodeCache {
    dir: PathBuf,
    engine_key: String,
    /// `None` when the folder is not private to this user: nothing is read or written.
    key: Option<[u8; 32]>,
}

impl CodeCache {
    pub(crate) fn new(dir: PathBuf, engine: &Engine) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        // Covers the wasmtime version and every setting that changes compiled code.
        let engine_key = format!("{:016x}", h.finish());
        let key = match private_key(&dir) {
            Ok(key) => Some(key),
            Err(why) => {
                tracing::warn!(dir = %dir.display(), "compiled-code cache not used: {why}");
                None
            }
        };
        Self { dir, engine_key, key }
    }

    fn entry(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}-{}.cwasm", self.engine_key))
    }

    fn tag(&self, key: &[u8; 32], sha256: &str, code: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
        for part in [sha256.as_bytes(), b"\0", self.engine_key.as_bytes(), b"\0", code] {
            mac.update(part);
        }
        mac
    }

    /// The cached component, if an entry exists that this cache wrote for this plugin and
    /// engine. Anything else (absent, truncated, forged, moved from another key, another
    /// engine's code) is a miss, and the entry is overwritten by the next `put`.
    pub(crate) fn get(&self, engine: &Engine, sha256: &str) -> Option<Component> {
        let key = self.key.as_ref()?;
        let path = self.entry(sha256);
        let refuse = |why: &str| {
            tracing::warn!(path = %path.display(), "ignoring compiled-code cache entry: {why}");
            None
        };
        std::fs::symlink_metadata(&path).ok()?;
        let Some(bytes) = read_owned(&path) else {
            return refuse("not a regular file of this user's that only they may write");
        };
        let Some(rest) = bytes.strip_prefix(MAGIC.as_slice()) else {
            return refuse("not in vagen's format");
        };
        if rest.len() < TAG {
            return refuse("truncated");
        }
        let (tag, code) = rest.split_at(TAG);
        if self.tag(key, sha256, code).verify_slice(tag).is_err() {
            return refuse("its tag does not match this plugin, engine and code");
        }
        // SAFETY: `code` is what `put` serialised for this plugin and engine: the tag, under a
        // key only this user can read, proves it; wasmtime also checks the engine header.
        match unsafe { Component::deserialize(engine, code) } {
            Ok(c) => Some(c),
            Err(e) => refuse(&e.to_string()),
        }
    }

    /// Stores compiled code atomically (temporary file + rename), so a reader never sees
    /// half an entry. Failure to cache is logged, never fatal.
    pub(crate) fn put(&self, sha256: &str, component: &Component) {
        let Some(key) = &self.key else { return };
        let result = (|| -> std::io::Result<()> {
            let code = component.serialize().map_err(std::io::Error::other)?;
            let tag = self.tag(key, sha256, &code).finalize().into_bytes();
            let tmp = self.dir.join(tmp_name(sha256));
            // A fresh name, created exclusively: never someone's file or link at that name.
            let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
            file.write_all(MAGIC)?;
            file.write_all(&tag)?;
            file.write_all(&code)?;
            std::fs::rename(&tmp, self.entry(sha256))
        })();
        if let Err(e) = result {
            tracing::warn!(dir = %self.dir.display(), error = %e, "could not write compiled-code cache");
        }
    }
}

/// A temporary file name unique to this process and call (runtimes in one process, as in
/// tests, write the same entries).
fn tmp_name(stem: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(".{stem}.{}.{n}.tmp", std::process::id())
}

/// The bytes of `path` if it is a regular file of this user's that nobody else may write:
/// opened without following a link or waiting on a pipe, and checked on the open file
/// before a byte is read (a FIFO or a link planted in the folder is refused, not read).
fn read_owned(path: &Path) -> Option<Vec<u8>> {
    let (file, meta) = vagen_files::open_regular(path, vagen_files::Links::Refuse).ok()?;
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    if meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return None;
    }
    vagen_files::read_capped(file, &meta, MAX_ENTRY_BYTES).ok()
}

/// Compiled code is a few times its plugin's size ([`crate::MAX_PLUGIN_BYTES`]).
const MAX_ENTRY_BYTES: u64 = 4 * crate::MAX_PLUGIN_BYTES;

/// Creates `dir` (0700) if needed, refuses a folder another user owns or may write, and
/// returns the cache's key (made on first use, 0600).
fn private_key(dir: &Path) -> Result<[u8; 32], String> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| format!("cannot create it: {e}"))?;
    let meta = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if !meta.is_dir() {
        return Err("it is not a folder".into());
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    if meta.uid() != unsafe { libc::getuid() } {
        return Err("it belongs to another user; use a folder of your own (VAGEN_CACHE_DIR)".into());
    }
    if meta.mode() & 0o022 != 0 {
        // Ours but group- or world-writable (an older vagen made it under umask 002): made
        // private before anything in it is trusted.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("others may write it and it cannot be made private: {e}"))?;
    }
    let path = dir.join("key");
    if std::fs::symlink_metadata(&path).is_ok() {
        let private = std::fs::symlink_metadata(&path).is_ok_and(|m| m.mode() & 0o077 == 0);
        return match read_owned(&path) {
            Some(bytes) if bytes.len() == 32 && private => Ok(bytes.try_into().expect("32 bytes")),
            _ => Err(format!("{} is not a private 32-byte key of this user's", path.display())),
        };
    }
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| format!("no randomness for a key: {e}"))?;
    // Created exclusively: of two processes starting at once, one writes, the other reads.
    let tmp = dir.join(tmp_name("key"));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&key))
        .and_then(|()| std::fs::hard_link(&tmp, &path));
    let _ = std::fs::remove_file(&tmp);
    match written {
        Ok(()) => Ok(key),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            read_owned(&path).and_then(|b| b.try_into().ok()).ok_or_else(|| "unreadable key".into())
        }
        Err(e) => Err(format!("cannot write its key: {e}")),
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

/// Authenticates small files a run keeps outside this cache (the judge's answers in
/// `RUN/judge-cache/`) under this user's private cache key, so an entry edited, moved to
/// another request or written by anyone without the key is not believed.
pub struct Sealer {
    key: [u8; 32],
}

/// Starts every sealed file: format tag, then the 32-byte tag, then the payload.
const SEALED: &[u8; 12] = b"vagen-seal-1";

impl Sealer {
    /// The key of the user's compiled-code cache folder (`$VAGEN_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/vagen/compiled`, else `~/.cache/vagen/compiled`); the reason why not
    /// where that folder is not private to this user.
    pub fn for_user() -> Result<Self, String> {
        let dir =
            default_cache_dir().ok_or("no cache folder: neither VAGEN_CACHE_DIR, XDG_CACHE_HOME nor HOME is set")?;
        private_key(&dir).map(|key| Sealer { key }).map_err(|why| format!("{}: {why}", dir.display()))
    }

    fn tag(&self, context: &[u8], payload: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key length");
        for part in [b"sealed\0".as_slice(), context, b"\0", payload] {
            mac.update(part);
        }
        mac
    }

    /// `payload` sealed for `context` (what the file answers, e.g. the request's digest).
    pub fn seal(&self, context: &[u8], payload: &[u8]) -> Vec<u8> {
        let tag = self.tag(context, payload).finalize().into_bytes();
        [SEALED.as_slice(), &tag, payload].concat()
    }

    /// The payload of the file at `path` if it is a regular file of this user's (opened
    /// without following links or waiting on a pipe), at most `max_bytes`, sealed by this
    /// key for `context`; `None` otherwise.
    pub fn open(&self, context: &[u8], path: &Path, max_bytes: u64) -> Option<Vec<u8>> {
        if std::fs::symlink_metadata(path).ok()?.len() > max_bytes + (SEALED.len() + TAG) as u64 {
            return None;
        }
        let bytes = read_owned(path)?;
        let rest = bytes.strip_prefix(SEALED.as_slice())?;
        if rest.len() < TAG || (rest.len() - TAG) as u64 > max_bytes {
            return None;
        }
        let (tag, payload) = rest.split_at(TAG);
        self.tag(context, payload).verify_slice(tag).ok()?;
        Some(payload.to_vec())
    }
}
