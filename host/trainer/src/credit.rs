//! Credit assignment for a step's rows: the estimator's advantages placed on each training
//! sequence's tokens, and StarPO-S filtering by group, both judged per episode.

use crate::batch::Row;
use crate::config::TrainConfig;
use anyhow::Result;
use vagen_algo::{GroupStats, Trajectory as AlgoTrajectory, compute_advantages, filter_groups};
use vagen_rollout::{TrainingSequence, Trajectory};

/// A training sequence and where it came from.
pub(crate) struct Laid {
    pub traj: usize,
    /// The turn, when sequences are per turn.
    pub turn: Option<usize>,
    pub seq: TrainingSequence,
}

pub(crate) struct Credit {
    /// Per row: whether filtering kept it.
    pub keep: Vec<bool>,
    pub before: GroupStats,
    pub after: GroupStats,
    /// Rows the group filter kept but `drop_zero_advantage` left out.
    pub zero_dropped: usize,
}

/// Fills `rows[k].advantages / returns / value_mask` for `seqs[k]` and decides which rows
/// the update keeps: StarPO-S by group, then (`drop_zero_advantage`) rows with nothing to learn.
pub(crate) fn assign(cfg: &TrainConfig, trajs: &[Trajectory], seqs: &[Laid], rows: &mut [Row]) -> Result<Credit> {
    let mut credit = advantages_and_groups(cfg, trajs, seqs, rows)?;
    if cfg.algorithm.filter.drop_zero_advantage {
        for (keep, row) in credit.keep.iter_mut().zip(rows.iter()) {
            if *keep && row.advantages.iter().all(|&a| a == 0.0) {
                *keep = false;
                credit.zero_dropped += 1;
            }
        }
    }
    Ok(credit)
}

