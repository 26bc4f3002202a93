//! `vagen.lock`, beside a config: every `oci://` reference the config names, pinned to the
//! digest it had when locked (as `wkg.lock` and Cargo.lock pin theirs). A config loaded with
//! a lock beside it uses the locked digests; `vagen-host lock CONFIG` writes it.

use crate::{Credentials, Error, OciRef};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const FILE_NAME: &str = "vagen.lock";

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lock {
    /// Always 1 for now; a later format says so here.
    pub version: u32,
    #[serde(default, rename = "component")]
    pub components: Vec<Locked>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Locked {
    /// As the config names it.
    pub reference: String,
    /// `sha256:HEX`: the manifest the reference named when locked.
    pub digest: String,
}

/// The lock file for a config at `config`.
pub fn path_for(config: &Path) -> PathBuf {
    config.parent().unwrap_or(Path::new(".")).join(FILE_NAME)
}

impl Lock {
    /// The lock beside `config`, if there is one.
    pub fn beside(config: &Path) -> Result<Option<Self>, Error> {
        let path = path_for(config);
        if !path.is_file() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path).map_err(|e| Error::file(&path, e))?;
        let lock: Lock = toml::from_str(&text).map_err(|e| Error::file(&path, e))?;
        if lock.version != 1 {
            return Err(Error::file(&path, format!("version {} (this build reads version 1)", lock.version)));
        }
        for c in &lock.components {
            if !crate::reference::is_sha256(&c.digest) {
                return Err(Error::file(
                    &path,
                    format!("{}: digest {:?} is not sha256:<64 hex digits>", c.reference, c.digest),
                ));
            }
        }
        Ok(Some(lock))
    }

    /// Pins each `oci://` reference in `names` (tags asked of their registries now).
    pub fn resolve(names: &[String], credentials: &Credentials) -> Result<Self, Error> {
        let mut components = Vec::new();
        for name in names {
            if components.iter().any(|c: &Locked| &c.reference == name) {
                continue;
            }
            let pinned = crate::resolve(&OciRef::parse(name)?, credentials)?;
            components.push(Locked { reference: name.clone(), digest: pinned.digest().expect("pinned").into() });
        }
        Ok(Self { version: 1, components })
    }

    /// `name` pinned by this lock: unchanged when it is not an `oci://` reference, or pins a
    /// digest already; an error when the lock has no entry for it (lock again).
    pub fn pin(&self, name: &str, lock_path: &Path) -> Result<String, Error> {
        if !name.starts_with(crate::reference::SCHEME) {
            return Ok(name.into());
        }
        let r = OciRef::parse(name)?;
        if r.digest().is_some() {
            return Ok(name.into());
        }
        match self.components.iter().find(|c| c.reference == name) {
            Some(c) => Ok(r.pinned(&c.digest).to_string()),
            None => Err(Error::file(
                lock_path,
                format!("it does not pin {name}: run `vagen-host lock` on the config again"),
            )),
        }
    }

    pub fn to_toml(&self) -> String {
        let body = toml::to_string(self).expect("a lock serialises");
        format!(
            "# Written by `vagen-host lock`: the digest of every oci:// component the config beside it names.\n{body}"
        )
    }

    /// Writes the lock whole (aside, then renamed).
    pub fn write(&self, path: &Path) -> Result<(), Error> {
        let tmp = path.with_extension("lock.tmp");
        std::fs::write(&tmp, self.to_toml()).map_err(|e| Error::file(&tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| Error::file(path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_lock_pins_what_it_names_and_refuses_what_it_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("train.toml");
        let name = "oci://127.0.0.1:5000/envs/frozenlake:1.0.0";
        let lock = Lock { version: 1, components: vec![Locked { reference: name.into(), digest: D.into() }] };
        lock.write(&path_for(&config)).unwrap();
        let read = Lock::beside(&config).unwrap().unwrap();
        assert_eq!(read, lock);
        let lp = path_for(&config);
        assert_eq!(read.pin(name, &lp).unwrap(), format!("{name}@{D}"));
        assert_eq!(read.pin("env.wasm", &lp).unwrap(), "env.wasm");
        assert!(read.pin("oci://127.0.0.1:5000/envs/sokoban:1", &lp).unwrap_err().to_string().contains("lock"));
        std::fs::write(&lp, "version = 2\n").unwrap();
        assert!(Lock::beside(&config).unwrap_err().to_string().contains("version 2"));
    }
}
