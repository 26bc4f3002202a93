//! Estimators behind stable names, one entry point.

use crate::gae::{self, BiLevel};
use crate::gigpo;
use crate::group::normalised_scores;
use crate::stats::mean;
use crate::{AlgoError, Trajectory};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Estimator {
    /// Masked token GAE (RAGEN's default).
    Gae,
    /// Turn-level GAE over turn ends, then token GAE inside each turn (VAGEN-Full).
    BiLevelGae,
    /// The turn-level advantage broadcast over the turn; the critic learns at turn ends.
    TurnGae,
    /// Trajectory score normalised within its group (same seed); no critic.
    Grpo,
    /// Trajectory score normalised over the batch; no critic.
    Brpo,
    /// The raw trajectory score; no critic.
    Reinforce,
    /// GiGPO: grpo's trajectory term plus `step_weight` × each turn's discounted return
    /// (`gamma_turn`) normalised among the group's turns taken in the same state
    /// (`Trajectory::turn_states`); no critic.
    Gigpo,
}

impl Estimator {
    pub fn uses_critic(self) -> bool {
        matches!(self, Estimator::Gae | Estimator::BiLevelGae | Estimator::TurnGae)
    }

    /// Which positions' advantages set the whitening mean and variance, as VAGEN / verl do:
    /// turn-gae gives every token of a turn the same value, so counting tokens would weigh
    /// long turns more; VAGEN whitens it over the turn ends (its `reward_mask`). Every other
    /// estimator uses every advantage-mask token (verl's `masked_whiten` over the response
    /// or loss mask). The shift and scale then apply to every masked token either way.
    pub fn whitening_population(self) -> WhiteningPopulation {
        match self {
            Estimator::TurnGae => WhiteningPopulation::TurnEnds,
            _ => WhiteningPopulation::MaskedTokens,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhiteningPopulation {
    MaskedTokens,
    TurnEnds,
}

/// Hyperparameters of the estimators; each says which estimators read it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdvantageConfig {
    pub estimator: Estimator,
    /// Token-level discount (gae; the token level of bi-level-gae).
    pub gamma: f64,
    /// Token-level GAE λ (gae; the token level of bi-level-gae unless `lambda_token` is set).
    pub lambda: f64,
    /// Turn-level discount (bi-level-gae, turn-gae; VAGEN 0.95; gigpo's step return).
    pub gamma_turn: f64,
    /// Turn-level λ (bi-level-gae, turn-gae); unset: `lambda`, as VAGEN shares it.
    pub lambda_turn: Option<f64>,
    /// Token-level λ inside turns (bi-level-gae); unset: `lambda`.
    pub lambda_token: Option<f64>,
    /// Whiten advantages over the batch (see [`Estimator::whitening_population`] for which
    /// positions set the mean and variance); unset: on for the critic-based estimators, off
    /// for grpo / brpo / reinforce / gigpo (already normalised, or raw by design).
    pub whiten: Option<bool>,
    /// Added to the standard deviation in grpo / brpo / gigpo.
    pub epsilon: f64,
    /// Divide by the group's standard deviation in grpo / brpo / gigpo (verl's
    /// `norm_adv_by_std_in_grpo`); false: subtract the mean only (Dr. GRPO), so a group whose
    /// scores barely differ gets small advantages instead of ±1.
    pub norm_by_std: bool,
    /// Weight of gigpo's step-level term (ω in the paper, 1.0 there).
    pub step_weight: f64,
}

impl Default for AdvantageConfig {
    fn default() -> Self {
        Self {
            estimator: Estimator::Gae,
            gamma: 1.0,
            lambda: 1.0,
            gamma_turn: 0.95,
            lambda_turn: None,
            lambda_token: None,
            whiten: None,
            epsilon: 1e-6,
            norm_by_std: true,
            step_weight: 1.0,
        }
    }
}

impl AdvantageConfig {
    fn validate(&self) -> Result<(), AlgoError> {
        let unit = |name, value: f64| {
            if (0.0..=1.0).contains(&value) {
                Ok(())
            } else {
                Err(AlgoError::BadParameter { name, value, range: "[0, 1]" })
            }
        };
        unit("gamma", self.gamma)?;
        unit("lambda", self.lambda)?;
        unit("gamma_turn", self.gamma_turn)?;
        unit("lambda_turn", self.lambda_turn.unwrap_or(self.lambda))?;
        unit("lambda_token", self.lambda_token.unwrap_or(self.lambda))?;
        if !(self.epsilon > 0.0 && self.epsilon.is_finite()) {
            return Err(AlgoError::BadParameter { name: "epsilon", value: self.epsilon, range: "(0, ∞)" });
        }
        if !(self.step_weight >= 0.0 && self.step_weight.is_finite()) {
            return Err(AlgoError::BadParameter { name: "step_weight", value: self.step_weight, range: "[0, ∞)" });
        }
        Ok(())
    }
}

/// One trajectory's result; every vector is as long as the trajectory.
#[derive(Clone, Debug, PartialEq)]
pub struct Advantages {
    /// 0 outside the advantage mask.
    pub advantages: Vec<f64>,
    /// Value targets; 0 outside the mask; critic-free estimators put the advantage here.
    pub returns: Vec<f64>,
    /// Tokens the value loss trains on (none for critic-free estimators).
    pub value_mask: Vec<bool>,
}

/// Advantages and returns for a batch. Whitening, when on, takes the mean and unbiased
/// variance (ε = 1e-8) over the estimator's [`WhiteningPopulation`] in the whole batch,
/// shifts and scales every masked token, and leaves returns alone.
pub fn compute_advantages(cfg: &AdvantageConfig, batch: &[Trajectory]) -> Result<Vec<Advantages>, AlgoError> {
    cfg.validate()?;
    for (i, t) in batch.iter().enumerate() {
        t.validate(i)?;
    }
    let lambda_turn = cfg.lambda_turn.unwrap_or(cfg.lambda);
    let mut out: Vec<Advantages> = match cfg.estimator {
        Estimator::Gae => batch.iter().map(|t| gae::masked_gae(t, cfg.gamma, cfg.lambda).into()).collect(),
        Estimator::BiLevelGae => {
            let p = BiLevel {
                gamma_turn: cfg.gamma_turn,
                lambda_turn,
                gamma_token: cfg.gamma,
                lambda_token: cfg.lambda_token.unwrap_or(cfg.lambda),
            };
            batch
                .iter()
                .enumerate()
                .map(|(i, t)| gae::bi_level_gae(t, i, &p).map(Into::into))
                .collect::<Result<_, _>>()?
        }
        Estimator::TurnGae => batch
            .iter()
            .enumerate()
            .map(|(i, t)| gae::turn_gae(t, i, cfg.gamma_turn, lambda_turn).map(Into::into))
            .collect::<Result<_, _>>()?,
        Estimator::Grpo | Estimator::Brpo | Estimator::Reinforce => {
            let groups: Vec<u64> = batch.iter().map(|t| t.group).collect();
            let one_group = vec![0; batch.len()];
            let keys = match cfg.estimator {
                Estimator::Grpo => Some(groups.as_slice()),
                Estimator::Brpo => Some(one_group.as_slice()),
                _ => None,
            };
            let scores = normalised_scores(batch, keys, cfg.norm_by_std.then_some(cfg.epsilon));
            batch.iter().zip(scores).map(|(t, s)| broadcast(t, s)).collect()
        }
        Estimator::Gigpo => {
            let p = gigpo::Params {
                gamma: cfg.gamma_turn,
                step_weight: cfg.step_weight,
                epsilon: cfg.norm_by_std.then_some(cfg.epsilon),
            };
            gigpo::advantages(batch, &p)?
        }
    };
    if cfg.whiten.unwrap_or(cfg.estimator.uses_critic()) {
        whiten(batch, &mut out, cfg.estimator.whitening_population());
    }
    Ok(out)
}

fn broadcast(t: &Trajectory, score: f64) -> Advantages {
    let advantages: Vec<f64> = t.adv_mask.iter().map(|&m| if m { score } else { 0.0 }).collect();
    Advantages { returns: advantages.clone(), advantages, value_mask: vec![false; t.len()] }
}

impl From<gae::Out> for Advantages {
    fn from(o: gae::Out) -> Self {
        Self { advantages: o.advantages, returns: o.returns, value_mask: o.value_mask }
    }
}

fn whiten(batch: &[Trajectory], out: &mut [Advantages], population: WhiteningPopulation) {
    let masked: Vec<f64> = match population {
        WhiteningPopulation::MaskedTokens => batch
            .iter()
            .zip(out.iter())
            .flat_map(|(t, o)| o.advantages.iter().zip(t.adv_mask).filter(|(_, m)| **m).map(|(a, _)| *a))
            .collect(),
        WhiteningPopulation::TurnEnds => {
            batch.iter().zip(out.iter()).flat_map(|(t, o)| t.turn_ends.iter().map(|&e| o.advantages[e])).collect()
        }
    };
    let m = mean(&masked);
    let var = if masked.len() < 2 {
        0.0
    } else {
        masked.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (masked.len() - 1) as f64
    };
    let scale = 1.0 / (var + 1e-8).sqrt();
    for (t, o) in batch.iter().zip(out.iter_mut()) {
        for (a, &mask) in o.advantages.iter_mut().zip(t.adv_mask) {
            if mask {
                *a = (*a - m) * scale;
            }
        }
    }
}