fn advantages_and_groups(cfg: &TrainConfig, trajs: &[Trajectory], seqs: &[Laid], rows: &mut [Row]) -> Result<Credit> {
    let est = &cfg.algorithm.advantage;
    let states = |t: &Trajectory, n: usize| -> Vec<u64> { t.turns.iter().take(n).map(|r| r.state_key()).collect() };
    if cfg.rollout.per_turn {
        // Per-turn sequences hold one turn each; the estimator needs the whole episode. So
        // each episode becomes one "sequence" with a position per turn (its reward there),
        // and each turn's advantage is then spread over its own sequence's tokens.
        let mut episodes: Vec<(usize, Vec<usize>)> = Vec::new();
        for (k, l) in seqs.iter().enumerate() {
            match episodes.last_mut() {
                Some((t, members)) if *t == l.traj => members.push(k),
                _ => episodes.push((l.traj, vec![k])),
            }
        }
        struct PerTurn {
            rewards: Vec<f64>,
            zeros: Vec<f64>,
            mask: Vec<bool>,
            ends: Vec<usize>,
            states: Vec<u64>,
            group: u64,
        }
        let owned: Vec<PerTurn> = episodes
            .iter()
            .map(|(t, members)| {
                let n = members.len();
                PerTurn {
                    rewards: trajs[*t].turns.iter().take(n).map(|r| r.reward).collect(),
                    zeros: vec![0.0; n],
                    mask: vec![true; n],
                    ends: (0..n).collect(),
                    states: states(&trajs[*t], n),
                    group: trajs[*t].group as u64,
                }
            })
            .collect();
        let algo: Vec<AlgoTrajectory> = owned
            .iter()
            .map(|o| AlgoTrajectory {
                rewards: &o.rewards,
                values: &o.zeros,
                loss_mask: &o.mask,
                adv_mask: &o.mask,
                turn_ends: &o.ends,
                group: o.group,
                turn_states: &o.states,
            })
            .collect();
        let advantages = compute_advantages(est, &algo)?;
        for ((_, members), a) in episodes.iter().zip(&advantages) {
            for (turn, &k) in members.iter().enumerate() {
                let v = a.advantages[turn] as f32;
                let row = &mut rows[k];
                row.advantages = seqs[k].seq.advantage_mask.iter().map(|&m| if m { v } else { 0.0 }).collect();
                row.returns = row.advantages.clone();
                row.value_mask = vec![false; row.ids.len()];
            }
        }
        let filtered = filter(cfg, &algo)?;
        let mut keep = vec![false; rows.len()];
        for ((_, members), &k) in episodes.iter().zip(&filtered.keep) {
            members.iter().for_each(|&m| keep[m] = k);
        }
        return Ok(Credit { keep, before: filtered.before, after: filtered.after, zero_dropped: 0 });
    }

    let values: Vec<Vec<f64>> = rows.iter().map(|r| r.old_values.iter().map(|&v| v as f64).collect()).collect();
    let rewards: Vec<Vec<f64>> = seqs.iter().map(|l| l.seq.rewards.iter().map(|&v| v as f64).collect()).collect();
    let turn_states: Vec<Vec<u64>> = seqs.iter().map(|l| states(&trajs[l.traj], l.seq.turn_ends.len())).collect();
    let algo: Vec<AlgoTrajectory> = seqs
        .iter()
        .enumerate()
        .map(|(k, l)| AlgoTrajectory {
            rewards: &rewards[k],
            values: &values[k],
            loss_mask: &l.seq.loss_mask,
            adv_mask: &l.seq.advantage_mask,
            turn_ends: &l.seq.turn_ends,
            group: trajs[l.traj].group as u64,
            turn_states: &turn_states[k],
        })
        .collect();
    let advantages = compute_advantages(est, &algo)?;
    for (row, a) in rows.iter_mut().zip(&advantages) {
        row.advantages = a.advantages.iter().map(|&x| x as f32).collect();
        row.returns = a.returns.iter().map(|&x| x as f32).collect();
        row.value_mask = a.value_mask.clone();
    }
    let filtered = filter(cfg, &algo)?;
    Ok(Credit { keep: filtered.keep, before: filtered.before, after: filtered.after, zero_dropped: 0 })
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
    use vagen_rollout::{Parsed, TurnRecord};

    fn turn(user: &str, reward: f64) -> TurnRecord {
        TurnRecord {
            user: user.into(),
            observation: user.into(),
            images: vec![],
            response: String::new(),
            token_ids: None,
            logprobs: None,
            parsed: Parsed::default(),
            answer: String::new(),
            env_reward: reward,
            format_reward: 0.0,
            reward,
            done: false,
            success: false,
            valid_actions: 1,
            effective_actions: 1,
            metrics: vec![],
        }
    }

    fn episode(group: usize, turns: Vec<TurnRecord>) -> Trajectory {
        Trajectory {
            env: "test".into(),
            group,
            member: 0,
            seed: group as u64,
            system: String::new(),
            turns,
            done: true,
            success: false,
            failure: None,
            truncated: None,
            failed_answer: None,
        }
    }

    /// A per-turn sequence: two prompt tokens, two answer tokens.
    fn laid(traj: usize, turn: usize) -> Laid {
        let mask = vec![false, false, true, true];
        let seq = TrainingSequence {
            ids: vec![1, 2, 3, 4],
            loss_mask: mask.clone(),
            advantage_mask: mask,
            rewards: vec![0.0; 4],
            turn_ends: vec![3],
            ..Default::default()
        };
        Laid { traj, turn: Some(turn), seq }
    }

    fn run(estimator: &str) -> (Vec<Vec<f32>>, Credit) {
        let text = format!(
            "[env]\nplugin = \"x.wasm\"\n[rollout]\nper_turn = true\n[algorithm.advantage]\nestimator = \"{estimator}\"\nepsilon = 1e-12\n"
        );
        let cfg: TrainConfig = toml::from_str(&text).unwrap();
        // A reaches the goal on its second turn; B falls into a hole from the same start.
        let trajs =
            vec![episode(0, vec![turn("start", 0.0), turn("next", 10.0)]), episode(0, vec![turn("start", 0.0)])];
        let seqs = vec![laid(0, 0), laid(0, 1), laid(1, 0)];
        let mut rows: Vec<Row> = seqs.iter().map(|l| Row { ids: l.seq.ids.clone(), ..Row::default() }).collect();
        let credit = assign(&cfg, &trajs, &seqs, &mut rows).unwrap();
        (rows.into_iter().map(|r| r.advantages).collect(), credit)
    }

    #[test]
    fn per_turn_sequences_get_credit_judged_per_episode() {
        let h = 0.5f32.sqrt();
        // grpo over the two episodes (scores 10 and 0), not over the three sequences: each
        // of A's turns gets +√½ and B's −√½, on the answer tokens only.
        let (adv, credit) = run("grpo");
        let close = |got: &[f32], want: f32| {
            assert_eq!(&got[..2], &[0.0, 0.0]);
            assert!(got[2..].iter().all(|a| (a - want).abs() < 1e-5), "{got:?} vs {want}");
        };
        close(&adv[0], h);
        close(&adv[1], h);
        close(&adv[2], -h);
        assert_eq!(credit.keep, vec![true; 3]);
        // gigpo: both first turns acted in "start" (returns 0.95·10 and 0): ±√½ more there;
        // A's second state was visited once: no step term.
        let (adv, _) = run("gigpo");
        close(&adv[0], 2.0 * h);
        close(&adv[1], h);
        close(&adv[2], -2.0 * h);
    }
}
