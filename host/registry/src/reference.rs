//! `oci://REGISTRY/REPOSITORY[:TAG][@sha256:HEX]`: where a component lives in a registry.

use crate::Error;
use std::fmt;
use std::path::Path;

pub const SCHEME: &str = "oci://";

/// Whether a plugin name (as the CLI, a config or the Python package gives it) names a
/// registry reference rather than a file.
pub fn is_oci(name: &Path) -> bool {
    name.to_str().is_some_and(|s| s.starts_with(SCHEME))
}

/// A parsed reference. The registry is always explicit (`oci://ghcr.io/o/env:1.0.0`): no
/// Docker Hub default guesses where a component comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OciRef {
    pub(crate) inner: oci_client::Reference,
}

impl OciRef {
    pub fn parse(text: &str) -> Result<Self, Error> {
        let bad = |why: &str| Error::Reference { reference: text.into(), why: why.into() };
        let rest = text.strip_prefix(SCHEME).ok_or_else(|| bad("it does not start with oci://"))?;
        let (host, path) =
            rest.split_once('/').ok_or_else(|| bad("it names no repository (oci://REGISTRY/REPO:TAG)"))?;
        if path.is_empty() || !(host.contains('.') || host.contains(':') || host == "localhost") {
            return Err(bad(
                "the registry must be a host name (oci://REGISTRY/REPO:TAG, e.g. ghcr.io or 127.0.0.1:5000)",
            ));
        }
        if let Some((_, digest)) = rest.split_once('@')
            && !is_sha256(digest)
        {
            return Err(bad("its digest is not sha256:<64 hex digits>"));
        }
        let inner: oci_client::Reference = rest.parse().map_err(|e| {
            bad(&format!("{e} (REGISTRY/REPO:TAG, lower-case repository, tag of letters, digits, . _ -)"))
        })?;
        Ok(Self { inner })
    }

    pub fn registry(&self) -> &str {
        self.inner.registry()
    }

    pub fn repository(&self) -> &str {
        self.inner.repository()
    }

    pub fn tag(&self) -> Option<&str> {
        self.inner.tag()
    }

    /// `sha256:HEX`, where the reference pins one.
    pub fn digest(&self) -> Option<&str> {
        self.inner.digest()
    }

    /// This reference pinned to `digest` (the tag kept, for readers).
    pub fn pinned(&self, digest: &str) -> Self {
        let inner = match self.tag() {
            Some(tag) => oci_client::Reference::with_tag_and_digest(
                self.registry().into(),
                self.repository().into(),
                tag.into(),
                digest.into(),
            ),
            None => oci_client::Reference::with_digest(self.registry().into(), self.repository().into(), digest.into()),
        };
        Self { inner }
    }

    /// The registry is on this machine: spoken to over plain HTTP, as Docker and ORAS do
    /// for a local registry; every other one over HTTPS.
    pub(crate) fn is_loopback(&self) -> bool {
        let host = self.registry().rsplit_once(':').map_or(self.registry(), |(h, _)| h);
        host == "localhost" || host.starts_with("127.") || host == "[::1]"
    }
}

impl fmt::Display for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}", self.inner.whole())
    }
}

pub(crate) fn is_sha256(digest: &str) -> bool {
    digest
        .strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_reference_keeps_its_parts_and_prints_as_given() {
        let r = OciRef::parse("oci://127.0.0.1:5000/envs/frozenlake:1.0.0").unwrap();
        assert_eq!(
            (r.registry(), r.repository(), r.tag(), r.digest()),
            ("127.0.0.1:5000", "envs/frozenlake", Some("1.0.0"), None)
        );
        assert!(r.is_loopback());
        let p = r.pinned(D);
        assert_eq!(p.to_string(), format!("oci://127.0.0.1:5000/envs/frozenlake:1.0.0@{D}"));
        assert_eq!(OciRef::parse(&p.to_string()).unwrap(), p);
        assert!(!OciRef::parse("oci://ghcr.io/o/env:1").unwrap().is_loopback());
    }

    #[test]
    fn malformed_references_say_what_is_wrong() {
        let why = |s: &str| OciRef::parse(s).unwrap_err().to_string();
        assert!(why("ghcr.io/o/env:1").contains("oci://"));
        assert!(why("oci://ghcr.io").contains("no repository"));
        assert!(why("oci://library/env:1").contains("host name"));
        assert!(why("oci://ghcr.io/o/env@sha256:12").contains("digest"));
        assert!(why("oci://ghcr.io/o/env@md5:0123").contains("digest"));
        assert!(why("oci://ghcr.io/O/Env:1").contains("lower-case"));
    }
}
