//! Navigation's options. Defaults follow VAGEN's base split (one room, "navigate to the
//! X", 0.5 m moves, 1.5 m success radius, 5 actions a turn, 30 an episode); presets give
//! the other evaluation splits.

use serde::{Deserialize, Serialize};
use vagen_sdk::{EnvError, ObservationMode};

/// How the instruction names the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Instruction {
    /// "Navigate to the sofa." The target is the only one of its kind.
    Name,
    /// "Navigate to the blue chair." Two or three of its kind, in different colours.
    Colour,
    /// "Navigate to the chair next to the bed." Two of its kind; the other is farther away.
    Relation,
    /// "I want to watch the news. ..." The need, not the object, is named.
    CommonSense,
    /// A long request mixing colour, a neighbouring object and irrelevant detail.
    Complex,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Rooms in the house (1..=4), joined by 1 m doors.
    pub rooms: u32,
    /// Each room side is drawn from this range of whole metres (within 3..=12).
    pub room_size: [u32; 2],
    /// Objects placed in each room, drawn from this range (within 1..=8).
    pub objects_per_room: [u32; 2],
    /// How the target is named.
    pub instruction: Instruction,
    /// Start in another room than the target's (needs 2 rooms or more).
    pub target_in_other_room: bool,
    /// Straight-line distance from the start to the target, at least (metres).
    pub min_start_distance: f64,
    /// Metres per move action: 0.25, 0.5 or 1.
    pub step_size: f64,
    /// Success when the agent is this close to the target's centre (metres).
    pub success_distance: f64,
    /// Reward on success (VAGEN +10).
    pub success_reward: f64,
    /// Reward for every executed action.
    pub step_reward: f64,
    /// Actions read from one answer (VAGEN 5).
    pub max_actions_per_turn: u32,
    /// Actions per episode before it ends unsolved (VAGEN 30).
    pub max_actions_per_episode: u32,
    /// What separates actions in an answer.
    pub separator: String,
    /// Rendered view size in pixels (16..=1024).
    pub image_width: u32,
    pub image_height: u32,
    /// Horizontal field of view in degrees (30..=150).
    pub fov_degrees: f64,
    /// `image`: the rendered view; `text`: the visible objects in words (for text-only
    /// models); `text-and-image`: both.
    pub observation: ObservationMode,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            rooms: 1,
            room_size: [5, 8],
            objects_per_room: [4, 6],
            instruction: Instruction::Name,
            target_in_other_room: false,
            min_start_distance: 3.0,
            step_size: 0.5,
            success_distance: 1.5,
            success_reward: 10.0,
            step_reward: 0.0,
            max_actions_per_turn: 5,
            max_actions_per_episode: 30,
            separator: ",".into(),
            image_width: 256,
            image_height: 256,
            fov_degrees: 90.0,
            observation: ObservationMode::Image,
        }
    }
}

/// VAGEN's evaluation splits (EmbodiedBench's navigation subsets), a relation split, and
/// a text-observation variant for text-only models.
pub const PRESETS: &[(&str, &str)] = &[
    ("base", "{}"),
    ("common-sense", r#"{"instruction": "common-sense"}"#),
    ("complex-instruction", r#"{"instruction": "complex"}"#),
    ("visual-appearance", r#"{"instruction": "colour"}"#),
    ("spatial-relation", r#"{"instruction": "relation"}"#),
    (
        "long-horizon",
        r#"{"rooms": 3, "room_size": [4, 6], "objects_per_room": [3, 4], "target_in_other_room": true,
            "min_start_distance": 4.0, "max_actions_per_episode": 50}"#,
    ),
    ("text", r#"{"observation": "text"}"#),
];

impl Config {
    pub fn validate(&self) -> Result<(), EnvError> {
        let bad = |m: String| Err(EnvError::BadConfig(m));
        if !(1..=4).contains(&self.rooms) {
            return bad(format!("rooms must be in 1..=4, got {}", self.rooms));
        }
        let [lo, hi] = self.room_size;
        if !(3..=12).contains(&lo) || !(3..=12).contains(&hi) || lo > hi {
            return bad(format!("room_size must be [min, max] within 3..=12 with min <= max, got [{lo}, {hi}]"));
        }
        let [lo, hi] = self.objects_per_room;
        if !(1..=8).contains(&lo) || !(1..=8).contains(&hi) || lo > hi {
            return bad(format!("objects_per_room must be [min, max] within 1..=8 with min <= max, got [{lo}, {hi}]"));
        }
        if self.target_in_other_room && self.rooms < 2 {
            return bad("target_in_other_room needs rooms >= 2".into());
        }
        if ![0.25, 0.5, 1.0].contains(&self.step_size) {
            return bad(format!("step_size must be 0.25, 0.5 or 1, got {}", self.step_size));
        }
        if !(self.success_distance >= 0.5 && self.success_distance <= 5.0) {
            return bad(format!("success_distance must be in 0.5..=5 metres, got {}", self.success_distance));
        }
        if !(self.min_start_distance >= 0.0 && self.min_start_distance <= 20.0) {
            return bad(format!("min_start_distance must be in 0..=20 metres, got {}", self.min_start_distance));
        }
        for (name, r) in [("success_reward", self.success_reward), ("step_reward", self.step_reward)] {
            if !r.is_finite() {
                return bad(format!("{name} must be finite"));
            }
        }
        if self.max_actions_per_turn == 0 || self.max_actions_per_episode == 0 {
            return bad("max_actions_per_turn and max_actions_per_episode must be at least 1".into());
        }
        if self.max_actions_per_episode > 500 {
            return bad(format!("max_actions_per_episode must be at most 500, got {}", self.max_actions_per_episode));
        }
        if self.separator.trim().is_empty() {
            return bad("separator must contain a visible character".into());
        }
        for (name, v) in [("image_width", self.image_width), ("image_height", self.image_height)] {
            if !(16..=1024).contains(&v) {
                return bad(format!("{name} must be in 16..=1024, got {v}"));
            }
        }
        if !(self.fov_degrees >= 30.0 && self.fov_degrees <= 150.0) {
            return bad(format!("fov_degrees must be in 30..=150, got {}", self.fov_degrees));
        }
        Ok(())
    }
}
