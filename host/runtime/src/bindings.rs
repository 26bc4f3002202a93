//! Host bindings for `wit/v0.1.0` and their conversion into the host's types.

use crate::{Error, Image, Manifest, Metric, Modality, Observation, StepResult};

wasmtime::component::bindgen!({
    world: "environment",
    path: "../../wit/v0.1.0",
});

pub(crate) use exports::vagen::env::env as wit_env;
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
        images: o.images.into_iter().map(|i| Image { width: i.width, height: i.height, rgb: i.rgb }).collect(),
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
        wit::EnvError::BadConfig(m) => Error::BadConfig(m),
        wit::EnvError::InvalidState(m) => Error::InvalidState(m),
        wit::EnvError::Failed(message) => Error::Failed { call, message },
    }
}
