//! Critic-based estimators: masked token GAE, bi-level GAE and turn-level GAE.

use crate::{AlgoError, Trajectory};

/// Per-token advantages and returns (0 outside the mask) and which tokens train the critic.
pub(crate) struct Out {
    pub advantages: Vec<f64>,
    pub returns: Vec<f64>,
    pub value_mask: Vec<bool>,
}

impl Out {
    fn zeros(n: usize) -> Self {
        Self { advantages: vec![0.0; n], returns: vec![0.0; n], value_mask: vec![false; n] }
    }
}

/// Token GAE over advantage-mask positions only: observation tokens are skipped, turn
/// boundaries do not reset it, and the value after the last masked token is 0.
pub(crate) fn masked_gae(t: &Trajectory, gamma: f64, lambda: f64) -> Out {
    let mut out = Out::zeros(t.len());
    let (mut next_value, mut running) = (0.0, 0.0);
    for p in (0..t.len()).rev().filter(|&p| t.adv_mask[p]) {
        let delta = t.rewards[p] + gamma * next_value - t.values[p];
        running = delta + gamma * lambda * running;
        out.advantages[p] = running;
        out.returns[p] = running + t.values[p];
        out.value_mask[p] = true;
        next_value = t.values[p];
    }
    out
}

/// Turn-level GAE over turn ends, backwards: δ_t = r(e_t) + γ_turn·V(e_{t+1}) − V(e_t) with
/// V past the last turn 0, A_t = δ_t + γ_turn·λ_turn·A_{t+1}.
fn turn_level(t: &Trajectory, gamma_turn: f64, lambda_turn: f64) -> Vec<f64> {
    let ends = t.turn_ends;
    let mut a = vec![0.0; ends.len()];
    let mut next = 0.0;
    for k in (0..ends.len()).rev() {
        let next_value = ends.get(k + 1).map_or(0.0, |&e| t.values[e]);
        let delta = t.rewards[ends[k]] + gamma_turn * next_value - t.values[ends[k]];
        next = delta + gamma_turn * lambda_turn * next;
        a[k] = next;
    }
    a
}

pub(crate) struct BiLevel {
    pub gamma_turn: f64,
    pub lambda_turn: f64,
    pub gamma_token: f64,
    pub lambda_token: f64,
}

/// VAGEN's bi-level GAE: the turn-level advantage sits on each turn's last token; inside the
/// turn, token GAE runs backwards from it, A_i = r_i + γ_token·V(next) − V_i +
/// γ_token·λ_token·A(next), never crossing into another turn. Returns = A + V.
pub(crate) fn bi_level_gae(t: &Trajectory, i: usize, p: &BiLevel) -> Result<Out, AlgoError> {
    let turns = t.turns(i)?;
    let turn_adv = turn_level(t, p.gamma_turn, p.lambda_turn);
    let mut out = Out::zeros(t.len());
    for (tokens, &a_end) in turns.iter().zip(&turn_adv) {
        let (mut next_adv, mut next_value) = (a_end, 0.0);
        for (k, &pos) in tokens.iter().enumerate().rev() {
            let a = if k + 1 == tokens.len() {
                a_end
            } else {
                t.rewards[pos] + p.gamma_token * next_value - t.values[pos] + p.gamma_token * p.lambda_token * next_adv
            };
            out.advantages[pos] = a;
            out.returns[pos] = a + t.values[pos];
            out.value_mask[pos] = true;
            (next_adv, next_value) = (a, t.values[pos]);
        }
    }
    Ok(out)
}

/// Turn-level GAE broadcast: every token of turn t gets A_t; the critic learns only at
/// turn ends, towards A_t + V(e_t).
pub(crate) fn turn_gae(t: &Trajectory, i: usize, gamma_turn: f64, lambda_turn: f64) -> Result<Out, AlgoError> {
    let turns = t.turns(i)?;
    let turn_adv = turn_level(t, gamma_turn, lambda_turn);
    let mut out = Out::zeros(t.len());
    for ((tokens, &a), &end) in turns.iter().zip(&turn_adv).zip(t.turn_ends) {
        let ret = a + t.values[end];
        for &pos in tokens {
            out.advantages[pos] = a;
            out.returns[pos] = ret;
        }
        out.value_mask[end] = true;
    }
    Ok(out)
}
