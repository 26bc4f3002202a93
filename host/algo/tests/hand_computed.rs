//! Small cases worked by hand, the arithmetic shown beside each expectation.
//!
//! The multi-turn trajectory used throughout (observation tokens between the turns):
//!
//! | token | 0 | 1 | 2 | 3 | 4 | 5 | 6 | 7 |
//! |---|---|---|---|---|---|---|---|---|
//! | role | system | obs | asst | asst (end t0) | obs | obs | asst | asst (end t1) |
//! | mask | 0 | 0 | 1 | 1 | 0 | 0 | 1 | 1 |
//! | reward | 0 | 0 | 0 | 1 | 0 | 0 | 0 | 2 |
//! | value | 9 | 9 | 0.5 | 0.4 | 9 | 9 | 0.3 | 0.2 |
//!
//! Values of 9 at unmasked tokens must never matter.

use vagen_algo::{
    AdvantageConfig, Estimator, FilterConfig, FilterKeep, NormMethod, Trajectory, compute_advantages, filter_groups,
    normalize_scores,
};

const REWARDS: [f64; 8] = [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 2.0];
const VALUES: [f64; 8] = [9.0, 9.0, 0.5, 0.4, 9.0, 9.0, 0.3, 0.2];
const MASK: [bool; 8] = [false, false, true, true, false, false, true, true];
const ENDS: [usize; 2] = [3, 7];

fn traj(rewards: &'static [f64], group: u64) -> Trajectory<'static> {
    Trajectory {
        rewards,
        values: &VALUES,
        loss_mask: &MASK,
        adv_mask: &MASK,
        turn_ends: &ENDS,
        group,
        turn_states: &[],
    }
}

fn close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() < 1e-9, "token {i}: got {g}, want {w}\n got {got:?}\nwant {want:?}");
    }
}

fn cfg(estimator: Estimator) -> AdvantageConfig {
    AdvantageConfig { estimator, whiten: Some(false), ..AdvantageConfig::default() }
}

#[test]
fn masked_gae_skips_observation_tokens_and_does_not_reset_at_turns() {
    let c = AdvantageConfig { gamma: 0.9, lambda: 0.8, ..cfg(Estimator::Gae) };
    let out = &compute_advantages(&c, &[traj(&REWARDS, 0)]).unwrap()[0];
    // γλ = 0.72. Backwards over masked tokens 7, 6, 3, 2:
    // A7 = δ7 = 2 + 0.9·0 − 0.2                      = 1.8
    // A6 = (0 + 0.9·0.2 − 0.3) + 0.72·1.8 = −0.12 + 1.296 = 1.176
    // A3 = (1 + 0.9·0.3 − 0.4) + 0.72·1.176 = 0.87 + 0.84672 = 1.71672
    // A2 = (0 + 0.9·0.4 − 0.5) + 0.72·1.71672 = −0.14 + 1.2360384 = 1.0960384
    close(&out.advantages, &[0.0, 0.0, 1.0960384, 1.71672, 0.0, 0.0, 1.176, 1.8]);
    // R = A + V on masked tokens.
    close(&out.returns, &[0.0, 0.0, 1.5960384, 2.11672, 0.0, 0.0, 1.476, 2.0]);
    assert_eq!(out.value_mask, MASK);
}

#[test]
fn bi_level_gae_runs_turn_level_then_token_level_inside_turns() {
    let c = AdvantageConfig {
        gamma: 1.0,
        lambda: 0.5,
        gamma_turn: 0.9,
        lambda_turn: Some(0.8),
        ..cfg(Estimator::BiLevelGae)
    };
    let out = &compute_advantages(&c, &[traj(&REWARDS, 0)]).unwrap()[0];
    // Turn level (γ_turn 0.9, λ_turn 0.8):
    //   A_t1 = 2 + 0.9·0 − 0.2 = 1.8
    //   A_t0 = (1 + 0.9·V7 − V3) + 0.72·A_t1 = (1 + 0.18 − 0.4) + 1.296 = 2.076
    // Token level (γ_token 1, λ_token 0.5), from each turn end backwards:
    //   A7 = 1.8; A6 = 0 + 1·V7 − V6 + 0.5·A7 = 0.2 − 0.3 + 0.9 = 0.8
    //   A3 = 2.076; A2 = 0 + 1·V3 − V2 + 0.5·A3 = 0.4 − 0.5 + 1.038 = 0.938
    close(&out.advantages, &[0.0, 0.0, 0.938, 2.076, 0.0, 0.0, 0.8, 1.8]);
    close(&out.returns, &[0.0, 0.0, 1.438, 2.476, 0.0, 0.0, 1.1, 2.0]);
}

