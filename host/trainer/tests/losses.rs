//! The losses on small tensors whose outcomes are worked out by hand, and the off-policy
//! corrections against a Python reference written from their papers.

mod common;

use tch::{Kind, Tensor};
use vagen_trainer::{
    Behaviour, KlKind, KlPenalty, LossAgg, OffPolicy, PolicyLossConfig, PolicyLossInput, ValueLossConfig, aggregate,
    explained_variance, policy_loss, value_loss,
};

fn t(rows: &[&[f64]]) -> Tensor {
    let cols = rows[0].len() as i64;
    let flat: Vec<f64> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    Tensor::from_slice(&flat).view([rows.len() as i64, cols]).to_kind(Kind::Double)
}

fn value(x: &Tensor) -> f64 {
    x.double_value(&[])
}

fn near(got: f64, want: f64) {
    assert!((got - want).abs() < 1e-9, "got {got}, want {want}");
}

/// Ratios ρ = (1.5, 1.5, 0.5, 0.5, 1.1, 5.0) against advantages (1, −1, 1, −1, 2, −1),
/// ε_low 0.2, ε_high 0.28, dual clip c = 3. Per token max(−Aρ, −A·clip(ρ)), then min(·, −A·c)
/// where A < 0:
///   0: max(−1.5, −1.28) = −1.28   cut at 1 + ε_high (A > 0)
///   1: max( 1.5,  1.28) =  1.5    (ρ high but A < 0: the unclipped term is taken)
///   2: max(−0.5, −0.8 ) = −0.5
///   3: max( 0.5,  0.8 ) =  0.8    cut at 1 − ε_low (A < 0)
///   4: max(−2.2, −2.2 ) = −2.2
///   5: max( 5.0,  1.28) =  5.0 → min(5.0, 3) = 3   the dual clip
fn six_tokens() -> (Tensor, Tensor, Tensor) {
    let ratios = [1.5f64, 1.5, 0.5, 0.5, 1.1, 5.0];
    let log_probs = t(&[&ratios.map(f64::ln)]);
    let old = t(&[&[0.0; 6]]);
    let adv = t(&[&[1.0, -1.0, 1.0, -1.0, 2.0, -1.0]]);
    (log_probs, old, adv)
}

fn input<'a>(lp: &'a Tensor, old: &'a Tensor, adv: &'a Tensor, mask: &'a Tensor) -> PolicyLossInput<'a> {
    PolicyLossInput {
        log_probs: lp,
        old_log_probs: old,
        advantages: adv,
        mask,
        entropy: None,
        ref_log_probs: None,
        behaviour: None,
    }
}

#[test]
fn decoupled_and_dual_clipping_give_the_expected_values_and_fractions() {
    let (lp, old, adv) = six_tokens();
    let mask = t(&[&[1.0; 6]]);
    let cfg = PolicyLossConfig { entropy_coef: 0.0, ..PolicyLossConfig::default() };
    let out = policy_loss(&cfg, &input(&lp, &old, &adv, &mask));
    // (−1.28 + 1.5 − 0.5 + 0.8 − 2.2 + 3.0) / 6 = 1.32 / 6 = 0.22
    near(out.pg_loss, 0.22);
    near(value(&out.loss), 0.22);
    near(out.clip_frac_high, 1.0 / 6.0);
    near(out.clip_frac_low, 1.0 / 6.0);
    near(out.dual_clip_frac, 1.0 / 6.0);
    // approx KL = mean(log π_old − log π) = −mean(ln ρ).
    let mean_ln: f64 = [1.5f64, 1.5, 0.5, 0.5, 1.1, 5.0].iter().map(|r| r.ln()).sum::<f64>() / 6.0;
    near(out.approx_kl, -mean_ln);

    // Without the dual clip token 5 counts 5.0: (1.32 − 3 + 5) / 6.
    let no_dual = PolicyLossConfig { dual_clip: None, ..cfg.clone() };
    near(policy_loss(&no_dual, &input(&lp, &old, &adv, &mask)).pg_loss, 3.32 / 6.0);

    // Masking token 5 out: (−1.28 + 1.5 − 0.5 + 0.8 − 2.2) / 5 = −1.68 / 5.
    let mask5 = t(&[&[1.0, 1.0, 1.0, 1.0, 1.0, 0.0]]);
    let out = policy_loss(&cfg, &input(&lp, &old, &adv, &mask5));
    near(out.pg_loss, -1.68 / 5.0);
    near(out.dual_clip_frac, 0.0);
    near(out.clip_frac_high, 1.0 / 5.0);
}

