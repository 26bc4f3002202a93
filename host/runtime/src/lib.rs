//! vagen-runtime: loads environment plugins and runs them in a sandbox.
//!
//! The rest of the host sees one [`Environment`] trait. A [`Runtime`] owns the shared
//! wasmtime engine, the compiled-code cache and the sandbox [`Limits`];
//! [`Runtime::load`] turns a `.wasm` component ([`WasmPlugin`]) or a native `.so`
//! ([`NativePlugin`]) into a [`Plugin`], which creates any number of instances.
//! [`EnvPool`] steps many instances in parallel.

mod bindings;
mod cache;
mod checks;
pub mod conformance;
mod environment;
mod error;
pub mod fuzz;
mod guest_text;
mod limits;
mod native;
mod pool;
mod random_answer;
mod runtime;
mod sandbox;
mod types;
mod wasm;

pub use environment::{Environment, Plugin};
pub use error::Error;
pub use guest_text::{MAX_GUEST_TEXT, file_stem, guest_text};
pub use limits::{LimitError, Limits};
pub use native::{NativeEnv, NativePlugin};
pub use pool::EnvPool;
pub use random_answer::random_answer;
pub use runtime::{MAX_PLUGIN_BYTES, Runtime, is_native_name};
pub use types::{
    ActionSpace, IMAGE_MARKER, Image, Import, Manifest, Metric, Modality, Observation, PluginInfo, StepResult,
};
pub use wasm::{WasmEnv, WasmPlugin};

/// The WIT package version this host implements; it also loads every older one
/// (`wit/` holds each).
pub const WIT_VERSION: &str = "0.2.0";
