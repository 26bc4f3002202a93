//! Components shared through OCI registries, the way `wkg` and ORAS share them: the CNCF
//! "Wasm OCI artifact" layout (an `application/vnd.wasm.config.v0+json` config and one
//! `application/wasm` layer), pulled into a content-addressed cache and verified against
//! its digest, cosign signatures checked against the user's public key, and `vagen.lock`
//! pinning every reference a config names.
//!
//! Everything is blocking: each call runs the async clients on a private runtime on its
//! own thread, so callers inside or outside a tokio runtime use it alike.

mod auth;
mod cache;
mod error;
pub mod lock;
pub mod metadata;
mod metadata_files;
mod pull;
mod push;
pub mod reference;
mod remote;
mod sign;
mod trust;

pub use auth::Credentials;
pub use error::Error;
pub use lock::Lock;
pub use pull::{Fetched, fetch, resolve};
pub use push::{Pushed, push};
pub use reference::{OciRef, is_oci};
pub use sign::{KeyPair, Signer, generate_key_pair};
pub use trust::{Trust, set_trust, trust};

/// The layout's media types (the CNCF TAG Runtime's Wasm OCI artifact).
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";
pub const MANIFEST_MEDIA_TYPE: &str = oci_client::manifest::OCI_IMAGE_MEDIA_TYPE;

/// The most bytes a component pulled from a registry may have (as a local plugin file).
pub const MAX_COMPONENT_BYTES: u64 = 1 << 30;