#[test]
fn gradients_flow_only_through_unmasked_tokens() {
    // ρ = 1 everywhere (nothing clipped), so every unmasked token has gradient −A / n.
    let old = t(&[&[-1.0, -2.0, -0.5, -1.5], &[-0.7, -0.2, -3.0, -1.0]]);
    let lp = old.copy().set_requires_grad(true);
    let adv = t(&[&[1.0, -2.0, 0.5, 3.0], &[-1.0, 2.0, 1.0, -0.5]]);
    let mask = t(&[&[0.0, 1.0, 1.0, 0.0], &[1.0, 1.0, 0.0, 0.0]]);
    let reference = t(&[&[-1.1, -2.1, -0.4, -1.2], &[-0.5, -0.3, -2.0, -1.1]]);
    let entropy = (-&lp).exp() * 0.1;
    let cfg = PolicyLossConfig { kl: Some(KlPenalty { kind: KlKind::K3, coef: 0.1 }), ..PolicyLossConfig::default() };
    let x =
        PolicyLossInput { entropy: Some(&entropy), ref_log_probs: Some(&reference), ..input(&lp, &old, &adv, &mask) };
    policy_loss(&cfg, &x).loss.backward();
    let grad = lp.grad();
    for (b, row) in [[0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]].iter().enumerate() {
        for (i, &m) in row.iter().enumerate() {
            let g = grad.double_value(&[b as i64, i as i64]);
            if m == 0.0 {
                assert_eq!(g, 0.0, "masked-out token ({b}, {i}) got gradient {g}");
            } else {
                assert!(g.abs() > 1e-6, "token ({b}, {i}) got no gradient");
            }
        }
    }
    // The policy-gradient part alone: −A / 4 on each of the 4 unmasked tokens.
    let lp2 = old.copy().set_requires_grad(true);
    let plain = PolicyLossConfig { entropy_coef: 0.0, ..PolicyLossConfig::default() };
    policy_loss(&plain, &input(&lp2, &old, &adv, &mask)).loss.backward();
    near(lp2.grad().double_value(&[0, 1]), 2.0 / 4.0);
    near(lp2.grad().double_value(&[1, 0]), 1.0 / 4.0);
}

#[test]
fn aggregation_modes() {
    // Two answers of 3 and 1 tokens: losses (1, 2, 3) and (4).
    let loss = t(&[&[1.0, 2.0, 3.0, 9.0], &[4.0, 9.0, 9.0, 9.0]]);
    let mask = t(&[&[1.0, 1.0, 1.0, 0.0], &[1.0, 0.0, 0.0, 0.0]]);
    // token-mean: (1 + 2 + 3 + 4) / 4; seq-mean-token-sum: (6 + 4) / 2; seq-mean-token-mean: (2 + 4) / 2.
    near(value(&aggregate(&loss, &mask, LossAgg::TokenMean)), 2.5);
    near(value(&aggregate(&loss, &mask, LossAgg::SeqMeanTokenSum)), 5.0);
    near(value(&aggregate(&loss, &mask, LossAgg::SeqMeanTokenMean)), 3.0);
    // A sequence with no tokens counts 0, not NaN.
    let empty = t(&[&[1.0, 1.0, 1.0, 0.0], &[0.0, 0.0, 0.0, 0.0]]);
    near(value(&aggregate(&loss, &empty, LossAgg::SeqMeanTokenMean)), 1.0);
}

#[test]
fn kl_penalties() {
    // log π = ln 0.5, log π_ref = ln 0.25: d = ln 2.
    let lp = t(&[&[0.5f64.ln()]]);
    let reference = t(&[&[0.25f64.ln()]]);
    let mask = t(&[&[1.0]]);
    let adv = t(&[&[0.0]]);
    let d = 2f64.ln();
    for (kind, want) in [
        (KlKind::K1, d),
        // exp(−d) − (−d) − 1 = 0.5 + ln 2 − 1
        (KlKind::K3, 0.5 + d - 1.0),
        (KlKind::Mse, 0.5 * d * d),
    ] {
        let cfg = PolicyLossConfig {
            entropy_coef: 0.0,
            kl: Some(KlPenalty { kind, coef: 2.0 }),
            ..PolicyLossConfig::default()
        };
        let x = PolicyLossInput { ref_log_probs: Some(&reference), ..input(&lp, &lp, &adv, &mask) };
        let out = policy_loss(&cfg, &x);
        near(out.kl, want);
        near(value(&out.loss), 2.0 * want);
    }
    let names: Vec<String> =
        [KlKind::K1, KlKind::K3, KlKind::Mse].iter().map(|k| serde_json::to_string(k).unwrap()).collect();
    assert_eq!(names, ["\"k1\"", "\"k3\"", "\"mse\""]);
    assert_eq!(serde_json::from_str::<KlKind>("\"low-var-kl\"").unwrap(), KlKind::K3);
}