#[test]
fn bi_level_gae_shares_lambda_across_levels_by_default() {
    let shared = AdvantageConfig { gamma: 1.0, lambda: 0.5, gamma_turn: 0.9, ..cfg(Estimator::BiLevelGae) };
    let explicit = AdvantageConfig { lambda_turn: Some(0.5), lambda_token: Some(0.5), ..shared.clone() };
    let t = [traj(&REWARDS, 0)];
    assert_eq!(compute_advantages(&shared, &t).unwrap(), compute_advantages(&explicit, &t).unwrap());
    // A_t0 with λ_turn 0.5: 0.78 + 0.9·0.5·1.8 = 0.78 + 0.81 = 1.59
    assert!((compute_advantages(&shared, &t).unwrap()[0].advantages[3] - 1.59).abs() < 1e-12);
}

#[test]
fn turn_gae_broadcasts_the_turn_advantage_and_trains_the_critic_at_turn_ends() {
    let c = AdvantageConfig { gamma_turn: 0.9, lambda_turn: Some(0.8), ..cfg(Estimator::TurnGae) };
    let out = &compute_advantages(&c, &[traj(&REWARDS, 0)]).unwrap()[0];
    // A_t0 = 2.076 and A_t1 = 1.8, as in the bi-level case, on every token of the turn.
    close(&out.advantages, &[0.0, 0.0, 2.076, 2.076, 0.0, 0.0, 1.8, 1.8]);
    // Targets A_t + V(e_t): 2.076 + 0.4 = 2.476 and 1.8 + 0.2 = 2.0.
    close(&out.returns, &[0.0, 0.0, 2.476, 2.476, 0.0, 0.0, 2.0, 2.0]);
    assert_eq!(out.value_mask, [false, false, false, true, false, false, false, true]);
}

const R1: [f64; 8] = [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0];
const R3: [f64; 8] = [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 2.0];
const R5: [f64; 8] = [0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 3.0];
const R7: [f64; 8] = [0.0, 0.0, 0.0, 3.0, 0.0, 0.0, 0.0, 4.0];

fn scored_batch() -> Vec<Trajectory<'static>> {
    // Scores 1, 3, 5 in group 0; 7 alone in group 1.
    vec![traj(&R1, 0), traj(&R3, 0), traj(&R5, 0), traj(&R7, 1)]
}

fn first_masked(out: &[vagen_algo::Advantages]) -> Vec<f64> {
    out.iter().map(|o| o.advantages[2]).collect()
}

#[test]
fn grpo_normalises_within_groups_and_leaves_singletons_raw() {
    let out = compute_advantages(&cfg(Estimator::Grpo), &scored_batch()).unwrap();
    // Group 0: mean 3, sample std √((4 + 0 + 4) / 2) = 2 → (−2, 0, 2) / (2 + 1e-6).
    // Group 1 has one member: mean 0, std 1 (verl) → 7 / (1 + 1e-6).
    let d = 2.0 + 1e-6;
    close(&first_masked(&out), &[-2.0 / d, 0.0, 2.0 / d, 7.0 / (1.0 + 1e-6)]);
    // Broadcast over the mask, nothing elsewhere; no critic.
    close(&out[0].advantages, &[0.0, 0.0, -2.0 / d, -2.0 / d, 0.0, 0.0, -2.0 / d, -2.0 / d]);
    assert!(out.iter().all(|o| o.value_mask.iter().all(|m| !m)));
}

