//! Properties that hold for any batch.

use proptest::prelude::*;
use vagen_algo::{AdvantageConfig, Estimator, Trajectory, compute_advantages};

/// An owned trajectory: prompt, then turns of assistant tokens with observations between.
#[derive(Clone, Debug)]
struct Owned {
    rewards: Vec<f64>,
    values: Vec<f64>,
    mask: Vec<bool>,
    ends: Vec<usize>,
    group: u64,
}

impl Owned {
    fn view(&self) -> Trajectory<'_> {
        Trajectory {
            rewards: &self.rewards,
            values: &self.values,
            loss_mask: &self.mask,
            adv_mask: &self.mask,
            turn_ends: &self.ends,
            group: self.group,
            turn_states: &[],
        }
    }
}

fn trajectory(group: u64) -> impl Strategy<Value = Owned> {
    let turn = (0usize..3, 0usize..4, -5.0f64..5.0, proptest::collection::vec(-2.0f64..2.0, 8));
    (1usize..4, proptest::collection::vec(turn, 1..5), proptest::collection::vec(-3.0f64..3.0, 40)).prop_map(
        move |(prompt, turns, values)| {
            let mut t = Owned { rewards: vec![], values: vec![], mask: vec![], ends: vec![], group };
            let push = |t: &mut Owned, masked: bool, r: f64| {
                t.rewards.push(r);
                t.values.push(values[t.values.len() % values.len()]);
                t.mask.push(masked);
            };
            for _ in 0..prompt {
                push(&mut t, false, 0.0);
            }
            for (obs, body, reward, inner) in turns {
                for _ in 0..obs {
                    push(&mut t, false, 0.0);
                }
                for r in inner.iter().take(body) {
                    push(&mut t, true, *r * 0.1);
                }
                push(&mut t, true, reward);
                t.ends.push(t.rewards.len() - 1);
            }
            t
        },
    )
}

fn batch() -> impl Strategy<Value = Vec<Owned>> {
    (1u64..4, 1u64..4).prop_flat_map(|(groups, members)| {
        let trajs: Vec<_> = (0..groups).flat_map(|g| (0..members).map(move |_| trajectory(g))).collect();
        trajs
    })
}

const ALL: [Estimator; 6] =
    [Estimator::Gae, Estimator::BiLevelGae, Estimator::TurnGae, Estimator::Grpo, Estimator::Brpo, Estimator::Reinforce];

proptest! {
    #[test]
    fn masked_out_positions_are_untouched(b in batch(), whiten in any::<bool>(), g in 0.5f64..=1.0, l in 0.0f64..=1.0) {
        let views: Vec<_> = b.iter().map(Owned::view).collect();
        for estimator in ALL {
            let cfg = AdvantageConfig { estimator, gamma: g, lambda: l, whiten: Some(whiten), ..AdvantageConfig::default() };
            for (t, o) in b.iter().zip(compute_advantages(&cfg, &views).unwrap()) {
                for p in (0..t.mask.len()).filter(|&p| !t.mask[p]) {
                    prop_assert_eq!((o.advantages[p], o.returns[p], o.value_mask[p]), (0.0, 0.0, false));
                }
                prop_assert!(o.advantages.iter().chain(&o.returns).all(|x| x.is_finite()));
            }
        }
    }

    #[test]
    fn bi_level_gae_with_unit_discounts_and_zero_values_is_the_return_to_go(b in batch()) {
        let zeroed: Vec<Owned> = b.into_iter().map(|mut t| {
            t.values.iter_mut().for_each(|v| *v = 0.0);
            // Only turn-end rewards, so each token of turn t sees Σ_{k ≥ t} r(e_k).
            for p in 0..t.rewards.len() { if !t.ends.contains(&p) { t.rewards[p] = 0.0; } }
            t
        }).collect();
        let views: Vec<_> = zeroed.iter().map(Owned::view).collect();
        let cfg = AdvantageConfig { estimator: Estimator::BiLevelGae, gamma: 1.0, lambda: 1.0, gamma_turn: 1.0, whiten: Some(false), ..AdvantageConfig::default() };
        for (t, o) in zeroed.iter().zip(compute_advantages(&cfg, &views).unwrap()) {
            let mut start = 0;
            for (k, &e) in t.ends.iter().enumerate() {
                let to_go: f64 = t.ends[k..].iter().map(|&x| t.rewards[x]).sum();
                for p in (start..=e).filter(|&p| t.mask[p]) {
                    prop_assert!((o.advantages[p] - to_go).abs() < 1e-9, "token {}: {} vs {}", p, o.advantages[p], to_go);
                }
                start = e + 1;
            }
        }
    }

    #[test]
    fn grpo_advantages_have_zero_mean_within_each_group(b in batch()) {
        let views: Vec<_> = b.iter().map(Owned::view).collect();
        let cfg = AdvantageConfig { estimator: Estimator::Grpo, ..AdvantageConfig::default() };
        let out = compute_advantages(&cfg, &views).unwrap();
        for g in 0..4u64 {
            let members: Vec<f64> = b.iter().zip(&out).filter(|(t, _)| t.group == g).map(|(t, o)| o.advantages[t.ends[0]]).collect();
            if members.len() > 1 {
                let mean = members.iter().sum::<f64>() / members.len() as f64;
                prop_assert!(mean.abs() < 1e-9, "group {}: {:?}", g, members);
            }
        }
    }

    #[test]
    fn turn_gae_is_constant_within_a_turn(b in batch(), gt in 0.5f64..=1.0, lt in 0.0f64..=1.0) {
        let views: Vec<_> = b.iter().map(Owned::view).collect();
        let cfg = AdvantageConfig { estimator: Estimator::TurnGae, gamma_turn: gt, lambda_turn: Some(lt), whiten: Some(false), ..AdvantageConfig::default() };
        for (t, o) in b.iter().zip(compute_advantages(&cfg, &views).unwrap()) {
            let mut start = 0;
            for &e in &t.ends {
                for p in (start..=e).filter(|&p| t.mask[p]) {
                    prop_assert_eq!(o.advantages[p], o.advantages[e]);
                }
                start = e + 1;
            }
        }
    }
}

proptest! {
    /// pass@k grows with k and with the successes, is the success rate at k = 1, and is 1
    /// when every k-subset must hold a success.
    #[test]
    fn pass_at_k_is_monotone_and_exact_at_its_ends(n in 1usize..200, c_frac in 0.0f64..=1.0, k_frac in 0.0f64..=1.0) {
        use vagen_algo::pass_at_k;
        let c = ((n as f64) * c_frac).round() as usize;
        let k = 1 + ((n - 1) as f64 * k_frac).round() as usize;
        let p = pass_at_k(n, c, k).unwrap();
        prop_assert!((0.0..=1.0).contains(&p));
        prop_assert!((pass_at_k(n, c, 1).unwrap() - c as f64 / n as f64).abs() < 1e-12);
        if k < n {
            prop_assert!(pass_at_k(n, c, k + 1).unwrap() >= p - 1e-12);
        }
        if c < n {
            prop_assert!(pass_at_k(n, c + 1, k).unwrap() >= p - 1e-12);
        }
        if n - c < k {
            prop_assert_eq!(p, 1.0);
        }
    }
}
