//! The host's own types. Generated WIT types are converted into these at the boundary
//! (`bindings.rs`), checked against the [`Limits`](crate::Limits) on the way in.

use serde::Serialize;
use std::path::PathBuf;

/// An RGB8 image, row-major, `rgb.len() == width * height * 3`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Image {
    pub width: u32,
    pub height: u32,
    #[serde(skip)]
    pub rgb: Vec<u8>,
}

/// What the agent sees; `text` holds one `<image>` marker per image, in order.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Observation {
    pub text: String,
    pub images: Vec<Image>,
}

/// The marker an observation's text carries for each image.
pub const IMAGE_MARKER: &str = "<image>";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Modality {
    Text,
    Image,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Manifest {
    pub name: String,
    pub version: String,
    pub description: String,
    pub modalities: Vec<Modality>,
    pub action_names: Vec<String>,
    pub action_separator: String,
    pub max_actions_per_turn: u32,
    pub default_max_turns: u32,
    pub default_config: String,
    pub has_oracle: bool,
}

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
    pub size_bytes: u64,
    /// `wasm` or `native`.
    pub kind: &'static str,
    /// The `vagen:env` version the plugin implements.
    pub wit_version: String,
    /// What the plugin imports (for `.wasm`, the WASI interfaces it links).
    pub imports: Vec<String>,
    /// Time to compile, or to load the compiled code from the cache.
    pub load_ms: f64,
    pub from_cache: bool,
}
