//! vagen-runtime: loads environment plugins and runs them in a sandbox.
//!
//! The rest of the host sees one [`Environment`] trait. A [`Runtime`] owns the shared
//! wasmtime engine, the compiled-code cache and the sandbox [`Limits`];
//! [`Runtime::load`] turns a `.wasm` component ([`WasmPlugin`]) or a native `.so`
//! ([`NativePlugin`]) into a [`Plugin`], which creates any number of instances; an
//! `openenv+http://HOST:PORT` path names an OpenEnv server instead ([`OpenEnvPlugin`]).
//! [`EnvPool`] steps many instances in parallel.
//!
//! # Embedding
//!
//! This crate has no libtorch in it: any Rust program can load plugins and play episodes
//! with its own policy. Every failure is an [`Error`] variant: a plugin's fault
//! ([`Error::is_fault`]: timeout, out of memory or fuel, trap, malformed result) leaves
//! the instance re-created, ready for a `reset`; [`Error::BadConfig`] and
//! [`Error::InvalidState`] are the caller's to fix.
//!
//! ```
//! use vagen_runtime::{Error, Limits, Runtime};
//!
//! # fn main() -> Result<(), Error> {
//! let limits = Limits { call_timeout_ms: 500, ..Limits::default() };
//! let runtime = Runtime::new(limits)?;
//! # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/plugins/bandit.wasm");
//! // `cargo xtask plugins` builds the reference plugins into target/plugins/.
//! let plugin = runtime.load(path)?;
//! let mut env = plugin.create(r#"{}"#)?;
//! let first = env.reset(7)?; // the same seed always gives the same episode
//! println!("{}\n{}", env.system_prompt()?, first.text);
//! let step = env.step("Dragon")?;
//! println!("reward {} done {} success {}", step.reward, step.done, step.success);
//! // A step after the end is refused, typed.
//! assert!(matches!(env.step("Dragon"), Err(Error::InvalidState(_))));
//! // A config the plugin refuses names the problem.
//! match plugin.create(r#"{"no_such_option": 1}"#) {
//!     Err(Error::BadConfig(why)) => println!("refused: {why}"),
//!     other => panic!("expected a bad-config error, got {:?}", other.map(|_| ())),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! `examples/embed-rust` is a whole program: seeded episodes, a policy of its own, and
//! what to do on each kind of error.

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
pub mod openenv;
mod pool;
mod random_answer;
pub mod reward;
mod runtime;
mod sandbox;
mod types;
mod wasm;

pub use cache::Sealer;
pub use environment::{Environment, Plugin};
pub use error::Error;
pub use guest_text::{MAX_GUEST_TEXT, file_stem, guest_text};
pub use limits::{LimitError, Limits};
pub use native::{NativeEnv, NativePlugin};
pub use openenv::{OpenEnvEnv, OpenEnvOptions, OpenEnvPlugin, is_openenv_url};
pub use pool::EnvPool;
pub use random_answer::random_answer;
pub use runtime::{MAX_PLUGIN_BYTES, Runtime, is_native_name, locate};
pub use types::{
    ActionSpace, IMAGE_MARKER, Image, Import, Manifest, Metric, Modality, Observation, PluginInfo, StepResult,
};
pub use wasm::{WasmEnv, WasmPlugin};

/// The WIT package version this host implements; it also loads every older one
/// (`wit/` holds each).
pub const WIT_VERSION: &str = "0.2.0";
