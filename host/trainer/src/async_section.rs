//! `[async]` of a training config: how far rollouts may run ahead of the update, and when
//! the generator thread takes newer weights (see `generator.rs`).

use crate::config_error::{ConfigError, invalid};
use serde::{Deserialize, Serialize};

/// `[async]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AsyncSection {
    /// How many updates behind the trainer a batch's weights may be (0: synchronous).
    pub max_staleness: usize,
    /// When the generator takes newer weights.
    pub refresh: Refresh,
    /// libtorch intra-op threads of the generator thread (0: libtorch's default, every
    /// core): the generator and the update share the machine's cores.
    pub generator_threads: usize,
    /// libtorch intra-op threads of the trainer's thread while a generator runs (0: as
    /// before).
    pub trainer_threads: usize,
}

impl AsyncSection {
    /// `decode-step` refreshes a generator's weights: it needs one. (What it needs of the
    /// engine is `TrainConfig::validate`'s.)
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.refresh == Refresh::DecodeStep && self.max_staleness == 0 {
            return invalid(
                "async.refresh",
                "decode-step needs a generator: set async.max_staleness to 1 or more".into(),
            );
        }
        Ok(())
    }
}

/// `[async] refresh`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Refresh {
    /// Before a batch, exactly k versions behind: reproducible.
    #[default]
    Batch,
    /// Before every decode step, the newest published: fresher, timing-dependent.
    DecodeStep,
}
