//! Failed episodes and the one failure policy every caller of the driver applies: an
//! episode fails alone (the env faulted), and a run stops when more than a set share of
//! its episodes failed, with a reproducer of the first.

use crate::Trajectory;
use serde::Serialize;
use std::collections::BTreeMap;
use vagen_runtime::Plugin;
use vagen_runtime::fuzz::Reproducer;

/// The env call an episode failed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "call", rename_all = "kebab-case")]
pub enum FailedCall {
    /// `reset` (or the system prompt or state description read with it).
    Reset,
    /// The oracle asked for turn `turn`'s answer.
    Oracle { turn: usize },
    /// `step` with turn `turn`'s answer (or the state description read after it).
    Step { turn: usize },
    /// Not the env's: the policy could not answer turn `turn` (its server never answered).
    /// The episode is lost, not failed by the env; counted apart where that matters (`eval`).
    Policy { turn: usize },
    /// A harness process (an agent program run per episode) failed: crashed, ran past its
    /// deadline, flooded its output or reported no valid reward.
    Harness,
}

/// Why an episode could not go on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    #[serde(flatten)]
    pub call: FailedCall,
    /// The runtime error's stable name (`timeout`, `trap`, `out-of-memory`, `malformed`, …),
    /// `no-answer` for an oracle without one in a run without a format, or the policy's
    /// (`unanswered`).
    pub kind: &'static str,
    pub message: String,
}

impl Failure {
    pub fn new(call: FailedCall, e: &vagen_runtime::Error) -> Self {
        Failure { call, kind: e.kind(), message: e.to_string() }
    }

    /// `call:kind`, e.g. `step:trap`: how failures are counted.
    pub fn label(&self) -> String {
        let call = match self.call {
            FailedCall::Reset => "reset",
            FailedCall::Oracle { .. } => "oracle",
            FailedCall::Step { .. } => "step",
            FailedCall::Policy { .. } => "policy",
            FailedCall::Harness => "harness",
        };
        format!("{call}:{}", self.kind)
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.call {
            FailedCall::Reset => write!(f, "reset: {}", self.message),
            FailedCall::Oracle { turn } => write!(f, "turn {turn}: oracle: {}", self.message),
            FailedCall::Step { turn } => write!(f, "turn {turn}: {}", self.message),
            FailedCall::Policy { turn } => write!(f, "turn {turn}: policy: {}", self.message),
            FailedCall::Harness => write!(f, "harness: {}", self.message),
        }
    }
}

/// Counts as a reader sees them: `1 reset:timeout, 2 step:trap`.
pub fn counts_text(counts: &BTreeMap<String, usize>) -> String {
    counts.iter().map(|(k, n)| format!("{n} {k}")).collect::<Vec<_>>().join(", ")
}

/// Failed episodes counted by [`Failure::label`].
pub fn count_failures(trajs: &[Trajectory]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for f in trajs.iter().filter_map(|t| t.failure.as_ref()) {
        *counts.entry(f.label()).or_insert(0) += 1;
    }
    counts
}

/// How many failed episodes a run takes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FailurePolicy {
    /// More than this share of the episodes failed stops the run.
    pub max_rate: f64,
    /// Judged while running only from this many episodes on (the end always judges).
    pub min_episodes: usize,
}

impl FailurePolicy {
    pub fn new(max_rate: f64) -> Self {
        FailurePolicy { max_rate, min_episodes: 20 }
    }

    /// Whether `failed` of `total` is too many.
    pub fn exceeded(&self, failed: usize, total: usize) -> bool {
        failed > 0 && failed as f64 > self.max_rate * total as f64
    }

    /// The verdict on a run's episodes.
    pub fn check(&self, trajs: &[Trajectory]) -> Result<(), TooManyFailures> {
        let failed = trajs.iter().filter(|t| t.failure.is_some()).count();
        if !self.exceeded(failed, trajs.len()) {
            return Ok(());
        }
        let first = trajs.iter().find(|t| t.failure.is_some()).expect("some episode failed");
        Err(TooManyFailures {
            failed,
            total: trajs.len(),
            max_rate: self.max_rate,
            counts: count_failures(trajs),
            seed: first.seed,
            answers: first.answers(),
            failure: first.failure.clone().expect("a failed episode"),
        })
    }
}

/// More episodes failed than the policy allows: the counts and the first failed episode.
#[derive(Debug, Clone, PartialEq)]
pub struct TooManyFailures {
    pub failed: usize,
    pub total: usize,
    pub max_rate: f64,
    pub counts: BTreeMap<String, usize>,
    pub seed: u64,
    /// Every answer the first failed episode sent, the failing one included.
    pub answers: Vec<String>,
    pub failure: Failure,
}

impl TooManyFailures {
    /// A reproducer of the first failed episode: replaying its answers from its seed.
    pub fn reproducer(&self, plugin: &dyn Plugin, env_config: &str) -> Reproducer {
        // The call a replay makes that failed: reset is call 0, the k-th step call k. An
        // oracle fault is not a call a replay of the answers makes.
        let call = match self.failure.call {
            FailedCall::Reset => Some(0),
            FailedCall::Step { .. } => Some(self.answers.len()),
            FailedCall::Oracle { .. } | FailedCall::Policy { .. } | FailedCall::Harness => None,
        };
        Reproducer::failure(plugin, env_config, self.seed, self.answers.clone(), &self.failure.to_string(), call)
    }
}

impl std::fmt::Display for TooManyFailures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} episodes failed ({}), more than the {} allowed; first error: {}",
            self.failed,
            self.total,
            counts_text(&self.counts),
            self.max_rate,
            self.failure
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn episode(seed: u64, failure: Option<Failure>) -> Trajectory {
        Trajectory { seed, failure, failed_answer: Some("Up".into()), ..Trajectory::empty("t", 0, 0, seed) }
    }

    #[test]
    fn failures_are_typed_counted_and_judged_against_the_rate() {
        let trap = |turn| Failure { call: FailedCall::Step { turn }, kind: "trap", message: "boom".into() };
        let timeout = Failure { call: FailedCall::Reset, kind: "timeout", message: "slow".into() };
        let trajs =
            vec![episode(1, None), episode(2, Some(trap(3))), episode(3, Some(timeout)), episode(4, Some(trap(0)))];
        let policy = FailurePolicy::new(0.5);
        let e = policy.check(&trajs).unwrap_err();
        assert_eq!((e.failed, e.total, e.seed), (3, 4, 2));
        assert_eq!(e.counts, BTreeMap::from([("reset:timeout".into(), 1), ("step:trap".into(), 2)]));
        assert_eq!(e.answers, vec!["Up".to_string()], "the failing answer is the last one");
        let text = e.to_string();
        assert!(
            text.contains("3 of 4 episodes failed (1 reset:timeout, 2 step:trap)") && text.contains("turn 3: boom"),
            "{text}"
        );
        assert!(FailurePolicy::new(0.75).check(&trajs).is_ok(), "3 of 4 is not more than 75%");
        assert!(FailurePolicy::new(1.0).check(&trajs).is_ok());
        assert!(!FailurePolicy::new(0.0).exceeded(0, 10), "no failure is never too many");
    }
}
