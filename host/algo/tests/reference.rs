//! Agreement with the independent Python reference (`reference/advantages.py`) on random
//! batches, through the committed fixture it writes.

use serde_json::Value;
use vagen_algo::{
    AdvantageConfig, NormMethod, Trajectory, compute_advantages, normalize_scores, pass_at_k, wilson_interval,
};

fn fixture() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/advantages.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture exists")).expect("fixture is JSON")
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

fn bools(v: &Value) -> Vec<bool> {
    v.as_array().unwrap().iter().map(|x| x.as_bool().unwrap()).collect()
}

fn agree(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-6 * w.abs().max(1.0), "{what}, token {i}: rust {g}, python {w}");
    }
}

#[test]
fn every_estimator_agrees_with_the_python_reference_to_1e_6() {
    let f = fixture();
    let cases = f["estimators"].as_array().unwrap();
    assert!(cases.len() >= 100, "{} cases", cases.len());
    // The fixture must cover every estimator with whitening both on and off, or a change to
    // one population could slip through.
    let mut covered = std::collections::BTreeSet::new();
    for case in cases {
        let cfg: AdvantageConfig = serde_json::from_value(case["config"].clone()).unwrap();
        covered.insert((format!("{:?}", cfg.estimator), cfg.whiten.unwrap_or(cfg.estimator.uses_critic())));
    }
    for e in ["Gae", "BiLevelGae", "TurnGae", "Grpo", "Brpo", "Reinforce", "Gigpo"] {
        for w in [false, true] {
            assert!(covered.contains(&(e.to_string(), w)), "no reference case for {e} with whiten = {w}");
        }
    }
    for (n, case) in cases.iter().enumerate() {
        let cfg: AdvantageConfig = serde_json::from_value(case["config"].clone()).unwrap();
        let owned: Vec<_> = case["batch"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                let ends: Vec<usize> =
                    t["turn_ends"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
                let states: Vec<u64> =
                    t["turn_states"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
                (
                    floats(&t["rewards"]),
                    floats(&t["values"]),
                    bools(&t["loss_mask"]),
                    bools(&t["adv_mask"]),
                    ends,
                    t["group"].as_u64().unwrap(),
                    states,
                )
            })
            .collect();
        let views: Vec<Trajectory> = owned
            .iter()
            .map(|(r, v, l, a, e, g, s)| Trajectory {
                rewards: r,
                values: v,
                loss_mask: l,
                adv_mask: a,
                turn_ends: e,
                group: *g,
                turn_states: s,
            })
            .collect();
        let out = compute_advantages(&cfg, &views).unwrap_or_else(|e| panic!("case {n}: {e}"));
        for (k, (o, want)) in out.iter().zip(case["expected"].as_array().unwrap()).enumerate() {
            let what = format!("case {n} ({:?}), trajectory {k}", cfg.estimator);
            agree(&o.advantages, &floats(&want["advantages"]), &format!("{what} advantages"));
            agree(&o.returns, &floats(&want["returns"]), &format!("{what} returns"));
            assert_eq!(o.value_mask, bools(&want["value_mask"]), "{what} value mask");
        }
    }
}

#[test]
fn reward_normalisation_agrees_with_the_python_reference() {
    let f = fixture();
    for (n, case) in f["normalisation"].as_array().unwrap().iter().enumerate() {
        let method: NormMethod = serde_json::from_value(case["method"].clone()).unwrap();
        let keys: Vec<u64> = case["keys"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        let got = normalize_scores(&floats(&case["scores"]), &keys, method).unwrap();
        agree(&got, &floats(&case["expected"]), &format!("normalisation case {n} ({method:?})"));
    }
}

#[test]
fn pass_at_k_and_wilson_intervals_agree_with_the_exact_python_reference() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pass_at_k.json");
    let f: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("fixture exists")).unwrap();
    let cases = f["pass_at_k"].as_array().unwrap();
    assert!(cases.len() >= 100);
    let u = |v: &Value| v.as_u64().unwrap() as usize;
    for case in cases {
        let (n, c, k) = (u(&case["n"]), u(&case["c"]), u(&case["k"]));
        let want = case["expected"].as_f64().unwrap();
        let got = pass_at_k(n, c, k).unwrap();
        assert!((got - want).abs() <= 1e-12, "pass@{k} of {c}/{n}: rust {got}, python {want}");
    }
    for case in f["wilson"].as_array().unwrap() {
        let (lo, hi) = wilson_interval(u(&case["successes"]), u(&case["trials"]), case["z"].as_f64().unwrap()).unwrap();
        agree(&[lo, hi], &floats(&case["expected"]), "wilson interval");
    }
}