#[test]
fn brpo_normalises_over_the_batch_and_reinforce_is_raw() {
    let out = compute_advantages(&cfg(Estimator::Brpo), &scored_batch()).unwrap();
    // Scores 1, 3, 5, 7: mean 4, sample std √((9 + 1 + 1 + 9) / 3) = √(20/3).
    let d = (20.0f64 / 3.0).sqrt() + 1e-6;
    close(&first_masked(&out), &[-3.0 / d, -1.0 / d, 1.0 / d, 3.0 / d]);
    let out = compute_advantages(&cfg(Estimator::Reinforce), &scored_batch()).unwrap();
    close(&first_masked(&out), &[1.0, 3.0, 5.0, 7.0]);
}

#[test]
fn whitening_uses_every_masked_token_of_the_batch() {
    let c = AdvantageConfig { gamma: 0.9, lambda: 0.8, estimator: Estimator::Gae, ..AdvantageConfig::default() };
    let out = &compute_advantages(&c, &[traj(&REWARDS, 0)]).unwrap()[0];
    // Raw masked advantages a = (1.0960384, 1.71672, 1.176, 1.8): mean 1.4471896;
    // whitened values have mean 0 and sample variance 1 (up to ε = 1e-8).
    let masked: Vec<f64> = [2, 3, 6, 7].iter().map(|&p| out.advantages[p]).collect();
    let mean = masked.iter().sum::<f64>() / 4.0;
    let var = masked.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 3.0;
    assert!(mean.abs() < 1e-12 && (var - 1.0).abs() < 1e-6, "mean {mean}, var {var}");
    assert!(out.advantages[2] < 0.0 && out.advantages[7] > 0.0, "order kept: {masked:?}");
    assert_eq!((out.advantages[0], out.advantages[4]), (0.0, 0.0));
    // Returns are not whitened.
    assert!((out.returns[7] - 2.0).abs() < 1e-12);
}

#[test]
fn reward_normalisation_methods() {
    let scores = [1.0, 3.0, 5.0, 10.0];
    let keys = [0, 0, 0, 1];
    // Set 0: mean 3, std 2. Set 1: one member, mean 10, std 0.
    let mean = normalize_scores(&scores, &keys, NormMethod::Mean).unwrap();
    close(&mean, &[-2.0, 0.0, 2.0, 0.0]);
    let z = normalize_scores(&scores, &keys, NormMethod::MeanStd).unwrap();
    close(&z, &[-2.0 / 2.000001, 0.0, 2.0 / 2.000001, 0.0]);
    // [0, 0, 0, 10]: mean 2.5, sample std √((3·6.25 + 56.25)/3) = √25 = 5;
    // z = (−2.5, −2.5, −2.5, 7.5) / 5.000001, all inside [−1, 3]: nothing is cut.
    let wide = normalize_scores(&[0.0, 0.0, 0.0, 10.0], &[0; 4], NormMethod::AsymClip).unwrap();
    let d = 5.000001;
    close(&wide, &[-2.5 / d, -2.5 / d, -2.5 / d, 7.5 / d]);
    let extreme = normalize_scores(
        &[0.0; 99].iter().chain(&[100.0]).copied().collect::<Vec<_>>(),
        &[0; 100],
        NormMethod::AsymClip,
    )
    .unwrap();
    // 99 zeros and 100: mean 1, std √((99·1 + 99²)/99) = 10; the outlier's z = 99/10 = 9.9 → 3.
    assert_eq!(extreme[99], 3.0);
    assert_eq!(normalize_scores(&scores, &keys, NormMethod::Identity).unwrap(), scores);
}

