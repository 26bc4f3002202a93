//! Who writes the responses: a batch of conversations in, a batch of responses out.
//! Random and oracle answers are wrapped in the run's format, so every policy goes through
//! the same parse → step path as a model.

use crate::{AssistantTurn, Format, Message};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::sync::Arc;
use vagen_runtime::{ActionSpace, Image, Manifest, random_answer};

/// One conversation waiting for its next assistant turn.
#[derive(Clone)]
pub struct Request {
    /// Which trajectory of the rollout, and which of its turns.
    pub trajectory: usize,
    /// The trajectory's group: episodes of one group share their seed.
    pub group: usize,
    pub turn: usize,
    /// The state this turn acts in: the key its `TurnRecord::state_key` will have.
    pub state: u64,
    pub system: String,
    /// The earlier turns the prompt carries (the history window's), as the token layout
    /// takes them: each user message with its images (shared with the trajectory's records,
    /// not copied) and the answer with the ids it was sampled as (`None` when its policy
    /// had no tokens), so a model policy prompts with them rather than re-tokenising.
    pub history: Vec<AssistantTurn>,
    /// This turn's user message (feedback, observation, reminder) and its images, in
    /// `<image>` order.
    pub user: String,
    pub images: Vec<Arc<Image>>,
    pub manifest: Arc<Manifest>,
    /// How the trajectory's instance reads actions (its config's, not the manifest's).
    pub actions: Arc<ActionSpace>,
    /// The env's expert answer, filled in when the policy asks for it.
    pub oracle: Option<String>,
    /// What the last step paid (the env's reward), after the first turn.
    pub last_reward: Option<f64>,
    /// Derived from the episode seed and the turn: a policy's draws for this request.
    pub seed: u64,
}

impl Request {
    /// The conversation as chat templates take it: system, (user, assistant)*, user.
    pub fn messages(&self) -> Vec<Message> {
        let mut m = vec![Message::system(self.system.as_str())];
        for turn in &self.history {
            m.push(Message::user(turn.user.as_str()));
            m.push(Message::assistant(turn.response.as_str()));
        }
        m.push(Message::user(self.user.as_str()));
        m
    }
}

/// Who wrote a turn's answer: the training batch keeps it as a column (a forced answer's
/// old log-probs need a forward; a noisy one is no imitation target).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AnswerOrigin {
    /// Sampled by a model (its ids and log-probs are in the response).
    Model,
    /// A random action put in place of the model's answer (exploration).
    Forced,
    /// The env's expert answer.
    Oracle,
    /// A random action put in place of the oracle's (SFT's `action_noise`).
    Noisy,
    /// A random action from the random policy.
    Random,
    /// Typed by a person.
    Human,
    /// Fixed text: a script, a replay, a test's policy.
    #[default]
    Scripted,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Response {
    pub text: String,
    pub origin: AnswerOrigin,
    /// The sampled ids (and their log-probs) when the policy is a model.
    pub token_ids: Option<Vec<u32>>,
    pub logprobs: Option<Vec<f32>>,
    /// The weights' version that sampled each id, where the policy's weights change during
    /// a rollout (asynchronous RL).
    pub versions: Option<Vec<u64>>,
    /// Set, with no answer, when the prompt left no room to answer in the policy's context
    /// window: the episode ends there, truncated for `context`, and is trained on as far
    /// as it went.
    pub out_of_context: Option<OutOfContext>,
    /// No answer: the episode ends here, truncated for `stopped` (a person ended input).
    pub stop: bool,
    /// No answer, and not for the env: the policy's server never answered (after its
    /// retries). The episode ends here as failed in [`crate::FailedCall::Policy`], the reason
    /// kept, and the other requests of the batch go on.
    pub lost: Option<String>,
}

/// A prompt that outgrew the context window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfContext {
    pub prompt_tokens: usize,
    pub window: usize,
}

impl Response {
    /// A text answer without tokens ([`AnswerOrigin::Scripted`] unless [`Response::by`] says).
    pub fn text(text: impl Into<String>) -> Self {
        Response { text: text.into(), ..Default::default() }
    }

    /// No answer, lost for `reason` (see [`Response::lost`]).
    pub fn lost(reason: impl Into<String>) -> Self {
        Response { lost: Some(reason.into()), ..Default::default() }
    }

