//! What an environment produces, as plain data. The Rust SDK exposes these types to env
//! authors; native plugins send them to the host encoded with postcard.

use serde::{Deserialize, Serialize};

/// The marker an observation's text carries for each image, and a chat message's content
/// where the image stands.
pub const IMAGE_MARKER: &str = "<image>";

/// One conversation turn, as transformers' `{"role": ..., "content": ...}`: what a policy
/// is asked and a chat template renders.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Message { role: role.into(), content: content.into() }
    }
    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new("assistant", content)
    }
}

/// An RGB8 image, row-major, `rgb.len() == width * height * 3`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    pub width: u32,
    pub height: u32,
    pub rgb: Vec<u8>,
}

/// What the agent sees. `text` holds one `<image>` marker per image, in order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    pub text: String,
    pub images: Vec<Image>,
}

impl Observation {
    /// A text-only observation.
    pub fn text(text: impl Into<String>) -> Self {
        Self { text: text.into(), images: Vec::new() }
    }

    /// Appends an image and its `<image>` marker to the text, keeping them aligned.
    pub fn push_image(&mut self, image: Image) {
        self.text.push_str(IMAGE_MARKER);
        self.images.push(image);
    }
}

/// The outcome of one step.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub observation: Observation,
    pub reward: f64,
    pub done: bool,
    pub success: bool,
    pub valid_actions: u32,
    pub effective_actions: u32,
    pub metrics: Vec<(String, f64)>,
}

/// What observations contain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Modality {
    Text,
    Image,
}

/// Static facts about an environment (see `wit/v0.2.0/env.wit`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub name: String,
    pub version: String,
    pub description: String,
    pub modalities: Vec<Modality>,
    pub action_names: Vec<String>,
    pub action_separator: String,
    pub max_actions_per_turn: u32,
    pub default_max_turns: u32,
    pub default_config: String,
    pub has_oracle: bool,
}

impl Default for Manifest {
    fn default() -> Self {
        Self {
            name: String::new(),
            version: String::new(),
            description: String::new(),
            modalities: vec![Modality::Text],
            action_names: Vec::new(),
            action_separator: ",".into(),
            max_actions_per_turn: 1,
            default_max_turns: 10,
            default_config: String::new(),
            has_oracle: false,
        }
    }
}

/// How one configured instance reads actions (`environment.action-space` in the WIT):
/// the manifest's action fields, as the instance's config set them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionSpace {
    /// The action vocabulary; empty for free-form answers.
    pub action_names: Vec<String>,
    /// What separates several actions inside one answer, e.g. `,` or `||`.
    pub action_separator: String,
    /// Actions one answer may carry; at least 1.
    pub max_actions_per_turn: u32,
}

impl ActionSpace {
    /// The manifest's defaults: what an instance of a plugin that cannot say otherwise
    /// (WIT 0.1.0, native ABI 1) reads.
    pub fn of(m: &Manifest) -> Self {
        ActionSpace {
            action_names: m.action_names.clone(),
            action_separator: m.action_separator.clone(),
            max_actions_per_turn: m.max_actions_per_turn,
        }
    }
}

impl Default for ActionSpace {
    fn default() -> Self {
        ActionSpace::of(&Manifest::default())
    }
}

/// Why a call failed. Return these; never panic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EnvError {
    BadConfig(String),
    InvalidState(String),
    Failed(String),
}

impl std::fmt::Display for EnvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EnvError::BadConfig(m) => write!(f, "bad config: {m}"),
            EnvError::InvalidState(m) => write!(f, "invalid state: {m}"),
            EnvError::Failed(m) => write!(f, "failed: {m}"),
        }
    }
}

impl std::error::Error for EnvError {}