#[test]
fn starpo_s_keeps_the_groups_whose_rewards_vary_most() {
    // Groups: 0 → (1, 1) std 0; 1 → (0, 4) std 2.828; 2 → (1, 3) std 1.414; 3 → (5, 5) std 0.
    let scores = [1.0, 1.0, 0.0, 4.0, 1.0, 3.0, 5.0, 5.0];
    let groups = [0, 0, 1, 1, 2, 2, 3, 3];
    let f = filter_groups(
        &scores,
        &groups,
        &FilterConfig { keep_fraction: 0.5, keep: FilterKeep::Top, ..FilterConfig::default() },
    )
    .unwrap();
    // ⌊0.5 · 4⌋ = 2 groups: 1 and 2.
    assert_eq!(f.keep, [false, false, true, true, true, true, false, false]);
    assert_eq!((f.before.groups, f.after.groups), (4, 2));
    // Before: mean std (0 + 2√2 + √2 + 0)/4 = 3√2/4; mean of means (1 + 2 + 2 + 5)/4 = 2.5.
    assert!((f.before.mean_in_group_std - 3.0 * 2f64.sqrt() / 4.0).abs() < 1e-12);
    assert!((f.before.mean_in_group_mean - 2.5).abs() < 1e-12);
    // After: (2√2 + √2)/2 and (2 + 2)/2.
    assert!((f.after.mean_in_group_std - 1.5 * 2f64.sqrt()).abs() < 1e-12);
    assert!((f.after.mean_in_group_mean - 2.0).abs() < 1e-12);
    // Bottom 25% → one group; ties (0 and 3, both std 0) go to the smaller id.
    let f = filter_groups(
        &scores,
        &groups,
        &FilterConfig { keep_fraction: 0.25, keep: FilterKeep::Bottom, ..FilterConfig::default() },
    )
    .unwrap();
    assert_eq!(f.keep, [true, true, false, false, false, false, false, false]);
    // 1.0 keeps everything.
    let f = filter_groups(
        &scores,
        &groups,
        &FilterConfig { keep_fraction: 1.0, keep: FilterKeep::Top, ..FilterConfig::default() },
    )
    .unwrap();
    assert!(f.keep.iter().all(|&k| k));
}

#[test]
fn gigpo_adds_a_step_term_from_turns_taken_in_the_same_state_of_the_same_group() {
    // Turn rewards: A [0, 4], B [1, 0] (group 0), C [3, 0] (group 1). γ_turn 0.5.
    const A: [f64; 8] = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 4.0];
    const B: [f64; 8] = [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0];
    const C: [f64; 8] = [0.0, 0.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0];
    let batch = [
        Trajectory { turn_states: &[5, 6], ..traj(&A, 0) },
        Trajectory { turn_states: &[5, 7], ..traj(&B, 0) },
        // State 5 again, but in another group: not compared with A and B; visited twice.
        Trajectory { turn_states: &[5, 5], ..traj(&C, 1) },
    ];
    let c = AdvantageConfig { gamma_turn: 0.5, epsilon: 1e-12, ..cfg(Estimator::Gigpo) };
    let out = compute_advantages(&c, &batch).unwrap();
    let h = 0.5f64.sqrt();
    // Episode term: scores 4 and 1 → mean 2.5, std √4.5 → ±1.5/√4.5 = ±√½; C alone: raw 3.
    // Step term: returns A 0 + 0.5·4 = 2 and B 1 + 0.5·0 = 1 in state 5 → ±√½; A's and B's
    // second states are single visits → 0; C's returns 3 and 0 in state 5 → ±1.5/√4.5.
    close(&out[0].advantages, &[0.0, 0.0, 2.0 * h, 2.0 * h, 0.0, 0.0, h, h]);
    close(&out[1].advantages, &[0.0, 0.0, -2.0 * h, -2.0 * h, 0.0, 0.0, -h, -h]);
    close(&out[2].advantages, &[0.0, 0.0, 3.0 + h, 3.0 + h, 0.0, 0.0, 3.0 - h, 3.0 - h]);
    assert_eq!(out[0].returns, out[0].advantages);
    assert!(out[0].value_mask.iter().all(|&m| !m));
    // ω scales the step term only.
    let half = compute_advantages(&AdvantageConfig { step_weight: 0.5, ..c }, &batch).unwrap();
    close(&half[0].advantages, &[0.0, 0.0, 1.5 * h, 1.5 * h, 0.0, 0.0, h, h]);
    // Without a state per turn there is nothing to anchor on: an error, not a silent grpo.
    let e = compute_advantages(&c, &[traj(&A, 0)]).unwrap_err().to_string();
    assert!(e.contains("turn_states (one per turn end, for gigpo) has 0 entries"), "{e}");
}

