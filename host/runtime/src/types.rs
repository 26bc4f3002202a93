//! The host's types. Observations and manifests are `vagen-abi`'s, the same types env
//! authors use; generated WIT types are converted into them at the boundary (`bindings.rs`)
//! and checked against the [`Limits`](crate::Limits) on the way in (`checks.rs`).

use serde::Serialize;
use std::path::PathBuf;
pub use vagen_abi::{ActionSpace, IMAGE_MARKER, Image, Manifest, Modality, Observation};

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Metric {
    pub name: String,
    pub value: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepResult {
    pub observation: Observation,
    pub reward: f64,
    pub done: bool,
    pub success: bool,
    pub valid_actions: u32,
    pub effective_actions: u32,
    pub metrics: Vec<Metric>,
}

/// Facts about a loaded plugin file.
#[derive(Clone, Debug, Serialize)]
pub struct PluginInfo {
    pub path: PathBuf,
    pub sha256: String,
    /// What the build says determined it (`sha256:…`), from the component's
    /// `vagen-build-inputs` custom section: equal for two builds of the same source even
    /// where the toolchain cannot make their bytes equal (componentize-py).
    pub build_inputs: Option<String>,
    pub size_bytes: u64,
    /// `wasm` or `native`.
    pub kind: &'static str,
    /// The `vagen:env` version the plugin implements.
    pub wit_version: String,
    /// What the plugin imports (for `.wasm`, the WASI interfaces it links), each with what
    /// the sandbox lets it reach through it. Empty for native plugins, which reach all.
    pub imports: Vec<Import>,
    /// Time to compile, or to load the compiled code from the cache.
    pub load_ms: f64,
    pub from_cache: bool,
}

/// One imported interface and what the sandbox grants through it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Import {
    /// As imported, version included: `wasi:filesystem/preopens@0.2.0`.
    pub name: String,
    /// `denied` (nothing of the host's is reachable), `virtual` (a stand-in the host
    /// makes: seeded randomness, a virtual clock, an in-memory buffer), `granted` (works,
    /// but reaches no host resource) or `unknown` (missing from the sandbox's table:
    /// treat as granted).
    pub access: &'static str,
    /// How: what the guest gets when it calls in.
    pub how: &'static str,
}
