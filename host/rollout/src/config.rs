//! `[rollout]`'s part that the rollout reads: how episodes are played (format, prompts,
//! history, format reward, exploration); and [`EpisodeShape`], the batch a call plays,
//! which is its caller's. Sampling is the model's (`vagen_model::Sampling`); the training
//! sequences' budgets and layout are the trainer's.

use crate::{ExploreAt, Format};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::num::{NonZeroU32, NonZeroUsize};

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

/// How episodes are played and what the policy is shown: the format and its reward, the
/// prompt's wording and history, and exploration. Deserialised from `[rollout]` beside
/// the sampling (`vagen_model::Sampling`) and the trainer's layout fields, each part taking
/// its own keys (the trainer refuses keys no part takes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RolloutConfig {
    pub format: Format,
    /// Earlier turns in each prompt: 0 for all, else the last k (one sequence per
    /// trajectory; a trainer laying out one sequence per turn asks for none).
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
    /// Probability that a training turn's answer is replaced by a random valid action
    /// (written in the format), for exploration where the policy is confidently wrong:
    /// a group whose episodes all answer alike has nothing to compare. The replaced turns
    /// are trained on like sampled ones, their old log-probs from a forward pass. 0: off;
    /// evaluation never explores.
    pub explore: f64,
    /// What `explore` applies to: `turn` (each training turn) or `shared-state` (once per
    /// state several episodes of a group are in at the same turn, diverting one of them).
    pub explore_at: ExploreAt,
    /// Play each episode on its own when the policy streams (the model's continuous
    /// engine): its next turn asked as soon as its env step returns (true). Off, every
    /// turn waits for the slowest step, and each engine step's batch is the same from run
    /// to run whatever the env steps' timing: libtorch's CPU matrix products are not
    /// bit-identical across batch sizes, so only then are a seeded run's log-probs (and
    /// what trains on them) reproducible to the last bit.
    pub stream: bool,
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
            explore: 0.0,
            explore_at: ExploreAt::default(),
            stream: true,
        }
    }
}

/// The batch a `rollout` call plays and what its records keep: the caller's (`[env]` of a
/// training config, `vagen-host run`'s flags), not `[rollout]`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpisodeShape {
    /// Episodes of one group share their seed (GRPO-style groups).
    pub group_size: NonZeroUsize,
    /// `None`: the env's default; the sandbox's `max_turns` caps either.
    pub max_turns: Option<NonZeroU32>,
    /// `None`: the env's own limit per turn.
    pub max_actions_per_turn: Option<NonZeroUsize>,
    /// Actions an episode may send in all; `None` for no limit.
    pub max_actions_per_episode: Option<NonZeroUsize>,
    /// Keep the env's `describe_state` before and after every step in the turn records
    /// (what reward functions compare the agent's observation and prediction with).
    pub record_states: bool,
}

impl Default for EpisodeShape {
    fn default() -> Self {
        EpisodeShape {
            group_size: NonZeroUsize::MIN,
            max_turns: None,
            max_actions_per_turn: None,
            max_actions_per_episode: None,
            record_states: false,
        }
    }
}

impl EpisodeShape {
    /// Groups of `group_size` episodes (0 counts as 1), the env's own limits otherwise.
    pub fn groups_of(group_size: usize) -> Self {
        EpisodeShape { group_size: NonZeroUsize::new(group_size).unwrap_or(NonZeroUsize::MIN), ..Default::default() }
    }

    /// At most `turns` turns an episode (0: the env's default).
    pub fn with_max_turns(self, turns: u32) -> Self {
        EpisodeShape { max_turns: NonZeroU32::new(turns), ..self }
    }
}