#[test]
fn malformed_input_is_an_error_that_says_where() {
    let c = cfg(Estimator::BiLevelGae);
    let short = Trajectory { values: &VALUES[..7], ..traj(&REWARDS, 0) };
    let e = compute_advantages(&c, &[short]).unwrap_err().to_string();
    assert!(e.contains("trajectory 0: values has 7 entries, the rewards have 8"), "{e}");
    let off_mask = Trajectory { turn_ends: &[4, 7], ..traj(&REWARDS, 0) };
    let e = compute_advantages(&c, &[off_mask]).unwrap_err().to_string();
    assert!(e.contains("turn end 4 is outside the advantage mask"), "{e}");
    const ON_OBS: [f64; 8] = [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
    let e = compute_advantages(&c, &[traj(&ON_OBS, 0)]).unwrap_err().to_string();
    assert!(e.contains("reward of 1 sits at token 1, outside the advantage mask"), "{e}");
    let early = Trajectory { turn_ends: &[3], ..traj(&R1, 0) };
    let e = compute_advantages(&c, &[early]).unwrap_err().to_string();
    assert!(e.contains("token 6 is in the advantage mask but after the last turn end"), "{e}");
    let bad = AdvantageConfig { gamma: 1.5, ..c };
    assert!(compute_advantages(&bad, &[traj(&REWARDS, 0)]).unwrap_err().to_string().contains("gamma = 1.5"));
    const NAN: [f64; 8] = [0.0, 0.0, 0.0, f64::NAN, 0.0, 0.0, 0.0, 0.0];
    let e = compute_advantages(&cfg(Estimator::Grpo), &[traj(&NAN, 0)]).unwrap_err().to_string();
    assert!(e.contains("reward at token 3 is NaN"), "{e}");
}

#[test]
fn estimator_names_are_stable_kebab_case() {
    for (e, name) in [
        (Estimator::Gae, "gae"),
        (Estimator::BiLevelGae, "bi-level-gae"),
        (Estimator::TurnGae, "turn-gae"),
        (Estimator::Grpo, "grpo"),
        (Estimator::Brpo, "brpo"),
        (Estimator::Reinforce, "reinforce"),
        (Estimator::Gigpo, "gigpo"),
    ] {
        assert_eq!(serde_json::to_string(&e).unwrap(), format!("\"{name}\""));
    }
    let c: AdvantageConfig = serde_json::from_str(r#"{"estimator": "bi-level-gae", "lambda_turn": 0.9}"#).unwrap();
    assert_eq!((c.estimator, c.lambda_turn), (Estimator::BiLevelGae, Some(0.9)));
    assert!(serde_json::from_str::<AdvantageConfig>(r#"{"estimater": "gae"}"#).is_err());
}

#[test]
fn pass_at_k_by_hand() {
    use vagen_algo::{mean_pass_at_k, pass_at_k, reported_ks, wilson_interval};
    assert_eq!((reported_ks(1), reported_ks(4), reported_ks(5)), (vec![1], vec![1, 2, 4], vec![1, 2, 4, 5]));
    // 2 of 5 succeed: pass@1 is the rate; pass@2 = 1 − C(3,2)/C(5,2) = 1 − 3/10.
    assert!((pass_at_k(5, 2, 1).unwrap() - 0.4).abs() < 1e-15);
    assert!((pass_at_k(5, 2, 2).unwrap() - 0.7).abs() < 1e-15);
    assert_eq!(pass_at_k(5, 2, 4).unwrap(), 1.0, "4 draws from 3 failures must include a success");
    assert_eq!(pass_at_k(5, 0, 5).unwrap(), 0.0);
    assert!((mean_pass_at_k(&[(5, 2), (5, 0)], 2).unwrap() - 0.35).abs() < 1e-15);
    assert!(pass_at_k(5, 6, 1).is_err() && pass_at_k(5, 2, 0).is_err() && pass_at_k(5, 2, 6).is_err());
    assert!(mean_pass_at_k(&[], 1).is_err());
    // Wilson, 95 %: 0 of 10 is [0, 0.2775], not the empty interval of mean ± z·se.
    let (lo, hi) = wilson_interval(0, 10, 1.96).unwrap();
    assert!(lo == 0.0 && (hi - 0.277_5).abs() < 1e-4, "{lo} {hi}");
    let (lo, hi) = wilson_interval(5, 10, 1.96).unwrap();
    assert!((lo - 0.236_6).abs() < 1e-4 && (hi - 0.763_4).abs() < 1e-4, "{lo} {hi}");
    assert!(wilson_interval(1, 0, 1.96).is_err() && wilson_interval(1, 2, f64::NAN).is_err());
}
