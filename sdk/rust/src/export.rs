//! The glue `export_env!` instantiates: generated WIT types in, SDK types out, and the
//! episode protocol (no step before reset or after done) enforced in one place.

use crate::__private::bindings::exports::vagen::env::env as wit_env;
use crate::__private::bindings::vagen::env::types as wit;
use crate::{Env, EnvError, Image, Manifest, Modality, Observation, Step, config};
use std::cell::RefCell;
use std::marker::PhantomData;

/// Package facts `export_env!` takes from the plugin's Cargo.toml.
pub trait Package {
    const NAME: &'static str;
    const VERSION: &'static str;
    const DESCRIPTION: &'static str;
}

/// The exported component: `Plugin<MyEnv>`.
pub struct Plugin<T>(PhantomData<T>);

/// One exported `environment` resource.
pub struct Instance<T> {
    state: RefCell<State<T>>,
}

struct State<T> {
    env: T,
    phase: Phase,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    BeforeReset,
    Running,
    Done,
}

/// The manifest with package facts and the default config filled in.
pub fn manifest_of<T: Env + Package>() -> Manifest {
    let mut m = T::manifest();
    for (field, value) in [
        (&mut m.name, T::NAME),
        (&mut m.version, T::VERSION),
        (&mut m.description, T::DESCRIPTION),
    ] {
        if field.is_empty() {
            *field = value.to_string();
        }
    }
    if m.default_config.is_empty() {
        m.default_config = config::default_json::<T::Config>();
    }
    m
}

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
        let config = config::resolve::<T::Config>(&config, T::presets()).map_err(to_wit_error)?;
        let env = T::new(config).map_err(to_wit_error)?;
        Ok(wit_env::Environment::new(Instance {
            state: RefCell::new(State {
                env,
                phase: Phase::BeforeReset,
            }),
        }))
    }

    fn system_prompt(&self) -> String {
        self.state.borrow().env.system_prompt()
    }

    fn reset(&self, seed: u64) -> Result<wit::Observation, wit::EnvError> {
        let mut s = self.state.borrow_mut();
        let obs = s.env.reset(seed);
        s.phase = Phase::Running;
        Ok(to_wit_observation(obs))
    }

    fn step(&self, answer: String) -> Result<wit::StepResult, wit::EnvError> {
        let mut s = self.state.borrow_mut();
        match s.phase {
            Phase::BeforeReset => return Err(invalid("step called before reset")),
            Phase::Done => return Err(invalid("step called after the episode ended; call reset")),
            Phase::Running => {}
        }
        let step: Step = s.env.step(&answer);
        if step.done {
            s.phase = Phase::Done;
        }
        Ok(wit::StepResult {
            observation: to_wit_observation(step.observation),
            reward: step.reward,
            done: step.done,
            success: step.success,
            valid_actions: step.valid_actions,
            effective_actions: step.effective_actions,
            metrics: step
                .metrics
                .into_iter()
                .map(|(name, value)| wit::Metric { name, value })
                .collect(),
        })
    }

    fn describe_state(&self) -> String {
        self.state.borrow().env.describe_state()
    }

    fn oracle(&self) -> Option<String> {
        let s = self.state.borrow();
        if s.phase == Phase::Running {
            s.env.oracle()
        } else {
            None
        }
    }
}

fn invalid(msg: &str) -> wit::EnvError {
    wit::EnvError::InvalidState(msg.to_string())
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
        images: o
            .images
            .into_iter()
            .map(|Image { width, height, rgb }| wit::Image { width, height, rgb })
            .collect(),
    }
}
