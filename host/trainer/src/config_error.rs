//! What a config section's `validate` answers: [`ConfigError`], naming the field at fault,
//! and the [`Range`]s its real-valued settings are checked against. Below every section (the
//! `[rollout]` and `[async]` ones included), so each checks itself.

use vagen_runtime::LimitError;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("--set {0}: expected key.path=value")]
    BadOverride(String),
    #[error("{field}: {message}")]
    Invalid { field: &'static str, message: String },
    /// A key of a table that several parts read (`[rollout]`) that none of them takes.
    #[error(
        "{0}: unknown key (the rollout's, the sampling's and the sequences' keys are documented in vagen_rollout::RolloutConfig, vagen_model::Sampling and host/trainer/src/rollout_section.rs)"
    )]
    UnknownKey(String),
    /// A `[sandbox]` key that is unknown or holds an unusable value. (Not a `#[from]`,
    /// which would make the limit error a source and print its message twice.)
    #[error("sandbox.{0}")]
    Sandbox(LimitError),
}

impl From<LimitError> for ConfigError {
    fn from(e: LimitError) -> Self {
        ConfigError::Sandbox(e)
    }
}

/// `field` refused for `message`.
pub(crate) fn invalid(field: &'static str, message: String) -> Result<(), ConfigError> {
    Err(ConfigError::Invalid { field, message })
}

/// The first of `checks` (field, value, range) whose value is out of its range, refused.
pub(crate) fn in_ranges(checks: impl IntoIterator<Item = (&'static str, f64, Range)>) -> Result<(), ConfigError> {
    for (field, value, range) in checks {
        if let Some(message) = range.refuses(value) {
            return invalid(field, message);
        }
    }
    Ok(())
}

/// The largest coefficient magnitude accepted (`Range::Scale`).
const MAX_SCALE: f64 = 1e6;

/// Where a real-valued setting may lie (all of them finite).
#[derive(Clone, Copy)]
pub(crate) enum Range {
    NonNegative,
    Positive,
    /// [0, 1].
    Unit,
    /// (0, 1].
    Share,
    /// > 1 (dual-clip's bound on a negative advantage's ratio).
    AboveOne,
    /// (0, 1]: no optimiser here takes a larger step size sanely.
    LearningRate,
    /// |v| <= 1e6, as rewards are bounded (`max_abs_reward`): a coefficient past it turns
    /// every loss or reward it touches into an overflow.
    Scale,
    /// (0, 1e6].
    PositiveScale,
}

impl Range {
    /// Why `v` is refused, if it is.
    pub(crate) fn refuses(self, v: f64) -> Option<String> {
        let ok = v.is_finite()
            && match self {
                Range::NonNegative => v >= 0.0,
                Range::Positive => v > 0.0,
                Range::Unit => (0.0..=1.0).contains(&v),
                Range::Share => v > 0.0 && v <= 1.0,
                Range::AboveOne => v > 1.0,
                Range::LearningRate => v > 0.0 && v <= 1.0,
                Range::Scale => v.abs() <= MAX_SCALE,
                Range::PositiveScale => v > 0.0 && v <= MAX_SCALE,
            };
        let want = match self {
            Range::NonNegative => "a finite number >= 0",
            Range::Positive => "a finite number > 0",
            Range::Unit => "in [0, 1]",
            Range::Share => "in (0, 1]",
            Range::AboveOne => "a finite number > 1",
            Range::LearningRate => "a learning rate in (0, 1]",
            Range::Scale => "a number within ±1e6",
            Range::PositiveScale => "in (0, 1e6]",
        };
        // 1e300 as itself, not as 301 digits.
        let shown = if v.is_finite() && v != 0.0 && !(1e-4..1e6).contains(&v.abs()) {
            format!("{v:e}")
        } else {
            format!("{v}")
        };
        (!ok).then(|| format!("{shown} is not {want}"))
    }
}
