//! The PPO clipped policy loss with decoupled clipping (ε_low, ε_high), dual clip for
//! negative advantages, an entropy bonus, an optional KL penalty to a reference policy, and
//! an optional off-policy correction for tokens a policy other than π_old sampled.

use crate::aggregate::{LossAgg, aggregate, masked_mean};
use crate::scalar;
use serde::{Deserialize, Serialize};
use tch::Tensor;

/// Hyperparameters, defaults as RAGEN's StarPO-S.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyLossConfig {
    /// Lower clip: the ratio is not pushed below 1 − ε_low (0.2).
    pub clip_low: f64,
    /// Upper clip: the ratio is not pushed above 1 + ε_high (0.28, "clip-higher").
    pub clip_high: f64,
    /// Dual clip c for negative advantages: the loss is at most −A·c (3); `None` turns it off.
    pub dual_clip: Option<f64>,
    /// Entropy bonus coefficient (0.001).
    pub entropy_coef: f64,
    /// KL to a reference policy; off by default.
    pub kl: Option<KlPenalty>,
    pub aggregation: LossAgg,
}

impl Default for PolicyLossConfig {
    fn default() -> Self {
        Self {
            clip_low: 0.2,
            clip_high: 0.28,
            dual_clip: Some(3.0),
            entropy_coef: 0.001,
            kl: None,
            aggregation: LossAgg::TokenMean,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KlPenalty {
    pub kind: KlKind,
    pub coef: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KlKind {
    /// log π − log π_ref.
    K1,
    /// Schulman's low-variance estimator: exp(ref − logπ) − (ref − logπ) − 1, clamped to ±10.
    #[serde(alias = "low-var-kl")]
    K3,
    /// ½ (log π − log π_ref)².
    Mse,
}

/// How the loss treats tokens sampled by a behaviour policy other than π_old, the policy
/// the ratio starts from (`algorithm.off_policy`). The weight is w = π_old / π_behaviour per
/// token, detached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OffPolicy {
    /// The PPO loss as it is: π_old stands for the sampler.
    #[default]
    None,
    /// Truncated importance sampling: each token's loss times min(w, cap). Yao et al. 2025,
    /// "Your efficient RL framework secretly brings you off-policy RL training"; verl's
    /// `compute_policy_loss_vanilla` with `rollout_is_weights` (`trainer/ppo/core_algos.py`).
    Tis,
    /// Decoupled PPO: the clip stays around the proximal policy π_old, each token's loss is
    /// weighted by w, and a token whose w passes the cap counts zero. Hilton et al. 2022,
    /// "Batch size-invariance for policy optimization"; AReaL's `ppo_actor_loss_fn`
    /// (`areal/utils/functional.py`, `behav_imp_weight_cap`).
    Decoupled,
}

/// The behaviour policy's log-probs and what to do with them.
pub struct Behaviour<'a> {
    pub log_probs: &'a Tensor,
    pub correction: OffPolicy,
    /// TIS's truncation, decoupled's cap on w.
    pub cap: f64,
}

/// Tensors of shape `[batch, tokens]`.
pub struct PolicyLossInput<'a> {
    /// Log-probs of the sampled tokens under the current policy (carries gradients).
    pub log_probs: &'a Tensor,
    /// The same under the policy that sampled them.
    pub old_log_probs: &'a Tensor,
    pub advantages: &'a Tensor,
    /// 1 on tokens to train on (assistant tokens), 0 elsewhere.
    pub mask: &'a Tensor,
    /// Per-token entropy of the current policy, for the bonus.
    pub entropy: Option<&'a Tensor>,
    /// Log-probs under the reference policy, when a KL penalty is on.
    pub ref_log_probs: Option<&'a Tensor>,
    /// The sampler's log-probs, for an off-policy correction.
    pub behaviour: Option<Behaviour<'a>>,
}

/// The loss to backpropagate and what to log.
pub struct PolicyLoss {
    pub loss: Tensor,
    pub pg_loss: f64,
    /// Share of masked tokens whose ratio was cut at 1 + ε_high (A > 0).
    pub clip_frac_high: f64,
    /// Share cut at 1 − ε_low (A < 0).
    pub clip_frac_low: f64,
    /// Share capped by the dual clip (A < 0, ratio beyond c).
    pub dual_clip_frac: f64,
    /// mean(log π_old − log π): how far the update has moved.
    pub approx_kl: f64,
    pub entropy: f64,
    /// The KL penalty's mean value (0 when off).
    pub kl: f64,
    /// Mean off-policy weight applied (1 without a correction).
    pub off_policy_weight: f64,
    /// Share of tokens whose w = π_old / π_behaviour passed the cap (truncated or dropped).
    pub off_policy_capped: f64,
}

/// The loss, in the order of the paper:
/// ρ = exp(log π − log π_old); L = max(−A·ρ, −A·clip(ρ, 1 − ε_low, 1 + ε_high));
/// for A < 0, L = min(L, −A·c); then − entropy_coef·H + kl_coef·KL.
pub fn policy_loss(cfg: &PolicyLossConfig, x: &PolicyLossInput) -> PolicyLoss {
    let mask = x.mask.to_kind(x.log_probs.kind());
    let a = x.advantages.detach();
    let log_ratio = x.log_probs - x.old_log_probs.detach();
    let ratio = log_ratio.exp();
    let unclipped = -&a * &ratio;
    let clipped = -&a * ratio.clamp(1.0 - cfg.clip_low, 1.0 + cfg.clip_high);
    let mut per_token = unclipped.maximum(&clipped);
    let negative = a.lt(0.0);
    let mut dual_clip_frac = 0.0;
    if let Some(c) = cfg.dual_clip {
        let cap = -&a * c;
        dual_clip_frac = masked_mean(&per_token.gt_tensor(&cap).logical_and(&negative), &mask);
        per_token = per_token.minimum(&cap).where_self(&negative, &per_token);
    }
    let (mut off_policy_weight, mut off_policy_capped) = (1.0, 0.0);
    if let Some(b) = x.behaviour.as_ref().filter(|b| b.correction != OffPolicy::None) {
        let w = (x.old_log_probs.detach() - b.log_probs.detach()).exp();
        let over = w.gt(b.cap);
        off_policy_capped = masked_mean(&over, &mask);
        let weight = match b.correction {
            OffPolicy::Tis => w.clamp_max(b.cap),
            _ => w.zeros_like().where_self(&over, &w),
        };
        off_policy_weight = masked_mean(&weight, &mask);
        per_token *= weight;
    }
    let pg_loss = aggregate(&per_token, &mask, cfg.aggregation);

    let positive = a.gt(0.0);
    let clip_frac_high = masked_mean(&ratio.gt(1.0 + cfg.clip_high).logical_and(&positive), &mask);
    let clip_frac_low = masked_mean(&ratio.lt(1.0 - cfg.clip_low).logical_and(&negative), &mask);
    let approx_kl = masked_mean(&-&log_ratio, &mask);

    let mut loss = pg_loss.shallow_clone();
    let mut entropy = 0.0;
    if let Some(h) = x.entropy {
        let mean_h = aggregate(h, &mask, cfg.aggregation);
        entropy = scalar(&mean_h);
        loss -= mean_h * cfg.entropy_coef;
    }
    let mut kl = 0.0;
    if let (Some(penalty), Some(reference)) = (&cfg.kl, x.ref_log_probs) {
        let d = x.log_probs - reference.detach();
        let per_token_kl = match penalty.kind {
            KlKind::K1 => d,
            KlKind::K3 => {
                let r = -d;
                (r.exp() - &r - 1.0).clamp(-10.0, 10.0)
            }
            KlKind::Mse => d.square() * 0.5,
        };
        let mean_kl = aggregate(&per_token_kl, &mask, cfg.aggregation);
        kl = scalar(&mean_kl);
        loss += mean_kl * penalty.coef;
    }
    PolicyLoss {
        pg_loss: scalar(&pg_loss),
        loss,
        clip_frac_high,
        clip_frac_low,
        dual_clip_frac,
        approx_kl,
        entropy,
        kl,
        off_policy_weight,
        off_policy_capped,
    }
}
