//! Write a vagen environment in Rust.
//!
//! Implement [`Env`] (only `Config`, `new`, `reset` and `step` are required) and call
//! [`export_env!`] once. Built for `wasm32-wasip2`, the crate becomes one `.wasm` file that
//! `vagen-host --plugin` loads. See this crate's README for a complete minimal env.
//! This documentation (`cargo doc -p vagen-sdk`) is the API reference: every public item
//! has a line (`missing_docs` is denied).

#![deny(missing_docs)]

mod actions;
mod config;
#[cfg(target_family = "wasm")]
mod export;
#[cfg(not(target_family = "wasm"))]
#[doc(hidden)]
pub mod native;
mod render;
pub mod reward;
#[cfg(target_family = "wasm")]
mod reward_export;
mod rng;
mod session;
mod words;

pub use actions::{ActionSpec, MAX_ANSWER_LEN, ParsedActions, too_long};
pub use config::NoConfig;
pub use render::{Canvas, ObservationMode, grid_observation, grid_text};
pub use rng::Rng;
pub use vagen_abi::{ActionSpace, EnvError, Image, Manifest, Modality, Observation, Step};
pub use words::{echo, relative_position, turn_feedback};

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

    /// `reset` for an env that can fail to start an episode (a level file that will not
    /// parse, a simulator that refuses a seed): return [`EnvError::Failed`] and the host
    /// ends the episode as failed, naming your message, instead of seeing a trap. The SDK
    /// calls this one; by default it is `reset`.
    fn try_reset(&mut self, seed: u64) -> Result<Observation, EnvError> {
        Ok(self.reset(seed))
    }

    /// `step` for an env that can fail to carry out an answer (not an invalid action,
    /// which is a normal [`Step`] with `valid_actions = 0`). By default it is `step`.
    fn try_step(&mut self, answer: &str) -> Result<Step, EnvError> {
        Ok(self.step(answer))
    }

    /// Static facts. `name`, `version` and `description` left empty are filled from the
    /// plugin's Cargo package; `default_config` is filled from `Config::default()`.
    fn manifest() -> Manifest {
        Manifest::default()
    }

    /// How this instance reads actions, when its config can change the manifest's action
    /// fields (separator, actions per turn): return the [`ActionSpec`] `step` parses with,
    /// and the host's random policy, fuzzer and answer parsing follow it. `None` (the
    /// default): the manifest's fields hold for every instance.
    fn action_spec(&self) -> Option<&ActionSpec> {
        None
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

/// What the host's JSON config becomes for `E`: defaults, then the `"preset"` it names,
/// then its own fields (as `create` resolves it; handy in an env's tests).
pub fn resolve_config<E: Env>(json: &str) -> Result<E::Config, EnvError> {
    config::resolve::<E::Config>(json, E::presets())
}

/// Exports an [`Env`] implementation: built for WebAssembly, as the component's
/// `vagen:env/env` interface; built natively (a `cdylib`), as the versioned C ABI of
/// native plugins (see the `vagen-abi` crate).
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
        #[cfg(target_family = "wasm")]
        type __VagenExport = $crate::__private::Plugin<$ty>;
        #[cfg(target_family = "wasm")]
        $crate::__private::export!(__VagenExport with_types_in $crate::__private::bindings);

        #[cfg(not(target_family = "wasm"))]
        const _: () = {
            use $crate::__private::native as n;
            #[unsafe(no_mangle)]
            pub extern "C" fn vagen_native_abi_version() -> u32 {
                n::ABI_VERSION
            }
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn vagen_native_manifest(out: *mut n::Buffer) -> i32 {
                unsafe { n::manifest::<$ty>(out) }
            }
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn vagen_native_create(
                config: *const u8,
                len: usize,
                env: *mut *mut ::std::ffi::c_void,
                out: *mut n::Buffer,
            ) -> i32 {
                unsafe { n::create::<$ty>(config, len, env, out) }
            }
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn vagen_native_call(
                env: *mut ::std::ffi::c_void,
                op: u32,
                arg: *const u8,
                len: usize,
                out: *mut n::Buffer,
            ) -> i32 {
                unsafe { n::call::<$ty>(env, op, arg, len, out) }
            }
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn vagen_native_destroy(env: *mut ::std::ffi::c_void) {
                unsafe { n::destroy::<$ty>(env) }
            }
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn vagen_native_free(buf: n::Buffer) {
                unsafe { n::free(buf) }
            }
        };
    };
}

#[doc(hidden)]
pub mod __private {
    #[cfg(target_family = "wasm")]
    pub use crate::export::Plugin;
    #[cfg(not(target_family = "wasm"))]
    pub use crate::native;
    pub use crate::reward::RewardPackage;
    #[cfg(target_family = "wasm")]
    pub use crate::reward_export::RewardComponent;
    pub use crate::session::Package;
    #[cfg(target_family = "wasm")]
    pub use bindings::export;
    #[cfg(target_family = "wasm")]
    pub use reward_bindings::export as export_reward_world;

    #[cfg(target_family = "wasm")]
    #[allow(missing_docs, clippy::all)]
    pub mod bindings {
        wit_bindgen::generate!({
            world: "environment",
            path: "../../wit/v0.2.0",
            pub_export_macro: true,
            default_bindings_module: "vagen_sdk::__private::bindings",
        });
    }

    #[cfg(target_family = "wasm")]
    #[allow(missing_docs, clippy::all)]
    pub mod reward_bindings {
        wit_bindgen::generate!({
            world: "reward-function",
            path: "../../wit/v0.3.0",
            pub_export_macro: true,
            default_bindings_module: "vagen_sdk::__private::reward_bindings",
        });
    }
}