#[test]
fn the_entropy_bonus_lowers_the_loss() {
    let (lp, old, adv) = six_tokens();
    let mask = t(&[&[1.0; 6]]);
    let h = t(&[&[2.0; 6]]);
    let x = PolicyLossInput { entropy: Some(&h), ..input(&lp, &old, &adv, &mask) };
    let out = policy_loss(&PolicyLossConfig::default(), &x);
    near(out.entropy, 2.0);
    // 0.22 − 0.001 · 2
    near(value(&out.loss), 0.22 - 0.002);
}

#[test]
fn the_value_loss_is_clipped_around_the_old_values() {
    let cfg = ValueLossConfig::default();
    // Token 0: v = 1, v_old = 0, R = 0 → clip(v) = 0.5; max(1², 0.5²) = 1.
    // Token 1: v = 2, v_old = 1.9, R = 3 → clip(v) = 2; max(1, 1) = 1.
    let out = value_loss(&cfg, &t(&[&[1.0, 2.0]]), &t(&[&[0.0, 1.9]]), &t(&[&[0.0, 3.0]]), &t(&[&[1.0, 1.0]]));
    near(out.value_loss, 0.5 * 1.0);
    near(out.clip_frac, 0.0);
    // v = 0.2, v_old = 1, R = 0 → clip(v) = 0.5; max(0.04, 0.25) = 0.25, the clipped term.
    let out = value_loss(&cfg, &t(&[&[0.2, 7.0]]), &t(&[&[1.0, 0.0]]), &t(&[&[0.0, 0.0]]), &t(&[&[1.0, 0.0]]));
    near(out.value_loss, 0.5 * 0.25);
    near(out.clip_frac, 1.0);
}

#[test]
fn explained_variance_of_perfect_and_constant_critics() {
    let r = [1.0, 2.0, 3.0];
    near(explained_variance(&r, &r), 1.0);
    near(explained_variance(&[2.0, 2.0, 2.0], &r), 0.0);
    // Off by a constant: the residual does not vary, so all of R's variance is explained.
    near(explained_variance(&[0.0, 1.0, 2.0], &r), 1.0);
    assert!(explained_variance(&[0.0; 3], &[1.0; 3]).is_nan(), "returns that do not vary");
}

#[test]
fn off_policy_corrections_equal_their_papers_formulas() {
    tch::manual_seed(7);
    let shape = [4i64, 9];
    let d = (Kind::Double, tch::Device::Cpu);
    let old = Tensor::randn(shape, d) * 0.5 - 1.0;
    let lp = &old + Tensor::randn(shape, d) * 0.3;
    // A behaviour policy up to e^1.5 away: some weights pass the cap of 2, some do not.
    let behaviour = &old + Tensor::randn(shape, d) * 0.6;
    let adv = Tensor::randn(shape, d);
    let mask = Tensor::rand(shape, d).gt(0.3).to_kind(Kind::Double);
    let cfg = PolicyLossConfig { entropy_coef: 0.0, ..PolicyLossConfig::default() };
    let rows = |t: &Tensor| -> Vec<Vec<f64>> { Vec::<Vec<f64>>::try_from(t).unwrap() };
    let data = serde_json::json!({
        "logp": rows(&lp), "old": rows(&old), "behav": rows(&behaviour), "adv": rows(&adv), "mask": rows(&mask),
        "clip_low": cfg.clip_low, "clip_high": cfg.clip_high, "dual_clip": cfg.dual_clip, "cap": 2.0,
    });
    let want = common::reference("off_policy.py", &[], &data.to_string());
    let close = |got: f64, want: &serde_json::Value, what: &str| {
        let want = want.as_f64().unwrap();
        assert!((got - want).abs() <= 1e-6 * want.abs().max(1.0), "{what}: {got} vs {want}");
    };
    for (name, correction) in [("none", OffPolicy::None), ("tis", OffPolicy::Tis), ("decoupled", OffPolicy::Decoupled)]
    {
        let x = PolicyLossInput {
            behaviour: Some(Behaviour { log_probs: &behaviour, correction, cap: 2.0 }),
            ..input(&lp, &old, &adv, &mask)
        };
        let out = policy_loss(&cfg, &x);
        close(out.pg_loss, &want[name]["loss"], name);
        if correction != OffPolicy::None {
            close(out.off_policy_weight, &want[name]["weight"], name);
            close(out.off_policy_capped, &want[name]["capped"], name);
            assert!(out.off_policy_capped > 0.0 && out.off_policy_capped < 1.0, "the data exercise the cap");
        }
    }
    // Behaviour equal to π_old: every correction is the identity.
    for correction in [OffPolicy::Tis, OffPolicy::Decoupled] {
        let same = policy_loss(
            &cfg,
            &PolicyLossInput {
                behaviour: Some(Behaviour { log_probs: &old, correction, cap: 2.0 }),
                ..input(&lp, &old, &adv, &mask)
            },
        );
        near(same.pg_loss, policy_loss(&cfg, &input(&lp, &old, &adv, &mask)).pg_loss);
    }
}
