//! Phase 3, `assign_credit`: rewards → advantages and returns, then StarPO-S filtering by
//! group, both judged per episode. Adds the batch's [`CreditColumns`].

use crate::config::TrainConfig;
use crate::step_batch::{CreditColumns, StepBatch};
use anyhow::Result;
use vagen_algo::{Advantages, Trajectory as AlgoTrajectory, compute_advantages, filter_groups};

/// Fills `batch.credit`: advantages, returns and value mask per token, and which sequences
/// the update keeps (StarPO-S by group, then, with `drop_zero_advantage`, not those with
/// nothing to learn). Needs the batch's scores when the estimator uses a critic.
pub fn assign_credit(cfg: &TrainConfig, batch: &mut StepBatch) -> Result<()> {
    if cfg.algorithm.advantage.estimator.uses_critic() {
        batch.scores()?;
    }
    let mut credit = if cfg.rollout.sequences.per_turn { per_episode(cfg, batch)? } else { per_sequence(cfg, batch)? };
    if cfg.algorithm.filter.drop_zero_advantage {
        for k in 0..batch.len() {
            if credit.keep[k] && credit.advantages[batch.tokens_of(k)].iter().all(|&a| a == 0.0) {
                credit.keep[k] = false;
                credit.zero_dropped += 1;
            }
        }
    }
    batch.credit = Some(credit);
    Ok(())
}

/// One sequence per trajectory: the estimator reads each sequence's columns as they are.
fn per_sequence(cfg: &TrainConfig, batch: &StepBatch) -> Result<CreditColumns> {
    let longest = (0..batch.len()).map(|k| batch.tokens_of(k).len()).max().unwrap_or(0);
    let zeros = vec![0.0; longest];
    let algo: Vec<AlgoTrajectory> = (0..batch.len()).map(|k| batch.algo_trajectory(k, &zeros)).collect();
    let advantages = compute_advantages(&cfg.algorithm.advantage, &algo)?;
    let mut credit = empty(batch);
    for (k, a) in advantages.iter().enumerate() {
        place(&mut credit, batch.tokens_of(k).start, a);
    }
    let filtered = filter(cfg, &algo)?;
    Ok(CreditColumns { keep: filtered.keep, before: filtered.before, after: filtered.after, ..credit })
}

/// One sequence per turn: the estimator needs the whole episode, so each episode is one
/// trajectory with a position per turn (its reward there, read from the turn columns), and
/// each turn's advantage is then spread over its own sequence's answer tokens.
fn per_episode(cfg: &TrainConfig, batch: &StepBatch) -> Result<CreditColumns> {
    let episodes = batch.episodes();
    let longest = episodes.iter().map(|(_, seqs)| seqs.len()).max().unwrap_or(0);
    let (zeros, trues, ends) = (vec![0.0; longest], vec![true; longest], (0..longest).collect::<Vec<usize>>());
    let algo: Vec<AlgoTrajectory> = episodes
        .iter()
        .map(|(_, seqs)| {
            let turns = batch.turns_of(seqs.start).start..batch.turns_of(seqs.end - 1).end;
            let n = turns.len();
            AlgoTrajectory {
                rewards: &batch.turns.reward[turns.clone()],
                values: &zeros[..n],
                loss_mask: &trues[..n],
                adv_mask: &trues[..n],
                turn_ends: &ends[..n],
                group: batch.seqs.group[seqs.start],
                turn_states: &batch.turns.state[turns],
            }
        })
        .collect();
    let advantages = compute_advantages(&cfg.algorithm.advantage, &algo)?;
    let mut credit = empty(batch);
    for ((_, seqs), a) in episodes.iter().zip(&advantages) {
        for (turn, k) in seqs.clone().enumerate() {
            let v = a.advantages[turn] as f32;
            for i in batch.tokens_of(k) {
                let x = if batch.tokens.adv_mask[i] { v } else { 0.0 };
                (credit.advantages[i], credit.returns[i]) = (x, x);
            }
        }
    }
    let filtered = filter(cfg, &algo)?;
    let mut keep = vec![false; batch.len()];
    for ((_, seqs), &k) in episodes.iter().zip(&filtered.keep) {
        keep[seqs.clone()].iter_mut().for_each(|m| *m = k);
    }
    Ok(CreditColumns { keep, before: filtered.before, after: filtered.after, ..credit })
}

/// Zeroed token columns for the batch.
fn empty(batch: &StepBatch) -> CreditColumns {
    let n = batch.tokens.ids.len();
    CreditColumns {
        advantages: vec![0.0; n],
        returns: vec![0.0; n],
        value_mask: vec![false; n],
        keep: vec![true; batch.len()],
        ..Default::default()
    }
}

