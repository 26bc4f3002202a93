//! Write a reward function: implement [`Reward`] and call [`export_reward!`](crate::export_reward)
//! once. Built for `wasm32-wasip2`, the crate becomes a `.wasm` component that scores a batch
//! of turns at a time and may ask the host's judge (a language model).

use serde::{Serialize, de::DeserializeOwned};

pub use vagen_abi::Image;

/// One turn of one episode, after the environment stepped its answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Turn {
    /// The environment's manifest name, e.g. `sokoban`.
    pub env_name: String,
    /// The reasoning format the answer was asked in, e.g. `grounding-world-modeling`.
    pub format: String,
    /// The model's whole response.
    pub response: String,
    /// The response's reasoning part, where the format has one and it was found.
    pub think: Option<String>,
    /// Its grounding part (the state as the model saw it), where found.
    pub observation: Option<String>,
    /// Its world-modelling part (the state it predicted), where found.
    pub prediction: Option<String>,
    /// Its answer part (what was sent to `step`), where found.
    pub answer: Option<String>,
    /// Whether the response followed the format.
    pub format_ok: bool,
    /// The environment's reward for the step.
    pub env_reward: f64,
    /// Whether the step ended the episode.
    pub done: bool,
    /// Whether the episode ended in success.
    pub success: bool,
    /// The environment's `describe_state` before and after the step.
    pub state_before: String,
    /// The `describe_state` after the step.
    pub state_after: String,
    /// The observation's images before the step.
    pub images_before: Vec<Image>,
    /// The observation's images after the step.
    pub images_after: Vec<Image>,
}

/// A turn's reward and named figures (logged as `reward/<name>/<metric>`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnScore {
    /// The turn's reward (before the run's weight).
    pub reward: f64,
    /// Named figures, logged as `reward/<name>/<metric>`.
    pub metrics: Vec<(String, f64)>,
}

impl TurnScore {
    /// A score with no figures.
    pub fn new(reward: f64) -> Self {
        TurnScore { reward, metrics: vec![] }
    }

    /// Adds a named figure.
    pub fn with(mut self, name: &str, value: f64) -> Self {
        self.metrics.push((name.to_string(), value));
        self
    }
}

/// A piece of a judge's chat message.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// Text.
    Text(String),
    /// An image (RGB8).
    Image(Image),
}

#[derive(Debug, Clone, PartialEq)]
/// A judge chat message.
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// Text and images, in order.
    pub content: Vec<Part>,
}

impl Message {
    /// A user message of text.
    pub fn user(text: impl Into<String>) -> Self {
        Message { role: "user".into(), content: vec![Part::Text(text.into())] }
    }

    /// A system message of text.
    pub fn system(text: impl Into<String>) -> Self {
        Message { role: "system".into(), content: vec![Part::Text(text.into())] }
    }
}

#[derive(Debug, Clone, PartialEq)]
/// One request to the host's judge.
pub struct JudgeRequest {
    /// The chat, in order.
    pub messages: Vec<Message>,
    /// Tokens the judge may answer with, at most.
    pub max_tokens: u32,
    /// 0 is greedy.
    pub temperature: f64,
}

/// The host's language model. Ask once per `score` call with every turn's requests: the
/// host batches them.
pub trait Judge {
    /// Per request, the judge's text or why it gave none.
    fn complete(&self, requests: &[JudgeRequest]) -> Vec<Result<String, String>>;
}

/// A reward function. One value scores many batches.
pub trait Reward: Sized + 'static {
    /// Read from the JSON object the host passes to `create`; give it
    /// `#[serde(default, deny_unknown_fields)]` so typos are reported.
    type Config: Serialize + DeserializeOwned + Default;

    /// Builds a scorer; an `Err` is reported as a bad config naming your message.
    fn new(config: Self::Config) -> Result<Self, String>;

    /// One entry per turn, in order: its score, or why it could not be scored (the host
    /// counts the turn as failed, never as 0).
    fn score(&mut self, turns: &[Turn], judge: &dyn Judge) -> Vec<Result<TurnScore, String>>;
}

/// The name, version and description the export macro fills in from Cargo.
#[doc(hidden)]
pub trait RewardPackage {
    const NAME: &'static str;
    const VERSION: &'static str;
    const DESCRIPTION: &'static str;
}

/// `T::Config`'s defaults as JSON, and `config` (a JSON object, `""` for the defaults) read
/// into `T::Config`.
#[doc(hidden)]
pub fn read_config<T: Reward>(config: &str) -> Result<T::Config, String> {
    if config.trim().is_empty() {
        return Ok(T::Config::default());
    }
    serde_json::from_str(config).map_err(|e| e.to_string())
}

#[doc(hidden)]
pub fn default_config<T: Reward>() -> String {
    serde_json::to_string(&T::Config::default()).unwrap_or_else(|_| "{}".into())
}

/// Exports a [`Reward`] as the component's `vagen:env/reward` (a `.wasm` build only).
#[macro_export]
macro_rules! export_reward {
    ($ty:ty) => {
        impl $crate::__private::RewardPackage for $ty {
            const NAME: &'static str = env!("CARGO_PKG_NAME");
            const VERSION: &'static str = env!("CARGO_PKG_VERSION");
            const DESCRIPTION: &'static str = env!("CARGO_PKG_DESCRIPTION");
        }
        #[cfg(target_family = "wasm")]
        type __VagenRewardExport = $crate::__private::RewardComponent<$ty>;
        #[cfg(target_family = "wasm")]
        $crate::__private::export_reward_world!(__VagenRewardExport with_types_in $crate::__private::reward_bindings);
    };
}