    /// The same answer, written by `origin`.
    pub fn by(self, origin: AnswerOrigin) -> Self {
        Response { origin, ..self }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("the {policy} policy cannot act in {env}: {reason}")]
    Unsupported { policy: &'static str, env: String, reason: String },
    /// The model behind a policy failed (its own error, as text: rollout knows no model).
    #[error("model: {0}")]
    Model(String),
    #[error("building the prompt: {0}")]
    Prompt(String),
    /// The policy's own input or output failed (a terminal, a file).
    #[error("the {policy} policy: {message}")]
    Io { policy: &'static str, message: String },
}

pub trait Policy {
    fn name(&self) -> &'static str;
    /// Whether requests must carry the env's oracle answer.
    fn needs_oracle(&self) -> bool {
        false
    }
    fn respond(&mut self, requests: &[Request]) -> Result<Vec<Response>, PolicyError>;
    /// A rollout starts: its requests are new trajectories (what a policy kept for earlier
    /// ones, such as cached keys and values, no longer applies: the weights may have moved).
    fn begin_rollout(&mut self) {}
    /// The policy answering requests one at a time as they come, when it can (a model's
    /// engine, whose running batch admits requests between decode steps): the driver then
    /// asks each episode's next turn the moment its env step returns, so a slow env holds
    /// its own episode only. `None`: a turn's requests are asked together ([`Self::respond`]).
    fn streaming(&mut self) -> Option<&mut dyn StreamingPolicy> {
        None
    }
}

/// Requests answered as they come ([`Policy::streaming`]).
pub trait StreamingPolicy {
    /// Holds `request` until [`Self::poll`] answers it.
    fn submit(&mut self, request: Request) -> Result<(), PolicyError>;
    /// A bounded amount of work (one engine step), and the requests answered meanwhile, by
    /// trajectory.
    fn poll(&mut self) -> Result<Vec<(usize, Response)>, PolicyError>;
    /// Requests submitted and not yet answered.
    fn pending(&self) -> usize;
}

/// 1..=max actions per turn drawn from the env's action names.
pub struct RandomPolicy {
    pub format: Format,
}

impl Policy for RandomPolicy {
    fn name(&self) -> &'static str {
        "random"
    }
    fn respond(&mut self, requests: &[Request]) -> Result<Vec<Response>, PolicyError> {
        requests
            .iter()
            .map(|r| {
                let mut rng = ChaCha8Rng::seed_from_u64(r.seed);
                let answer = random_answer(&r.actions, &mut rng).ok_or_else(|| PolicyError::Unsupported {
                    policy: "random",
                    env: r.manifest.name.clone(),
                    reason: "it takes free-form answers, not action names".into(),
                })?;
                Ok(Response::text(self.format.wrap(&answer)).by(AnswerOrigin::Random))
            })
            .collect()
    }
}

/// The env's own expert answers.
pub struct OraclePolicy {
    pub format: Format,
}

impl Policy for OraclePolicy {
    fn name(&self) -> &'static str {
        "oracle"
    }
    fn needs_oracle(&self) -> bool {
        true
    }
    fn respond(&mut self, requests: &[Request]) -> Result<Vec<Response>, PolicyError> {
        // No answer for a state (or no oracle) becomes an empty answer: an invalid turn.
        Ok(requests
            .iter()
            .map(|r| Response::text(self.format.wrap(r.oracle.as_deref().unwrap_or(""))).by(AnswerOrigin::Oracle))
            .collect())
    }
}

/// Fixed responses per trajectory, turn by turn (replays, tests); past the end, empty.
pub struct ScriptedPolicy {
    pub scripts: Vec<Vec<String>>,
}

impl Policy for ScriptedPolicy {
    fn name(&self) -> &'static str {
        "scripted"
    }
    fn respond(&mut self, requests: &[Request]) -> Result<Vec<Response>, PolicyError> {
        let pick =
            |r: &Request| self.scripts.get(r.trajectory).and_then(|s| s.get(r.turn)).cloned().unwrap_or_default();
        Ok(requests.iter().map(|r| Response::text(pick(r))).collect())
    }
}

/// What a prompt that leaves too little of the context window for an answer does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ContextOverflow {
    /// The answer gets what is left; a prompt that leaves nothing ends its episode,
    /// truncated for `context` (RAGEN's `max_context_window`).
    #[default]
    End,
    /// The prompt leaves out its oldest whole turns, one at a time, until a full answer
    /// (`max_new_tokens`) fits, or none is left; the episode goes on. It ends as with `end`
    /// only when the current observation alone leaves no room.
    DropOldest,
}

/// Request `i` (its own trajectory and group, turn 0, seed `i`) in an env with `manifest`'s
/// actions: what the policies' tests answer.
#[cfg(test)]
pub(crate) fn test_request(i: usize, manifest: &Arc<Manifest>) -> Request {
    Request {
        trajectory: i,
        group: i,
        turn: 0,
        state: 0,
        system: String::new(),
        history: vec![],
        user: String::new(),
        images: vec![],
        actions: Arc::new(ActionSpace::of(manifest)),
        manifest: manifest.clone(),
        oracle: None,
        last_reward: None,
        seed: i as u64,
    }
}
