//! FrozenLake as VAGEN and RAGEN define it (see REFERENCE.md in the design notes):
//! a square lake of frozen tiles and holes, a start and a goal; the map comes from the
//! seed alone and always has a path from start to goal.

mod config;
mod map;
mod render;

pub use config::{Config, View};
pub use map::{Map, Move, Tile};
pub use vagen_sdk::ObservationMode;

use vagen_sdk::{
    ActionSpec, Env, EnvError, Manifest, Modality, Observation, Rng, Step, export_env, grid_observation,
    relative_position, turn_feedback,
};

pub const ACTIONS: [&str; 4] = ["Left", "Down", "Right", "Up"];

pub struct FrozenLake {
    config: Config,
    spec: ActionSpec,
    map: Map,
    player: (usize, usize),
    /// Decides slips; seeded from the episode seed so slippery episodes replay exactly.
    slip_rng: Rng,
    /// The episode's seed: the oracle's tie-breaks come from it.
    seed: u64,
    actions_taken: u32,
}

impl Env for FrozenLake {
    type Config = Config;

    fn new(config: Config) -> Result<Self, EnvError> {
        config.validate()?;
        let spec = ActionSpec::new(&ACTIONS, &config.separator, config.max_actions_per_turn as usize);
        let map = Map::generate(config.size as usize, config.frozen_prob, 0);
        let player = map.start;
        Ok(Self { config, spec, map, player, slip_rng: Rng::new(0), seed: 0, actions_taken: 0 })
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
        self.map = Map::generate(self.config.size as usize, self.config.frozen_prob, seed);
        self.player = self.map.start;
        self.slip_rng = Rng::new(seed ^ 0x5EED_5119_u64);
        self.seed = seed;
        self.actions_taken = 0;
        self.observe("")
    }

    fn step(&mut self, answer: &str) -> Step {
        let parsed = self.spec.parse(answer);
        let mut step = Step::default();
        let mut executed = Vec::new();
        for &action in &parsed.actions {
            if self.out_of_actions() {
                break;
            }
            let intended = Move::ALL[action];
            let actual = if self.config.slippery { self.slip(intended) } else { intended };
            let next = self.map.neighbour(self.player, actual);
            self.actions_taken += 1;
            step.valid_actions += 1;
            executed.push(ACTIONS[action]);
            if let Some(next) = next {
                step.effective_actions += 1;
                self.player = next;
            }
            if self.map.tile(self.player) != Tile::Frozen {
                break;
            }
        }
        let tile = self.map.tile(self.player);
        step.success = tile == Tile::Goal;
        step.done = tile != Tile::Frozen || self.out_of_actions();
        step.reward = match tile {
            Tile::Goal => self.config.success_reward,
            Tile::Hole => self.config.hole_reward,
            Tile::Frozen => 0.0,
        } + self.config.step_reward * f64::from(step.valid_actions);
        let mut feedback = turn_feedback(
            &executed,
            step.valid_actions - step.effective_actions,
            "hit the edge of the lake and had no effect",
            parsed.invalid.first().map(String::as_str),
            &ACTIONS,
        );
        match tile {
            Tile::Goal => feedback.push_str(" You reached the goal."),
            Tile::Hole => feedback.push_str(" You fell into a hole."),
            Tile::Frozen if step.done => feedback.push_str(" No actions are left in this episode."),
            Tile::Frozen => {}
        }
        step.observation = self.observe(&feedback);
        let distance = self.map.steps_from(self.player).map_or(-1.0, |d| d as f64);
        step.metrics =
            vec![("distance-to-goal".into(), distance), ("invalid-actions".into(), parsed.invalid.len() as f64)];
        step
    }

    fn system_prompt(&self) -> String {
        let c = &self.config;
        let slip = if c.slippery {
            "The ice is slippery: a move goes in the intended direction only one time in three; otherwise you slide to one of the two perpendicular sides.\n"
        } else {
            ""
        };
        format!(
            "You are a FrozenLake solver.\n\
             FrozenLake Quick Guide\n\
             Goal: reach the goal (G) without falling into a hole.\n\
             Symbols: _ frozen tile, O hole, G goal, P player, X player fell into a hole, √ player on the goal.\n\
             Rules:\n\
             1. Avoid falling into holes (O).\n\
             2. Frozen tiles (_) are safe to walk on.\n\
             3. Moving into the edge of the lake leaves you where you are.\n\
             {slip}\
             Actions you can take: {}.\n\
             You can take up to {} action(s) at a time, separated by {:?}.",
            ACTIONS.join(", "),
            c.max_actions_per_turn,
            c.separator,
        )
    }

    /// The goal relative to the player, then the moves that would fall into a hole: a fixed
    /// shape a small model can read. Listing only the dangerous moves puts a move's name in
    /// the text exactly when it is one to avoid; "Left: hole, Down: ice, …" (every move
    /// with what it reaches) asked the embedded model to bind each entry to its move, which
    /// it had not learnt after 80 SFT steps nor 40 RL steps (docs/architecture.md). A list
    /// of every hole's position was not learnable at all within the CPU demo's budget.
    fn describe_state(&self) -> String {
        let holes: Vec<&str> = Move::ALL
            .iter()
            .filter(|&&m| self.map.neighbour(self.player, m).map(|p| self.map.tile(p)) == Some(Tile::Hole))
            .map(|&m| ACTIONS[m as usize])
            .collect();
        let goal = relative_position(self.player, self.map.goal);
        match holes.as_slice() {
            [] => format!("The goal is {goal}. No hole next to you."),
            holes => format!("The goal is {goal}. Holes next to you: {}.", holes.join(", ")),
        }
    }

    /// A shortest path's moves, each drawn among the equally short ones by the episode seed
    /// and the actions taken so far (so a replay gets the same answers). A fixed tie-break
    /// (always Down before Right) taught the model that preference; in a state where the
    /// preferred move is a hole, every episode of an RL group then stepped in alike and no
    /// group ever compared it with the safe move (docs/architecture.md, "Training loop").
    fn oracle(&self) -> Option<String> {
        let steps = self.map.steps_to_goal();
        let mut rng = Rng::new(self.seed ^ u64::from(self.actions_taken).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut at = self.player;
        let mut moves = Vec::new();
        while moves.len() < self.spec.max_per_turn {
            let options = self.map.shortest_moves(at, &steps);
            let Some(&m) = rng.choose(&options) else { break };
            moves.push(m as usize);
            at = self.map.neighbour(at, m)?;
        }
        (!moves.is_empty()).then(|| self.spec.join(&moves))
    }
}

impl FrozenLake {
    fn out_of_actions(&self) -> bool {
        self.config.max_actions_per_episode > 0 && self.actions_taken >= self.config.max_actions_per_episode
    }

    fn slip(&mut self, intended: Move) -> Move {
        match self.slip_rng.below(3) {
            0 => intended,
            1 => intended.turn_left(),
            _ => intended.turn_right(),
        }
    }

    fn observe(&self, feedback: &str) -> Observation {
        let c = &self.config;
        grid_observation(
            feedback,
            c.observation,
            || render::text(&self.map, self.player),
            || render::image(&self.map, self.player, c.image_size, c.view),
        )
    }
}

export_env!(FrozenLake);

#[cfg(test)]
mod tests;
