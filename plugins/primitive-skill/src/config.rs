//! PrimitiveSkill's options. Defaults are VAGEN's (`vagen/env/primitive_skill/env_config.py`),
//! except `observation`, which is `text` so a machine without Vulkan runs the default.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use vagen_sdk::EnvError;

use crate::task::Task;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// AlignTwoCube, PlaceTwoCube or StackThreeCube (PutAppleInDrawer is refused: its assets
    /// are downloads).
    pub task: Task,
    /// `text`: object positions in words; `image`: the same text and VAGEN's 300² camera
    /// image (needs a Vulkan driver: a GPU's, or the CPU one `cargo xtask maniskill` installs).
    pub observation: Observe,
    /// Side of the square image in pixels (VAGEN 300; 32..=1024).
    pub image_size: u32,
    /// Actions read from one answer (VAGEN `max_actions_per_step` 2).
    pub max_actions_per_turn: u32,
    /// Skills per episode before it ends (VAGEN `max_episode_steps` 10).
    pub max_actions_per_episode: u32,
    /// What separates actions (VAGEN `|`).
    pub separator: String,
    /// Subtracted per executed skill (VAGEN 0.1).
    pub skill_cost: f64,
    /// A stage's worth: the value of a state is `(highest stage reached + 1) × stage_reward`
    /// (VAGEN 2), or `success_reward` (VAGEN 10) on success; a turn earns the difference.
    pub stage_reward: f64,
    pub success_reward: f64,
    /// The Python that runs the worker; empty: `$VAGEN_MANISKILL_PYTHON`, else
    /// `.venv-maniskill/bin/python` in the working folder or the nearest one above it.
    pub python: String,
    /// A Vulkan driver manifest; empty: the machine's drivers if it has any, else the CPU
    /// renderer installed beside the worker's Python (`<venv>/lavapipe/lvp_icd.json`).
    pub vulkan_icd: String,
    /// Seconds a worker may take to start and play its first reset (import, scene build and,
    /// with images, the renderer's first frame).
    pub start_timeout_s: f64,
    /// Seconds one reset or skill may take before the worker counts as stalled.
    pub call_timeout_s: f64,
}

/// What an observation carries besides VAGEN's text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Observe {
    #[default]
    Text,
    Image,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            task: Task::AlignTwoCube,
            observation: Observe::Text,
            image_size: 300,
            max_actions_per_turn: 2,
            max_actions_per_episode: 10,
            separator: "|".into(),
            skill_cost: 0.1,
            stage_reward: 2.0,
            success_reward: 10.0,
            python: String::new(),
            vulkan_icd: String::new(),
            start_timeout_s: 180.0,
            call_timeout_s: 60.0,
        }
    }
}

