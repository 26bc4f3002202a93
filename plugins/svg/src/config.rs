//! The SVG environment's options. Defaults follow VAGEN's SVG task (256 × 256 targets, one
//! SVG per turn, the score as the reward).

use crate::document::Limits;
use serde::{Deserialize, Serialize};
use vagen_sdk::{EnvError, ObservationMode};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Side of the target and of each rendering, in pixels (32..=1024; VAGEN 256).
    pub image_size: u32,
    /// Which icons episodes draw from: `train`, `test` (held out) or `all`.
    pub split: Split,
    /// Share of the icons held out for `test`, in (0, 1).
    pub test_fraction: f64,
    /// Decides which icons are held out (with `test_fraction`); episodes' seeds do not.
    pub split_seed: u64,
    /// Weight of VAGEN's structural accuracy: IoU of the Canny edge maps.
    pub edge_weight: f64,
    /// Weight of SSIM on the luma images.
    pub ssim_weight: f64,
    /// Weight of the colour histogram intersection.
    pub colour_weight: f64,
    /// A score (the weighted mean of the terms, in [0, 1]) at or above this ends the
    /// episode as a success.
    pub success_threshold: f64,
    /// Reward for an answer that holds no drawable SVG (VAGEN's `format_penalty`).
    pub invalid_reward: f64,
    /// What an observation shows: the picture (`image`, VAGEN's), the target described in
    /// words (`text`, for text-only models), or both.
    pub observation: ObservationMode,
    /// Bytes of SVG read from one answer.
    pub max_answer_bytes: usize,
    /// Elements in one SVG, each `<use>` expanded.
    pub max_elements: usize,
    /// Element nesting, `<use>` expansions included.
    pub max_depth: usize,
    /// Largest `width`, `height` or `viewBox` extent, in user units.
    pub max_document_size: f32,
    /// Path segments in one SVG.
    pub max_path_segments: usize,
    /// Groups with a layer of their own (opacity, masks, clip paths, blend modes).
    pub max_layers: usize,
    /// Dashes all dashed strokes of one SVG may draw.
    pub max_dashes: f64,
    /// Pattern tile pixels one SVG may draw, in canvases.
    pub max_pattern_canvases: f32,
    /// Pixels one SVG may paint (fills, strokes and layers over their bounds), in canvases.
    pub max_painted_canvases: f32,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Split {
    #[default]
    Train,
    Test,
    All,
}

impl Default for Config {
    fn default() -> Self {
        let l = Limits::default();
        Self {
            image_size: 256,
            split: Split::Train,
            test_fraction: 0.2,
            split_seed: 0,
            edge_weight: 0.4,
            ssim_weight: 0.3,
            colour_weight: 0.3,
            success_threshold: 0.9,
            invalid_reward: 0.0,
            observation: ObservationMode::Image,
            max_answer_bytes: l.max_bytes,
            max_elements: l.max_elements,
            max_depth: l.max_depth,
            max_document_size: l.max_size,
            max_path_segments: l.max_path_segments,
            max_layers: l.max_layers,
            max_dashes: l.max_dashes,
            max_pattern_canvases: l.max_pattern_canvases,
            max_painted_canvases: l.max_painted_canvases,
        }
    }
}

/// `vagen-test`: the held-out icons. `text`: the target in words, for text-only models.
pub const PRESETS: &[(&str, &str)] = &[("vagen-test", r#"{"split": "test"}"#), ("text", r#"{"observation": "text"}"#)];

impl Config {
    pub fn limits(&self) -> Limits {
        Limits {
            max_bytes: self.max_answer_bytes,
            max_elements: self.max_elements,
            max_depth: self.max_depth,
            max_size: self.max_document_size,
            max_path_segments: self.max_path_segments,
            max_layers: self.max_layers,
            max_dashes: self.max_dashes,
            max_pattern_canvases: self.max_pattern_canvases,
            max_painted_canvases: self.max_painted_canvases,
        }
    }

    pub fn validate(&self) -> Result<(), EnvError> {
        let bad = |m: String| Err(EnvError::BadConfig(m));
        if !(32..=1024).contains(&self.image_size) {
            return bad(format!("image_size must be in 32..=1024, got {}", self.image_size));
        }
        if !(self.test_fraction > 0.0 && self.test_fraction < 1.0) {
            return bad(format!("test_fraction must be in (0, 1), got {}", self.test_fraction));
        }
        let weights = [
            ("edge_weight", self.edge_weight),
            ("ssim_weight", self.ssim_weight),
            ("colour_weight", self.colour_weight),
        ];
        for (name, w) in weights {
            if !(w.is_finite() && w >= 0.0) {
                return bad(format!("{name} must be a finite number ≥ 0, got {w}"));
            }
        }
        if weights.iter().map(|(_, w)| w).sum::<f64>() <= 0.0 {
            return bad("at least one of edge_weight, ssim_weight and colour_weight must be positive".into());
        }
        if !(0.0..=1.0).contains(&self.success_threshold) {
            return bad(format!("success_threshold must be in [0, 1], got {}", self.success_threshold));
        }
        if !self.invalid_reward.is_finite() {
            return bad("invalid_reward must be finite".into());
        }
        let l = Limits::default();
        let positive = [
            ("max_answer_bytes", self.max_answer_bytes as f64, l.max_bytes as f64 * 32.0),
            ("max_elements", self.max_elements as f64, l.max_elements as f64 * 10.0),
            ("max_depth", self.max_depth as f64, 256.0),
            ("max_document_size", f64::from(self.max_document_size), 1e7),
            ("max_path_segments", self.max_path_segments as f64, l.max_path_segments as f64 * 10.0),
            ("max_layers", self.max_layers as f64, l.max_layers as f64 * 4.0),
            ("max_dashes", self.max_dashes, l.max_dashes * 10.0),
            ("max_pattern_canvases", f64::from(self.max_pattern_canvases), 64.0),
            ("max_painted_canvases", f64::from(self.max_painted_canvases), 400.0),
        ];
        // Raising a limit far past its default gives back the sandbox's time: the ceilings
        // keep one step well within the host's default call deadline.
        for (name, v, ceiling) in positive {
            if !(v >= 1.0 && v <= ceiling) {
                return bad(format!("{name} must be in 1..={ceiling}, got {v}"));
            }
        }
        Ok(())
    }
}
