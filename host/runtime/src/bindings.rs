//! Host bindings for every WIT version the host loads (`wit/v0.1.0` to `wit/v0.3.0`), each
//! in its own module with the same conversions into the host's types, and the enums that
//! hold a component of either version.

use crate::sandbox::Sandbox;
use crate::{ActionSpace, Error, Image, Manifest, Metric, Modality, Observation, StepResult, guest_text};

/// One version's generated bindings and their conversions. The versions share every type
/// but `action-space`, so the conversions read the same in each.
macro_rules! wit_version {
    ($module:ident, $path:literal) => {
        pub(crate) mod $module {
            use super::*;

            wasmtime::component::bindgen!({
                world: "environment",
                path: $path,
            });

            pub(crate) use vagen::env::types as wit;

            pub(crate) fn manifest(m: wit::Manifest) -> Manifest {
                Manifest {
                    name: m.name,
                    version: m.version,
                    description: m.description,
                    modalities: m
                        .modalities
                        .into_iter()
                        .map(|m| match m {
                            wit::Modality::Text => Modality::Text,
                            wit::Modality::Image => Modality::Image,
                        })
                        .collect(),
                    action_names: m.action_names,
                    action_separator: m.action_separator,
                    max_actions_per_turn: m.max_actions_per_turn,
                    default_max_turns: m.default_max_turns,
                    default_config: m.default_config,
                    has_oracle: m.has_oracle,
                }
            }

            pub(crate) fn observation(o: wit::Observation) -> Observation {
                Observation {
                    text: o.text,
                    images: o
                        .images
                        .into_iter()
                        .map(|i| Image { width: i.width, height: i.height, rgb: i.rgb })
                        .collect(),
                }
            }

            pub(crate) fn step_result(s: wit::StepResult) -> StepResult {
                StepResult {
                    observation: observation(s.observation),
                    reward: s.reward,
                    done: s.done,
                    success: s.success,
                    valid_actions: s.valid_actions,
                    effective_actions: s.effective_actions,
                    metrics: s.metrics.into_iter().map(|m| Metric { name: m.name, value: m.value }).collect(),
                }
            }

            pub(crate) fn guest_error(e: wit::EnvError, call: &'static str) -> Error {
                match e {
                    wit::EnvError::BadConfig(m) => Error::BadConfig(guest_text(&m)),
                    wit::EnvError::InvalidState(m) => Error::InvalidState(guest_text(&m)),
                    wit::EnvError::Failed(m) => Error::Failed { call, message: guest_text(&m) },
                }
            }
        }
    };
}

wit_version!(v0_1, "../../wit/v0.1.0");
wit_version!(v0_2, "../../wit/v0.2.0");
wit_version!(v0_3, "../../wit/v0.3.0");

/// The versions this host loads, oldest first; components are written against the last.
pub(crate) const VERSIONS: [&str; 3] = ["0.1.0", "0.2.0", "0.3.0"];

pub(crate) fn action_space(a: v0_2::wit::ActionSpace) -> ActionSpace {
    ActionSpace {
        action_names: a.action_names,
        action_separator: a.action_separator,
        max_actions_per_turn: a.max_actions_per_turn,
    }
}

/// A type-checked component, pre-instantiated, of the version it exports.
pub(crate) enum Pre {
    V0_1(v0_1::EnvironmentPre<Sandbox>),
    V0_2(v0_2::EnvironmentPre<Sandbox>),
    /// 0.3.0's environment contract is 0.2.0's (0.3.0 adds reward functions).
    V0_3(v0_3::EnvironmentPre<Sandbox>),
}

/// One instantiated component.
pub(crate) enum Bindings {
    V0_1(v0_1::Environment),
    V0_2(v0_2::Environment),
    V0_3(v0_3::Environment),
}

/// Evaluates `$body` with `$v` naming the component's version module and `$env` its
/// `environment` resource interface, for a [`Bindings`] of either version.
macro_rules! with_env {
    ($bindings:expr, |$v:ident, $env:ident| $body:expr) => {
        match $bindings {
            $crate::bindings::Bindings::V0_1(b) => {
                #[allow(unused_imports)] // calls that convert nothing leave it unused
                use $crate::bindings::v0_1 as $v;
                let $env = b.vagen_env_env().environment();
                $body
            }
            $crate::bindings::Bindings::V0_2(b) => {
                #[allow(unused_imports)] // calls that convert nothing leave it unused
                use $crate::bindings::v0_2 as $v;
                let $env = b.vagen_env_env().environment();
                $body
            }
            $crate::bindings::Bindings::V0_3(b) => {
                #[allow(unused_imports)] // calls that convert nothing leave it unused
                use $crate::bindings::v0_3 as $v;
                let $env = b.vagen_env_env().environment();
                $body
            }
        }
    };
}
pub(crate) use with_env;