/// `vagen`: VAGEN-Base's settings (`scripts/examples/vagen_base/maniskill/env_config.yaml`:
/// `render_mode: vision`, one entry per task).
pub const PRESETS: &[(&str, &str)] = &[("vagen-visual", r#"{"observation": "image"}"#)];

impl Config {
    pub fn validate(&self) -> Result<(), EnvError> {
        let bad = |m: String| Err(EnvError::BadConfig(m));
        if self.task == Task::PutAppleInDrawer {
            return bad(
                "task PutAppleInDrawer needs ManiSkill's partnet_mobility_cabinet (model 1016) and ycb:013_apple assets, \
                 which are downloads and not in the mani-skill wheel; use AlignTwoCube, PlaceTwoCube or StackThreeCube"
                    .into(),
            );
        }
        if !(32..=1024).contains(&self.image_size) {
            return bad(format!("image_size must be in 32..=1024, got {}", self.image_size));
        }
        if !(1..=10).contains(&self.max_actions_per_turn) {
            return bad(format!("max_actions_per_turn must be in 1..=10, got {}", self.max_actions_per_turn));
        }
        if !(1..=100).contains(&self.max_actions_per_episode) {
            return bad(format!("max_actions_per_episode must be in 1..=100, got {}", self.max_actions_per_episode));
        }
        if self.separator.trim().is_empty() || self.separator.contains(['(', ')', ',']) {
            return bad(format!("separator must be visible and not `(`, `)` or `,`, got {:?}", self.separator));
        }
        for (name, v) in [
            ("skill_cost", self.skill_cost),
            ("stage_reward", self.stage_reward),
            ("success_reward", self.success_reward),
        ] {
            if !v.is_finite() || v.abs() > 1000.0 {
                return bad(format!("{name} must be finite and within ±1000, got {v}"));
            }
        }
        for (name, v) in [("start_timeout_s", self.start_timeout_s), ("call_timeout_s", self.call_timeout_s)] {
            if !(v.is_finite() && (1.0..=3600.0).contains(&v)) {
                return bad(format!("{name} must be in 1..=3600 seconds, got {v}"));
            }
        }
        Ok(())
    }

    /// The worker's Python, as configured or found; an error says where it looked and how
    /// to install one.
    pub fn python_path(&self) -> Result<PathBuf, EnvError> {
        if !self.python.is_empty() {
            return configured_file("python", &self.python);
        }
        default_python().ok_or_else(|| {
            EnvError::BadConfig(
                "no Python with ManiSkill found: set `python` in the env config or VAGEN_MANISKILL_PYTHON, or run \
                 `cargo xtask maniskill` in the vagen checkout (it installs .venv-maniskill)"
                    .into(),
            )
        })
    }

    /// The Vulkan driver the worker renders with: `vulkan_icd` if set, else what
    /// [`machine_renderer`] finds for `python`.
    pub fn vulkan(&self, python: &Path) -> Result<Renderer, EnvError> {
        if !self.vulkan_icd.is_empty() {
            return configured_file("vulkan_icd", &self.vulkan_icd).map(Renderer::Icd);
        }
        Ok(machine_renderer(python))
    }
}

/// A path the config names, which must be a file.
fn configured_file(field: &str, value: &str) -> Result<PathBuf, EnvError> {
    let p = PathBuf::from(value);
    if p.is_file() { Ok(p) } else { Err(EnvError::BadConfig(format!("{field} {value:?} is not a file"))) }
}

/// Where images come from on this machine.
#[derive(Clone, Debug, PartialEq)]
pub enum Renderer {
    /// The machine's own Vulkan drivers (a GPU's, or Mesa's installed system-wide).
    System,
    /// A driver manifest of our own: the CPU renderer beside the worker's Python.
    Icd(PathBuf),
    /// None: text observations only.
    Missing,
}

impl std::fmt::Display for Renderer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Renderer::System => write!(f, "the machine's Vulkan driver"),
            Renderer::Icd(p) => write!(f, "the Vulkan driver of {}", p.display()),
            Renderer::Missing => write!(f, "none (no Vulkan driver: text observations only)"),
        }
    }
}

fn default_python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("VAGEN_MANISKILL_PYTHON").map(PathBuf::from) {
        return Some(p);
    }
    let cwd = std::env::current_dir().ok()?;
    cwd.ancestors().map(|d| d.join(".venv-maniskill/bin/python")).find(|p| p.is_file())
}

const SYSTEM_ICD_DIRS: [&str; 3] = ["/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d"];

fn machine_renderer(python: &Path) -> Renderer {
    let has_json = |d: &str| {
        std::fs::read_dir(d)
            .map(|r| r.flatten().any(|e| e.path().extension().is_some_and(|x| x == "json")))
            .unwrap_or(false)
    };
    if std::env::var_os("VK_ICD_FILENAMES").is_some() || SYSTEM_ICD_DIRS.iter().any(|d| has_json(d)) {
        return Renderer::System;
    }
    // <venv>/bin/python → <venv>/lavapipe/lvp_icd.json
    let icd = python.parent().and_then(Path::parent).map(|v| v.join("lavapipe/lvp_icd.json"));
    match icd {
        Some(icd) if icd.is_file() => Renderer::Icd(icd),
        _ => Renderer::Missing,
    }
}

/// What this machine offers, in words, for the manifest (`inspect`, `check`).
pub fn machine_report() -> String {
    let c = Config::default();
    match c.python_path() {
        Ok(p) => format!("worker Python {}; images: {}", p.display(), machine_renderer(&p)),
        Err(_) => "no worker Python found (`cargo xtask maniskill` installs one)".into(),
    }
}
