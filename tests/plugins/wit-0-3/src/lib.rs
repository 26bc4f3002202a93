//! `vagen:env@0.3.0`'s environment world, bound directly (the Rust SDK builds 0.2.0's, the
//! same contract): two actions, `A` and `B`, up to two per answer split on `,` (or `;` when
//! the config asks, which `action-space` tells the host); an episode ends after three turns.

#[cfg(target_family = "wasm")]
mod component {
    use std::cell::RefCell;

    wit_bindgen::generate!({
        world: "environment",
        path: "../../../wit/v0.3.0",
    });

    use exports::vagen::env::env::{Environment, Guest, GuestEnvironment};
    use vagen::env::types::{ActionSpace, EnvError, Manifest, Modality, Observation, StepResult};

    struct Plugin;

    struct Counter {
        separator: String,
        state: RefCell<(u32, bool)>,
    }

    fn text(turn: u32) -> Observation {
        Observation { text: format!("turn {turn}"), images: vec![] }
    }

    impl Guest for Plugin {
        type Environment = Counter;

        fn get_manifest() -> Manifest {
            Manifest {
                name: "wit-0-3".into(),
                version: "0.1.0".into(),
                description: "A 0.3.0 component.".into(),
                modalities: vec![Modality::Text],
                action_names: vec!["A".into(), "B".into()],
                action_separator: ",".into(),
                max_actions_per_turn: 2,
                default_max_turns: 3,
                default_config: r#"{"separator":","}"#.into(),
                has_oracle: false,
            }
        }
    }

    impl GuestEnvironment for Counter {
        fn create(config: String) -> Result<Environment, EnvError> {
            let separator = match config.replace(' ', "").as_str() {
                "" | "{}" | r#"{"separator":","}"# => ",",
                r#"{"separator":";"}"# => ";",
                other => return Err(EnvError::BadConfig(format!("unknown config {other}"))),
            };
            Ok(Environment::new(Counter { separator: separator.into(), state: RefCell::new((0, true)) }))
        }

        fn action_space(&self) -> ActionSpace {
            ActionSpace {
                action_names: vec!["A".into(), "B".into()],
                action_separator: self.separator.clone(),
                max_actions_per_turn: 2,
            }
        }

        fn system_prompt(&self) -> String {
            format!("Answer A or B, two at most, separated by {}.", self.separator)
        }

        fn reset(&self, _seed: u64) -> Result<Observation, EnvError> {
            *self.state.borrow_mut() = (0, true);
            Ok(text(0))
        }

        fn step(&self, answer: String) -> Result<StepResult, EnvError> {
            let mut state = self.state.borrow_mut();
            let pieces: Vec<&str> = answer.split(self.separator.as_str()).map(str::trim).take(2).collect();
            let valid = pieces.iter().take_while(|p| **p == "A" || **p == "B").count() as u32;
            state.0 += 1;
            state.1 &= valid as usize == pieces.len();
            let done = state.0 == 3;
            Ok(StepResult {
                observation: text(state.0),
                reward: f64::from(valid),
                done,
                success: done && state.1,
                valid_actions: valid,
                effective_actions: valid,
                metrics: vec![],
            })
        }

        fn describe_state(&self) -> String {
            format!("turn {}", self.state.borrow().0)
        }

        fn oracle(&self) -> Option<String> {
            None
        }
    }

    export!(Plugin);
}
