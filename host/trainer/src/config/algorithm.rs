//! `[algorithm]`: the advantage estimator, the StarPO-S filter, the losses and the
//! off-policy correction.

use crate::config_error::{ConfigError, Range, in_ranges, invalid};
use crate::policy_loss::{OffPolicy, PolicyLossConfig};
use crate::value_loss::ValueLossConfig;
use serde::{Deserialize, Serialize};
use vagen_algo::{AdvantageConfig, Estimator, FilterConfig};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlgorithmSection {
    pub advantage: AdvantageConfig,
    pub filter: FilterConfig,
    pub policy_loss: PolicyLossConfig,
    pub value_loss: ValueLossConfig,
    /// Off-policy correction against the policy that sampled each token (generation's
    /// log-probs): `none`, `tis` or `decoupled` (see `OffPolicy`), or `auto` (default):
    /// `tis` for a bf16 or f16 actor, `none` in f32. Without `rollout.reuse_logprobs`, π_old
    /// is the update's own forward and generation's numerics (another engine, batch shapes,
    /// bf16) are what it corrects.
    pub off_policy: OffPolicyChoice,
    /// TIS's truncation of w = π_old / π_behaviour, and decoupled PPO's cap (tokens over it
    /// count zero) (2.0).
    pub off_policy_cap: f64,
}

impl Default for AlgorithmSection {
    fn default() -> Self {
        AlgorithmSection {
            advantage: AdvantageConfig { estimator: Estimator::Grpo, ..AdvantageConfig::default() },
            filter: FilterConfig { keep_fraction: 1.0, ..FilterConfig::default() },
            policy_loss: PolicyLossConfig::default(),
            value_loss: ValueLossConfig::default(),
            off_policy: OffPolicyChoice::Auto,
            off_policy_cap: 2.0,
        }
    }
}

/// `algorithm.off_policy`: see [`AlgorithmSection::off_policy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OffPolicyChoice {
    #[default]
    Auto,
    None,
    Tis,
    Decoupled,
}

impl OffPolicyChoice {
    /// The correction an actor of `dtype` trains with. In bf16 and f16 generation and the
    /// training forward disagree by up to 0.07 nats (an H100, docs/gpu.md), which TIS with
    /// its cap of 2 corrects as verl, slime and SkyRL do; in f32 they agree to ≈1e-7.
    pub fn resolve(self, dtype: vagen_model::DType) -> OffPolicy {
        match self {
            OffPolicyChoice::Auto if dtype == vagen_model::DType::F32 => OffPolicy::None,
            OffPolicyChoice::Auto | OffPolicyChoice::Tis => OffPolicy::Tis,
            OffPolicyChoice::None => OffPolicy::None,
            OffPolicyChoice::Decoupled => OffPolicy::Decoupled,
        }
    }
}

impl AlgorithmSection {
    /// A usable off-policy cap and filter, and every coefficient finite and in its range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let cap = self.off_policy_cap;
        if !(cap.is_finite() && cap >= 1.0) {
            return invalid("algorithm.off_policy_cap", format!("{cap} is not a weight cap of at least 1"));
        }
        let (pl, est) = (&self.policy_loss, self.advantage.estimator);
        if self.filter.drop_zero_advantage && (pl.entropy_coef != 0.0 || pl.kl.is_some() || est.uses_critic()) {
            return invalid(
                "algorithm.filter.drop_zero_advantage",
                "a sequence with zero advantages still feeds the entropy bonus, the KL penalty or the critic: \
                 set entropy_coef = 0, no kl and a critic-free estimator, or turn it off"
                    .into(),
            );
        }
        let f = self.filter.keep_fraction;
        if !(f > 0.0 && f <= 1.0) {
            return invalid("algorithm.filter.keep_fraction", format!("{f} is not in (0, 1]"));
        }
        self.check_numbers()
    }

    fn check_numbers(&self) -> Result<(), ConfigError> {
        use Range::*;
        let (pl, a) = (&self.policy_loss, &self.advantage);
        let mut checks = vec![
            ("algorithm.policy_loss.clip_low", pl.clip_low, NonNegative),
            ("algorithm.policy_loss.clip_high", pl.clip_high, NonNegative),
            ("algorithm.policy_loss.entropy_coef", pl.entropy_coef, Scale),
            ("algorithm.value_loss.clip", self.value_loss.clip, NonNegative),
            ("algorithm.advantage.gamma", a.gamma, Unit),
            ("algorithm.advantage.lambda", a.lambda, Unit),
            ("algorithm.advantage.gamma_turn", a.gamma_turn, Unit),
            ("algorithm.advantage.epsilon", a.epsilon, Positive),
        ];
        checks.extend(pl.dual_clip.map(|c| ("algorithm.policy_loss.dual_clip", c, AboveOne)));
        checks.extend(pl.kl.as_ref().map(|k| ("algorithm.policy_loss.kl.coef", k.coef, NonNegative)));
        checks.extend(a.lambda_turn.map(|l| ("algorithm.advantage.lambda_turn", l, Unit)));
        checks.extend(a.lambda_token.map(|l| ("algorithm.advantage.lambda_token", l, Unit)));
        in_ranges(checks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vagen_model::DType;

    #[test]
    fn off_policy_auto_is_tis_where_generation_rounds_otherwise_than_training() {
        assert_eq!(AlgorithmSection::default().off_policy, OffPolicyChoice::Auto);
        let auto = OffPolicyChoice::Auto;
        assert_eq!(
            [DType::F32, DType::Bf16, DType::F16].map(|d| auto.resolve(d)),
            [OffPolicy::None, OffPolicy::Tis, OffPolicy::Tis]
        );
        // A correction written out is kept in every dtype.
        for (written, want) in [("none", OffPolicy::None), ("tis", OffPolicy::Tis), ("decoupled", OffPolicy::Decoupled)]
        {
            let s: AlgorithmSection = toml::from_str(&format!("off_policy = {written:?}")).unwrap();
            assert_eq!([DType::F32, DType::Bf16].map(|d| s.off_policy.resolve(d)), [want, want]);
        }
        assert!(toml::from_str::<AlgorithmSection>("off_policy = \"sometimes\"").is_err());
    }
}
