//! FrozenLake's options. Defaults are VAGEN's; `{"preset": "ragen"}` gives RAGEN's.

use serde::{Deserialize, Serialize};
use vagen_sdk::{EnvError, ObservationMode};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Side length of the square lake, in tiles (2..=32).
    pub size: u32,
    /// Probability that a tile other than start and goal is frozen (walkable), in (0, 1].
    pub frozen_prob: f64,
    /// RAGEN's slippery ice: a move goes as intended with probability 1/3 and to each
    /// perpendicular side with 1/3.
    pub slippery: bool,
    /// Reward for reaching the goal (VAGEN 10, RAGEN 1).
    pub success_reward: f64,
    /// Reward for falling into a hole.
    pub hole_reward: f64,
    /// Reward per executed action (e.g. a small negative cost).
    pub step_reward: f64,
    /// Actions read from one answer; the rest are ignored (VAGEN 3).
    pub max_actions_per_turn: u32,
    /// Actions per episode before it ends unsuccessfully; 0 means no limit (RAGEN 10).
    pub max_actions_per_episode: u32,
    /// What separates actions in an answer (VAGEN `,`, RAGEN `||`).
    pub separator: String,
    /// What an observation shows: the text grid, an image, or both.
    pub observation: ObservationMode,
    /// Side of the square image in pixels (16..=1024).
    pub image_size: u32,
    /// What the image frames: `top-down` (the whole lake) or `centered` (2·size − 1 cells
    /// a side around the player, off-lake cells dark: the player is always the middle cell).
    pub view: View,
}

/// How the image frames the lake.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum View {
    #[default]
    TopDown,
    Centered,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            size: 4,
            frozen_prob: 0.8,
            slippery: false,
            success_reward: 10.0,
            hole_reward: 0.0,
            step_reward: 0.0,
            max_actions_per_turn: 3,
            max_actions_per_episode: 0,
            separator: ",".into(),
            observation: ObservationMode::Text,
            image_size: 256,
            view: View::TopDown,
        }
    }
}

/// `ragen`: RAGEN's FrozenLake. `vagen-visual`: VAGEN's image observations.
pub const PRESETS: &[(&str, &str)] = &[
    (
        "ragen",
        r#"{"slippery": true, "success_reward": 1.0, "max_actions_per_turn": 5,
            "max_actions_per_episode": 10, "separator": "||"}"#,
    ),
    ("vagen-visual", r#"{"observation": "image"}"#),
];

impl Config {
    pub fn validate(&self) -> Result<(), EnvError> {
        let bad = |m: String| Err(EnvError::BadConfig(m));
        if !(2..=32).contains(&self.size) {
            return bad(format!("size must be in 2..=32, got {}", self.size));
        }
        if !(self.frozen_prob > 0.0 && self.frozen_prob <= 1.0) {
            return bad(format!("frozen_prob must be in (0, 1], got {}", self.frozen_prob));
        }
        if self.max_actions_per_turn == 0 {
            return bad("max_actions_per_turn must be at least 1".into());
        }
        if self.separator.trim().is_empty() {
            return bad("separator must contain a visible character".into());
        }
        if !(16..=1024).contains(&self.image_size) {
            return bad(format!("image_size must be in 16..=1024, got {}", self.image_size));
        }
        for (name, r) in [
            ("success_reward", self.success_reward),
            ("hole_reward", self.hole_reward),
            ("step_reward", self.step_reward),
        ] {
            if !r.is_finite() {
                return bad(format!("{name} must be finite"));
            }
        }
        Ok(())
    }
}
