//! Sokoban as RAGEN and VAGEN play it (REFERENCE.md in the design notes): push every box
//! onto a target. Levels come from the seed alone, by reverse play, and are solvable by
//! construction; the oracle is an optimal breadth-first solver.

mod config;
mod generate;
mod level;
mod render;
mod solve;

pub use config::{Config, Symbols};
pub use generate::{Params, generate};
pub use level::{Cell, Dir, Level, Outcome};
pub use solve::solve;
pub use vagen_sdk::ObservationMode;

use vagen_sdk::{
    ActionSpec, Env, EnvError, Manifest, Modality, Observation, Step, export_env, grid_observation, relative_position,
    turn_feedback,
};

pub const ACTIONS: [&str; 4] = ["Up", "Down", "Left", "Right"];

pub struct Sokoban {
    config: Config,
    spec: ActionSpec,
    level: Level,
    actions_taken: u32,
}

impl Sokoban {
    fn params(&self) -> Params {
        Params {
            width: self.config.width as usize,
            height: self.config.height as usize,
            boxes: self.config.boxes as usize,
            search_depth: self.config.search_depth as usize,
        }
    }

    pub fn level(&self) -> &Level {
        &self.level
    }

    fn out_of_actions(&self) -> bool {
        self.config.max_actions_per_episode > 0 && self.actions_taken >= self.config.max_actions_per_episode
    }

    fn observe(&self, feedback: &str) -> Observation {
        let c = &self.config;
        grid_observation(
            feedback,
            c.observation,
            || render::text(&self.level, &c.symbols),
            || render::image(&self.level, c.tile_pixels),
        )
    }
}

impl Env for Sokoban {
    type Config = Config;

    fn new(config: Config) -> Result<Self, EnvError> {
        config.validate()?;
        let spec = ActionSpec::new(&ACTIONS, &config.separator, config.max_actions_per_turn as usize);
        let mut env = Self { config, spec, level: Level::default_empty(), actions_taken: 0 };
        env.level = generate(&env.params(), 0);
        Ok(env)
    }

    fn manifest() -> Manifest {
        let c = Config::default();
        Manifest {
            modalities: vec![Modality::Text, Modality::Image],
            action_names: ACTIONS.iter().map(|s| s.to_string()).collect(),
            action_separator: c.separator,
            max_actions_per_turn: c.max_actions_per_turn,
            default_max_turns: 10,
            has_oracle: true,
            ..Manifest::default()
        }
    }

    fn action_spec(&self) -> Option<&ActionSpec> {
        Some(&self.spec)
    }

    fn presets() -> &'static [(&'static str, &'static str)] {
        config::PRESETS
    }

    fn reset(&mut self, seed: u64) -> Observation {
        self.level = generate(&self.params(), seed);
        self.actions_taken = 0;
        self.observe("")
    }

    fn step(&mut self, answer: &str) -> Step {
        let parsed = self.spec.parse(answer);
        let c = &self.config;
        let mut step = Step::default();
        let mut executed = Vec::new();
        for &a in &parsed.actions {
            if self.out_of_actions() || self.level.solved() {
                break;
            }
            self.actions_taken += 1;
            step.valid_actions += 1;
            executed.push(ACTIONS[a]);
            step.reward += c.step_reward;
            match self.level.push(Dir::ALL[a]) {
                Outcome::Blocked => {}
                Outcome::Walked => step.effective_actions += 1,
                Outcome::Pushed { left_target, on_target } => {
                    step.effective_actions += 1;
                    if left_target && !on_target {
                        step.reward += c.box_off_target_reward;
                    }
                    if on_target && !left_target {
                        step.reward += c.box_on_target_reward;
                    }
                }
            }
        }
        step.success = self.level.solved();
        if step.success {
            step.reward += c.solved_reward;
        }
        step.done = step.success || self.out_of_actions();
        let mut feedback = turn_feedback(
            &executed,
            step.valid_actions - step.effective_actions,
            "were blocked by a wall or an immovable box",
            parsed.invalid.first().map(String::as_str),
            &ACTIONS,
        );
        if step.success {
            feedback.push_str(" Every box is on a target: solved.");
        } else if step.done {
            feedback.push_str(" No actions are left in this episode.");
        }
        step.observation = self.observe(&feedback);
        step.metrics = vec![
            ("boxes-on-targets".into(), self.level.boxes_on_targets() as f64),
            ("invalid-actions".into(), parsed.invalid.len() as f64),
        ];
        step
    }

    fn system_prompt(&self) -> String {
        let c = &self.config;
        let s = &c.symbols;
        format!(
            "You are a Sokoban solver.\n\
             Sokoban Quick Guide\n\
             Goal: push every box onto a target.\n\
             Symbols: {} wall, {} floor, {} target, {} box, {} box on a target, {} you, {} you on a target.\n\
             Rules:\n\
             1. You move one tile per action; walking into a box pushes it one tile further.\n\
             2. A box cannot be pushed into a wall or into another box, and boxes cannot be pulled.\n\
             3. A box pushed into a corner can never be moved out again.\n\
             Rewards: {:+} per action, {:+} for a box onto a target, {:+} for a box off a target, {:+} when solved.\n\
             Actions you can take: {}.\n\
             You can take up to {} action(s) at a time, separated by {:?}.",
            s.wall,
            s.floor,
            s.target,
            s.box_,
            s.box_on_target,
            s.player,
            s.player_on_target,
            c.step_reward,
            c.box_on_target_reward,
            c.box_off_target_reward,
            c.solved_reward,
            ACTIONS.join(", "),
            c.max_actions_per_turn,
            c.separator,
        )
    }

    fn describe_state(&self) -> String {
        let l = &self.level;
        let me = l.xy(l.player);
        let list = |ps: &mut dyn Iterator<Item = usize>| ps.map(|p| relative_position(me, l.xy(p))).collect::<Vec<_>>();
        let boxes = list(&mut l.boxes.iter().copied().filter(|&b| l.cells[b] != Cell::Target));
        let targets = list(&mut (0..l.cells.len()).filter(|&p| l.cells[p] == Cell::Target && !l.is_box(p)));
        let mut s = format!("{} of {} boxes are on targets.", l.boxes_on_targets(), l.boxes.len());
        if !boxes.is_empty() {
            s.push_str(&format!(" Boxes still to place: {}.", boxes.join("; ")));
        }
        if !targets.is_empty() {
            s.push_str(&format!(" Empty targets: {}.", targets.join("; ")));
        }
        s
    }

    fn oracle(&self) -> Option<String> {
        let plan = solve(&self.level)?;
        let moves: Vec<usize> = plan.iter().take(self.spec.max_per_turn).map(|d| *d as usize).collect();
        (!moves.is_empty()).then(|| self.spec.join(&moves))
    }
}

impl Level {
    fn default_empty() -> Level {
        Level { width: 0, height: 0, cells: Vec::new(), boxes: Vec::new(), player: 0 }
    }
}

export_env!(Sokoban);

#[cfg(test)]
mod tests;
