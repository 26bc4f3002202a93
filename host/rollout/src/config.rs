//! `[rollout]` of a training config, and the settings of `vagen-host run`: how episodes
//! are played (format, prompts, history, format reward), how a model samples its answers,
//! how exploration replaces some, and how the turns become training sequences. One struct,
//! deserialised straight from the table; the batch shape (`group_size`, `max_turns`, the
//! action limits) is the caller's (`[env]` in a training config).

use crate::{ContextOverflow, ExploreAt, Format, RewardPlacement};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How much earlier conversation each prompt carries; written as a count (0: all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum History {
    /// Every earlier turn (RAGEN).
    All,
    /// The last k turns (VAGEN keeps 5).
    Last(usize),
}

impl Serialize for History {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(match self {
            History::All => 0,
            History::Last(k) => *k as u64,
        })
    }
}

impl<'de> Deserialize<'de> for History {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match usize::deserialize(d)? {
            0 => History::All,
            k => History::Last(k),
        })
    }
}

/// The format reward added to a turn's env reward.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FormatReward {
    /// Added when the format is correct and every action was valid (VAGEN: 0.5).
    pub bonus: f64,
    /// Added (negative) when the format is wrong or an action was invalid (RAGEN: -0.1).
    pub penalty: f64,
    /// Count an answer carrying more actions than the turn takes as having an invalid one
    /// (the penalty, no bonus). Off (RAGEN and VAGEN), the extra actions are dropped
    /// unremarked; on, a model learns to answer with as many actions as a turn executes.
    pub extra_actions_invalid: bool,
}

