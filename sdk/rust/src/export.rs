//! The WebAssembly export: generated WIT types in, SDK types out.

use crate::__private::bindings::exports::vagen::env::env as wit_env;
use crate::__private::bindings::vagen::env::types as wit;
use crate::session::{Package, Session, manifest_of};
use crate::{Env, EnvError, Image, Modality, Observation};
use std::cell::RefCell;
use std::marker::PhantomData;

/// The exported component: `Plugin<MyEnv>`.
pub struct Plugin<T>(PhantomData<T>);

/// One exported `environment` resource. WIT methods take `&self`, hence the `RefCell`.
pub struct Instance<T>(RefCell<Session<T>>);

impl<T: Env + Package> wit_env::Guest for Plugin<T> {
    type Environment = Instance<T>;

    fn get_manifest() -> wit::Manifest {
        let m = manifest_of::<T>();
        wit::Manifest {
            name: m.name,
            version: m.version,
            description: m.description,
            modalities: m
                .modalities
                .iter()
                .map(|m| match m {
                    Modality::Text => wit::Modality::Text,
                    Modality::Image => wit::Modality::Image,
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
}

impl<T: Env + Package> wit_env::GuestEnvironment for Instance<T> {
    fn create(config: String) -> Result<wit_env::Environment, wit::EnvError> {
        let session = Session::<T>::create(&config).map_err(to_wit_error)?;
        Ok(wit_env::Environment::new(Instance(RefCell::new(session))))
    }

    fn action_space(&self) -> wit::ActionSpace {
        let a = self.0.borrow().action_space();
        wit::ActionSpace {
            action_names: a.action_names,
            action_separator: a.action_separator,
            max_actions_per_turn: a.max_actions_per_turn,
        }
    }

    fn system_prompt(&self) -> String {
        self.0.borrow().system_prompt()
    }

    fn reset(&self, seed: u64) -> Result<wit::Observation, wit::EnvError> {
        self.0.borrow_mut().reset(seed).map(to_wit_observation).map_err(to_wit_error)
    }

    fn step(&self, answer: String) -> Result<wit::StepResult, wit::EnvError> {
        let step = self.0.borrow_mut().step(&answer).map_err(to_wit_error)?;
        Ok(wit::StepResult {
            observation: to_wit_observation(step.observation),
            reward: step.reward,
            done: step.done,
            success: step.success,
            valid_actions: step.valid_actions,
            effective_actions: step.effective_actions,
            metrics: step.metrics.into_iter().map(|(name, value)| wit::Metric { name, value }).collect(),
        })
    }

    fn describe_state(&self) -> String {
        self.0.borrow().describe_state()
    }

    fn oracle(&self) -> Option<String> {
        self.0.borrow().oracle()
    }
}

fn to_wit_error(e: EnvError) -> wit::EnvError {
    match e {
        EnvError::BadConfig(m) => wit::EnvError::BadConfig(m),
        EnvError::InvalidState(m) => wit::EnvError::InvalidState(m),
        EnvError::Failed(m) => wit::EnvError::Failed(m),
    }
}

fn to_wit_observation(o: Observation) -> wit::Observation {
    wit::Observation {
        text: o.text,
        images: o.images.into_iter().map(|Image { width, height, rgb }| wit::Image { width, height, rgb }).collect(),
    }
}
