//! What an environment produces, as plain data. The Rust SDK exposes these types to env
//! authors; native plugins send them to the host encoded with postcard.

use serde::{Deserialize, Serialize};

/// The marker an observation's text carries for each image, and a chat message's content
/// where the image stands.
pub const IMAGE_MARKER: &str = "<image>";

/// One conversation turn, as transformers' `{"role": ..., "content": ...}`: what a policy
/// is asked and a chat template renders. Chats in OpenAI's format add an assistant's tool
/// calls and, on a `tool` message, the call it answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text, with an `<image>` marker where each image stands.
    pub content: String,
    /// The functions an assistant turn calls, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// On a `tool` message: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

/// A function an assistant turn calls, as OpenAI's `tool_calls` entries hold it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The id the `tool` message answering it names.
    pub id: String,
    /// The function's name.
    pub name: String,
    /// Its arguments as JSON text (an object), as the model wrote them.
    pub arguments: String,
}

impl Message {
    /// A message of any role.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Message { role: role.into(), content: content.into(), tool_calls: Vec::new(), tool_call_id: None }
    }
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }
    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new("assistant", content)
    }
}

/// An RGB8 image, row-major, `rgb.len() == width * height * 3`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// RGB8 bytes, row-major.
    pub rgb: Vec<u8>,
}

/// What the agent sees. `text` holds one `<image>` marker per image, in order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// The text the agent reads.
    pub text: String,
    /// The images, in the order of their markers.
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
    /// What the agent sees next.
    pub observation: Observation,
    /// The step's reward.
    pub reward: f64,
    /// Whether the episode ended.
    pub done: bool,
    /// Whether it ended in success.
    pub success: bool,
    /// Actions of the answer that parsed.
    pub valid_actions: u32,
    /// Actions that changed the state.
    pub effective_actions: u32,
    /// Named figures reported with the step.
    pub metrics: Vec<(String, f64)>,
}

/// What observations contain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Modality {
    /// Text.
    Text,
    /// Images.
    Image,
}

/// Static facts about an environment (see `wit/v0.2.0/env.wit`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The env's name (its package name when left empty).
    pub name: String,
    /// Its version.
    pub version: String,
    /// One line on what it is.
    pub description: String,
    /// What observations contain.
    pub modalities: Vec<Modality>,
    /// The action vocabulary; empty for free-form answers.
    pub action_names: Vec<String>,
    /// What separates several actions in one answer.
    pub action_separator: String,
    /// Actions one answer may carry.
    pub max_actions_per_turn: u32,
    /// Turns of an episode unless the run says otherwise.
    pub default_max_turns: u32,
    /// The default config, as JSON.
    pub default_config: String,
    /// Whether `oracle` gives expert answers.
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
    /// The config is unusable: say which field and why.
    BadConfig(String),
    /// A call at the wrong time (a step before reset or after done).
    InvalidState(String),
    /// Anything else that went wrong.
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
