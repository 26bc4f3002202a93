//! One env instance and the episode protocol around it, shared by the WebAssembly and the
//! native exports: no step before reset or after done, oracle only while running.

use crate::{ActionSpace, Env, EnvError, Manifest, Observation, Step, config};

/// Package facts `export_env!` takes from the plugin's Cargo.toml.
pub trait Package {
    /// The package name (the manifest's `name` when the env leaves it empty).
    const NAME: &'static str;
    /// The package version.
    const VERSION: &'static str;
    /// The package description.
    const DESCRIPTION: &'static str;
}

/// The manifest with package facts and the default config filled in.
pub fn manifest_of<T: Env + Package>() -> Manifest {
    let mut m = T::manifest();
    for (field, value) in [(&mut m.name, T::NAME), (&mut m.version, T::VERSION), (&mut m.description, T::DESCRIPTION)] {
        if field.is_empty() {
            *field = value.to_string();
        }
    }
    if m.default_config.is_empty() {
        m.default_config = config::default_json::<T::Config>();
    }
    m
}

pub struct Session<T> {
    env: T,
    phase: Phase,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    BeforeReset,
    Running,
    Done,
}

impl<T: Env> Session<T> {
    pub fn create(config: &str) -> Result<Self, EnvError> {
        let config = config::resolve::<T::Config>(config, T::presets())?;
        Ok(Self { env: T::new(config)?, phase: Phase::BeforeReset })
    }

    /// The instance's own action spec when it has one, else the manifest's fields.
    pub fn action_space(&self) -> ActionSpace
    where
        T: Package,
    {
        match self.env.action_spec() {
            Some(spec) => ActionSpace {
                action_names: spec.names.clone(),
                action_separator: spec.separator.clone(),
                max_actions_per_turn: u32::try_from(spec.max_per_turn).unwrap_or(u32::MAX),
            },
            None => ActionSpace::of(&manifest_of::<T>()),
        }
    }

    pub fn system_prompt(&self) -> String {
        self.env.system_prompt()
    }

    pub fn reset(&mut self, seed: u64) -> Result<Observation, EnvError> {
        // A failed reset leaves no episode running: a step after it is refused.
        self.phase = Phase::BeforeReset;
        let obs = self.env.try_reset(seed)?;
        self.phase = Phase::Running;
        Ok(obs)
    }

    pub fn step(&mut self, answer: &str) -> Result<Step, EnvError> {
        match self.phase {
            Phase::BeforeReset => return Err(EnvError::InvalidState("step called before reset".into())),
            Phase::Done => {
                return Err(EnvError::InvalidState("step called after the episode ended; call reset".into()));
            }
            Phase::Running => {}
        }
        let step = self.env.try_step(answer)?;
        if step.done {
            self.phase = Phase::Done;
        }
        Ok(step)
    }

    pub fn describe_state(&self) -> String {
        self.env.describe_state()
    }

    pub fn oracle(&self) -> Option<String> {
        if self.phase == Phase::Running { self.env.oracle() } else { None }
    }
}
