//! Sokoban's options. Defaults follow VAGEN (6×6, one box); presets give RAGEN's variants.

use serde::{Deserialize, Serialize};
use vagen_sdk::{EnvError, ObservationMode};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Room width in tiles, walls included (5..=16).
    pub width: u32,
    /// Room height in tiles, walls included (5..=16).
    pub height: u32,
    /// Boxes (and targets), 1..=width-2.
    pub boxes: u32,
    /// Depth of the reverse-play search that pulls boxes away from their targets; deeper
    /// gives harder levels and slower generation.
    pub search_depth: u32,
    /// Reward for every executed action (gym-sokoban: −0.1).
    pub step_reward: f64,
    /// Reward for pushing a box onto a target.
    pub box_on_target_reward: f64,
    /// Reward (usually negative) for pushing a box off a target.
    pub box_off_target_reward: f64,
    /// Reward when every box is on a target.
    pub solved_reward: f64,
    /// Actions read from one answer (VAGEN 3).
    pub max_actions_per_turn: u32,
    /// Actions per episode before it ends unsolved; 0 means no limit.
    pub max_actions_per_episode: u32,
    /// What separates actions in an answer (VAGEN `,`, RAGEN `||`).
    pub separator: String,
    /// What an observation shows.
    pub observation: ObservationMode,
    /// Pixels per tile in images (4..=64).
    pub tile_pixels: u32,
    /// The characters of the text grid.
    pub symbols: Symbols,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Symbols {
    pub wall: char,
    pub floor: char,
    pub target: char,
    #[serde(rename = "box")]
    pub box_: char,
    pub box_on_target: char,
    pub player: char,
    pub player_on_target: char,
}

impl Default for Symbols {
    fn default() -> Self {
        Self { wall: '#', floor: '_', target: 'O', box_: 'X', box_on_target: '√', player: 'P', player_on_target: 'S' }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            width: 6,
            height: 6,
            boxes: 1,
            search_depth: 30,
            step_reward: -0.1,
            box_on_target_reward: 1.0,
            box_off_target_reward: -1.0,
            solved_reward: 10.0,
            max_actions_per_turn: 3,
            max_actions_per_episode: 0,
            separator: ",".into(),
            observation: ObservationMode::Text,
            tile_pixels: 32,
            symbols: Symbols::default(),
        }
    }
}

/// `simple`: RAGEN's SimpleSokoban. `larger`: RAGEN's LargerSokoban (8×8, 2 boxes).
/// `different-grid-vocab`: RAGEN's alternate-symbol grid. `vagen-visual`: images only.
pub const PRESETS: &[(&str, &str)] = &[
    ("simple", r#"{"max_actions_per_turn": 5, "max_actions_per_episode": 10, "separator": "||"}"#),
    (
        "larger",
        r#"{"width": 8, "height": 8, "boxes": 2, "max_actions_per_turn": 5, "max_actions_per_episode": 10,
            "separator": "||"}"#,
    ),
    (
        "different-grid-vocab",
        r#"{"max_actions_per_turn": 5, "max_actions_per_episode": 10, "separator": "||",
            "symbols": {"wall": "█", "floor": "·", "target": "◎", "box": "▣", "box_on_target": "☑",
                        "player": "☺", "player_on_target": "☻"}}"#,
    ),
    ("vagen-visual", r#"{"observation": "image"}"#),
];

impl Config {
    pub fn validate(&self) -> Result<(), EnvError> {
        let bad = |m: String| Err(EnvError::BadConfig(m));
        for (name, v) in [("width", self.width), ("height", self.height)] {
            if !(5..=16).contains(&v) {
                return bad(format!("{name} must be in 5..=16, got {v}"));
            }
        }
        if self.boxes == 0 || self.boxes > self.width - 2 {
            return bad(format!("boxes must be in 1..={}, got {}", self.width - 2, self.boxes));
        }
        if !(1..=300).contains(&self.search_depth) {
            return bad(format!("search_depth must be in 1..=300, got {}", self.search_depth));
        }
        if self.max_actions_per_turn == 0 {
            return bad("max_actions_per_turn must be at least 1".into());
        }
        if self.separator.trim().is_empty() {
            return bad("separator must contain a visible character".into());
        }
        if !(4..=64).contains(&self.tile_pixels) {
            return bad(format!("tile_pixels must be in 4..=64, got {}", self.tile_pixels));
        }
        for (name, r) in [
            ("step_reward", self.step_reward),
            ("box_on_target_reward", self.box_on_target_reward),
            ("box_off_target_reward", self.box_off_target_reward),
            ("solved_reward", self.solved_reward),
        ] {
            if !r.is_finite() {
                return bad(format!("{name} must be finite"));
            }
        }
        let s = &self.symbols;
        let mut all = [s.wall, s.floor, s.target, s.box_, s.box_on_target, s.player, s.player_on_target];
        all.sort_unstable();
        if all.windows(2).any(|w| w[0] == w[1]) {
            return bad("symbols must all differ".into());
        }
        Ok(())
    }
}
