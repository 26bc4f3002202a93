//! Write a vagen environment in Rust.
//!
//! Implement [`Env`] (only `Config`, `new`, `reset` and `step` are required) and call
//! [`export_env!`] once. Built for `wasm32-wasip2`, the crate becomes one `.wasm` file that
//! `vagen-host --plugin` loads. See this crate's README for a complete minimal env.

mod actions;
mod config;
mod export;
mod render;
mod rng;
mod types;

pub use actions::{ActionSpec, ParsedActions};
pub use config::NoConfig;
pub use render::{Canvas, grid_text};
pub use rng::Rng;
pub use types::{EnvError, Image, Manifest, Modality, Observation, Step};

use serde::{Serialize, de::DeserializeOwned};

/// An environment. One value lives for many episodes: `reset` starts each one.
///
/// The SDK enforces the episode protocol around these methods: `step` before the first
/// `reset` or after a step that returned `done` is answered with
/// [`EnvError::InvalidState`] without calling your code.
pub trait Env: Sized + 'static {
    /// The configuration, read from the JSON object the host passes to `create`.
    /// Fields the JSON leaves out take their value from `Config::default()`; give the
    /// struct `#[serde(default, deny_unknown_fields)]` so typos are reported.
    type Config: Serialize + DeserializeOwned + Default;

    /// Builds an instance; reject invalid values with [`EnvError::BadConfig`].
    fn new(config: Self::Config) -> Result<Self, EnvError>;

    /// Starts an episode. Everything random must come from `seed` (see [`Rng`]).
    fn reset(&mut self, seed: u64) -> Observation;

    /// Executes the content of the agent's `<answer>` tag.
    fn step(&mut self, answer: &str) -> Step;

    /// Static facts. `name`, `version` and `description` left empty are filled from the
    /// plugin's Cargo package; `default_config` is filled from `Config::default()`.
    fn manifest() -> Manifest {
        Manifest::default()
    }

    /// Named partial configurations (JSON objects). A config `{"preset": "NAME", ...}`
    /// starts from the preset and then applies its own fields.
    fn presets() -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// The rules of the task, shown to the agent once.
    fn system_prompt(&self) -> String {
        String::new()
    }

    /// Ground truth about the current state in words, for reasoning rewards.
    fn describe_state(&self) -> String {
        String::new()
    }

    /// An expert answer for the current state. Set `Manifest::has_oracle` when provided.
    fn oracle(&self) -> Option<String> {
        None
    }
}

/// Exports an [`Env`] implementation as the plugin's `vagen:env/env` interface.
///
/// ```ignore
/// vagen_sdk::export_env!(MyEnv);
/// ```
#[macro_export]
macro_rules! export_env {
    ($ty:ty) => {
        impl $crate::__private::Package for $ty {
            const NAME: &'static str = env!("CARGO_PKG_NAME");
            const VERSION: &'static str = env!("CARGO_PKG_VERSION");
            const DESCRIPTION: &'static str = env!("CARGO_PKG_DESCRIPTION");
        }
        // Component exports exist only in WebAssembly builds; a native build of the same
        // crate (unit tests, the rlib) compiles the env without them.
        #[cfg(target_family = "wasm")]
        type __VagenExport = $crate::__private::Plugin<$ty>;
        #[cfg(target_family = "wasm")]
        $crate::__private::export!(__VagenExport with_types_in $crate::__private::bindings);
    };
}

#[doc(hidden)]
pub mod __private {
    pub use crate::export::{Package, Plugin};
    pub use bindings::export;

    #[allow(missing_docs, clippy::all)]
    pub mod bindings {
        wit_bindgen::generate!({
            world: "environment",
            path: "../../wit/v0.1.0",
            pub_export_macro: true,
            default_bindings_module: "vagen_sdk::__private::bindings",
        });
    }
}
