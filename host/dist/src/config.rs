//! `[distributed]`: which collectives library, and how long a rank waits for the others.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// NCCL for a model on CUDA, gloo on the CPU.
    #[default]
    Auto,
    Gloo,
    Nccl,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DistributedConfig {
    pub backend: Backend,
    /// A collective waits this long for the slowest rank, and a rank whose heartbeat stops
    /// for this long is declared lost (every other rank then exits, naming it).
    pub timeout_s: f64,
}

impl Default for DistributedConfig {
    fn default() -> Self {
        DistributedConfig { backend: Backend::Auto, timeout_s: 300.0 }
    }
}

impl DistributedConfig {
    /// A timeout that is not a positive number of seconds, named.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.timeout_s.is_finite() && self.timeout_s > 0.0 && self.timeout_s <= 86_400.0) {
            return Err(format!("distributed.timeout_s = {} is not a number of seconds in (0, 86400]", self.timeout_s));
        }
        Ok(())
    }
}