/// One sequence's estimator output into the token columns from `start`.
fn place(credit: &mut CreditColumns, start: usize, a: &Advantages) {
    for (j, ((&adv, &ret), &vm)) in a.advantages.iter().zip(&a.returns).zip(&a.value_mask).enumerate() {
        credit.advantages[start + j] = adv as f32;
        credit.returns[start + j] = ret as f32;
        credit.value_mask[start + j] = vm;
    }
}

/// StarPO-S: keep the groups whose rewards vary most.
fn filter(cfg: &TrainConfig, algo: &[AlgoTrajectory]) -> Result<vagen_algo::Filtered> {
    let scores: Vec<f64> = algo.iter().map(|t| t.score()).collect();
    let groups: Vec<u64> = algo.iter().map(|t| t.group).collect();
    Ok(filter_groups(&scores, &groups, &cfg.algorithm.filter)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step_batch::Source;
    use crate::step_batch::tests::{sequence, turn};
    use vagen_rollout::AnswerOrigin;

    fn run(estimator: &str, per_turn: bool) -> StepBatch {
        let text = format!(
            "[env]\nplugin = \"x.wasm\"\n[rollout]\nper_turn = {per_turn}\n[algorithm.advantage]\nestimator = \"{estimator}\"\nepsilon = 1e-12\n"
        );
        let cfg: TrainConfig = toml::from_str(&text).unwrap();
        // A reaches the goal on its second turn; B falls into a hole from the same start.
        let m = AnswerOrigin::Model;
        let (a0, a1, b0) = (turn("start", 0.0, m), turn("next", 10.0, m), turn("start", 0.0, m));
        let mut batch = StepBatch::new();
        let src = |episode, turns| Source { episode, group: 0, seed: 0, turns };
        if per_turn {
            batch.push(sequence(&[&a0], 2, 2), src(0, vec![(0, &a0)]));
            batch.push(sequence(&[&a1], 2, 2), src(0, vec![(1, &a1)]));
            batch.push(sequence(&[&b0], 2, 2), src(1, vec![(0, &b0)]));
        } else {
            batch.push(sequence(&[&a0, &a1], 2, 2), src(0, vec![(0, &a0), (1, &a1)]));
            batch.push(sequence(&[&b0], 2, 2), src(1, vec![(0, &b0)]));
        }
        assign_credit(&cfg, &mut batch).unwrap();
        batch
    }

    /// Sequence k's advantages.
    fn adv(batch: &StepBatch, k: usize) -> &[f32] {
        &batch.credit.as_ref().unwrap().advantages[batch.tokens_of(k)]
    }

    fn close(got: &[f32], want: f32) {
        assert_eq!(&got[..2], &[0.0, 0.0], "prompt tokens get none");
        assert!(got[2..].iter().all(|a| (a - want).abs() < 1e-5), "{got:?} vs {want}");
    }

    #[test]
    fn per_turn_sequences_get_credit_judged_per_episode() {
        let h = 0.5f32.sqrt();
        // grpo over the two episodes (scores 10 and 0), not over the three sequences: each
        // of A's turns gets +√½ and B's −√½, on the answer tokens only.
        let batch = run("grpo", true);
        close(adv(&batch, 0), h);
        close(adv(&batch, 1), h);
        close(adv(&batch, 2), -h);
        assert_eq!(batch.credit.as_ref().unwrap().keep, vec![true; 3]);
        // gigpo: both first turns acted in "start" (returns 0.95·10 and 0): ±√½ more there;
        // A's second state was visited once: no step term.
        let batch = run("gigpo", true);
        close(adv(&batch, 0), 2.0 * h);
        close(adv(&batch, 1), h);
        close(adv(&batch, 2), -2.0 * h);
    }

    #[test]
    fn whole_sequences_read_their_own_columns() {
        let h = 0.5f32.sqrt();
        let batch = run("grpo", false);
        let a = adv(&batch, 0);
        assert!(a.iter().enumerate().all(|(i, &x)| if i % 4 < 2 { x == 0.0 } else { (x - h).abs() < 1e-5 }), "{a:?}");
        close(adv(&batch, 1), -h);
        let credit = batch.credit.as_ref().unwrap();
        assert_eq!(credit.returns[batch.tokens_of(1)], credit.advantages[batch.tokens_of(1)], "critic-free");
        assert!(credit.value_mask.iter().all(|&m| !m));
    }

    #[test]
    fn a_critic_estimator_without_scores_names_the_missing_phase() {
        let cfg: TrainConfig =
            toml::from_str("[env]\nplugin = \"x.wasm\"\n[algorithm.advantage]\nestimator = \"gae\"\n").unwrap();
        let t = turn("s", 1.0, AnswerOrigin::Model);
        let mut batch = StepBatch::new();
        batch.push(sequence(&[&t], 1, 1), Source { episode: 0, group: 0, seed: 0, turns: vec![(0, &t)] });
        let e = assign_credit(&cfg, &mut batch).unwrap_err().to_string();
        assert!(e.contains("`score` runs before"), "{e}");
    }
}
