//! Multi-turn rollouts: env observations into model prompts, model text back into env
//! actions, and the token layout training needs.
//!
//! - [`Format`] and [`parse`]: the reasoning formats and the response parser; the prompt's
//!   pieces are [`RolloutConfig`]'s (`system_message`, `user_message`, `read_answer`, …).
//! - [`Policy`]: random, oracle, noisy-oracle, scripted and exploring policies behind one
//!   batch interface (the model's is `vagen_policy::ModelPolicy`); each answer says who
//!   wrote it ([`AnswerOrigin`]).
//! - [`rollout`]: the driver (groups × members, parallel env steps, faults contained), and
//!   [`Episodes`]: the one episode loop over it (chunks, logs as it goes, the
//!   [`FailurePolicy`] with typed [`Failure`]s) that the CLI and the trainer share.
//! - [`layout`]: one training sequence per trajectory from the sampled ids.

mod chat_layout;
mod config;
mod driver;
mod episodes;
mod explore;
mod failure;
mod format;
mod layout;
mod noisy;
mod parse;
mod policy;
mod prompter;
mod recording;
mod stream;

pub use chat_layout::layout_chat;
pub use config::{EpisodeShape, FormatReward, History, RolloutConfig};
pub use driver::{RolloutError, RolloutMetrics, RolloutTotals, Trajectory, Truncation, TurnRecord, metrics, rollout};
pub use episodes::{Episodes, Outcome};
pub use explore::{ExploreAt, Exploring};
pub use failure::{FailedCall, Failure, FailurePolicy, TooManyFailures, count_failures, counts_text};
pub use format::{Format, TAGS};
pub use layout::{
    AssistantTurn, ChatTokenizer, LayoutError, LayoutOptions, PromptIds, RewardPlacement, TrainingSequence, layout,
    prompt_ids,
};
pub use noisy::NoisyOracle;
pub use parse::{Parsed, parse};
pub use policy::{
    AnswerOrigin, ContextOverflow, OraclePolicy, OutOfContext, Policy, PolicyError, RandomPolicy, Request, Response,
    ScriptedPolicy, StreamingPolicy,
};
pub use prompter::feedback;
pub use recording::{Recorded, Recording, RecordingError};
/// The env's RGB8 image, as policies receive it, and the conversation they answer.
pub use vagen_abi::{IMAGE_MARKER, Image, Message};