impl Default for FormatReward {
    fn default() -> Self {
        FormatReward { bonus: 0.5, penalty: 0.0, extra_actions_invalid: false }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolloutConfig {
    pub format: Format,
    /// Earlier turns in each prompt: 0 for all, else the last k (one sequence per
    /// trajectory; with `per_turn`, none).
    pub history: History,
    pub format_reward: FormatReward,
    /// Replaces the env's system prompt (the format instructions are still appended unless
    /// `instructions` is off), e.g. a short one for a small model that cannot use the rules'
    /// prose anyway.
    pub system_prompt: Option<String>,
    /// Append the format's instructions and an example answer to the system prompt (true).
    /// Off for a model trained from scratch: the lines teach it nothing, and the example
    /// (the env's first action) is a token it can copy into every answer.
    pub instructions: bool,
    /// Add the env's `describe_state` text to every observation (a grounded observation:
    /// easier for small models than reading a grid).
    pub describe_state: bool,
    /// Keep the env's own text observation (FrozenLake's grid) in the prompt. Off (with
    /// `describe_state`), the state description stands in for it: a shorter prompt with
    /// nothing in it for a small model to latch on to but the facts it states.
    pub observation_text: bool,
    /// Open each user turn after the first with what the last answer did ("Your actions:
    /// …, 1 changed the state") (true). Off, a user turn is the observation (and the
    /// reminder): for a Markov observation such as a state description the line only costs
    /// tokens.
    pub feedback: bool,
    /// End each user turn with the one-line format reminder (true).
    pub reminder: bool,

    /// Sampling temperature for training rollouts (RAGEN 1.0, VAGEN 0.7).
    pub temperature: f64,
    pub top_p: f64,
    /// 0: no top-k.
    pub top_k: usize,
    /// Temperature for evaluation (0: greedy; RAGEN 0.5).
    pub val_temperature: f64,
    /// Tokens per response at most (RAGEN 400).
    pub max_new_tokens: usize,
    /// A prompt that leaves too little of the context window (`max_sequence_tokens`) for
    /// an answer: `end` (default) its episode; `drop-oldest`: the prompt leaves out its
    /// oldest whole turns until a full `max_new_tokens` answer fits, and the episode goes
    /// on (with one sequence per trajectory, the update still lays out every turn, as with
    /// `history`).
    pub context_overflow: ContextOverflow,
    /// Probability that a training turn's answer is replaced by a random valid action
    /// (written in the format), for exploration where the policy is confidently wrong:
    /// a group whose episodes all answer alike has nothing to compare. The replaced turns
    /// are trained on like sampled ones, their old log-probs from a forward pass. 0: off;
    /// evaluation never explores.
    pub explore: f64,
    /// What `explore` applies to: `turn` (each training turn) or `shared-state` (once per
    /// state several episodes of a group are in at the same turn, diverting one of them).
    pub explore_at: ExploreAt,

    /// Train on one sequence per turn (system prompt + that turn's observation + the
    /// sampled response: exactly what the model saw, since prompts then carry no history)
    /// instead of one per trajectory. Cheaper for small models; needs a critic-free
    /// estimator; each turn's advantage comes from its whole episode (the estimator runs
    /// over episodes, one position per turn).
    pub per_turn: bool,
    /// Longest training sequence; whole turns past it are dropped from the end. Also the
    /// rollout's context window (with the model's own as the ceiling): a turn's answer is
    /// capped at what its prompt leaves, and an episode whose prompt leaves nothing ends
    /// there (`train/out_of_context_trajectories`), trained on as far as it went.
    pub max_sequence_tokens: usize,
    /// Image tokens one sequence (a prompt, a training sequence) may hold; 0: no limit but
    /// `max_sequence_tokens`, which counts them too. A first turn past it is an error; a
    /// later prompt past it ends its episode as one past the window does, and a training
    /// sequence drops the turns past it from its end.
    pub max_image_tokens: usize,
    /// Pixels an image is resized to at most before a VL model sees it (transformers'
    /// `max_pixels`; VAGEN's processors cap it); 0: the model's processor's own.
    pub max_image_pixels: usize,
    /// Where rewards go in a sequence: each turn's on its last token, or the total on the
    /// last.
    pub rewards: RewardPlacement,
    /// Take the old log-probs from generation (the full tempered distribution, as the
    /// training forward computes them) instead of a second no-grad forward over the batch:
    /// about a fifth of a step saved. Off, the forward runs and `rollout/logprob_diff_*`
    /// report how far generation and training disagree (≈1e-7 on CPU in f32).
    pub reuse_logprobs: bool,

    /// Episodes of one group share their seed (GRPO-style groups). The caller's.
    #[serde(skip)]
    pub group_size: usize,
    /// 0: the env's default. The caller's.
    #[serde(skip)]
    pub max_turns: usize,
    /// 0: the env's own limit per turn. The caller's.
    #[serde(skip)]
    pub max_actions_per_turn: usize,
    /// Actions an episode may send in all; 0 for no limit. The caller's.
    #[serde(skip)]
    pub max_actions_per_episode: usize,
    /// Keep the env's `describe_state` before and after every step in the turn records
    /// (what reward functions compare the agent's observation and prediction with). The
    /// caller's: the trainer sets it when it has reward functions.
    #[serde(skip)]
    pub record_states: bool,
}

impl RolloutConfig {
    /// The earlier turns a prompt carries: none with one sequence per turn.
    pub fn prompt_history(&self) -> History {
        if self.per_turn { History::Last(0) } else { self.history }
    }
}

impl Default for RolloutConfig {
    fn default() -> Self {
        RolloutConfig {
            format: Format::FreeThink,
            history: History::All,
            format_reward: FormatReward::default(),
            system_prompt: None,
            instructions: true,
            describe_state: false,
            observation_text: true,
            feedback: true,
            reminder: true,
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            val_temperature: 0.0,
            max_new_tokens: 128,
            context_overflow: ContextOverflow::End,
            explore: 0.0,
            explore_at: ExploreAt::default(),
            per_turn: false,
            max_sequence_tokens: 4096,
            max_image_tokens: 0,
            max_image_pixels: 0,
            rewards: RewardPlacement::PerTurn,
            reuse_logprobs: false,
            group_size: 1,
            max_turns: 0,
            max_actions_per_turn: 0,
            max_actions_per_episode: 0,
            record_states: false,
        }
    }
}
