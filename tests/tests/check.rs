//! `vagen-host check` passes on every reference plugin and names the problem in broken ones.

use vagen_runtime::Limits;
use vagen_runtime::conformance::{CheckOptions, check};
use vagen_tests::{load, reference_plugins};

#[test]
fn every_reference_plugin_passes_as_wasm_and_as_native() {
    let plugins = reference_plugins();
    assert!(plugins.len() >= 4, "{plugins:?}");
    for (name, wasm, native) in plugins {
        for path in [wasm, native] {
            let (rt, _dir) = vagen_tests::runtime(Limits::default());
            let plugin = rt.load(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
            let report = check(plugin.as_ref(), &CheckOptions::default());
            let failures: Vec<_> = report.failures().collect();
            assert!(failures.is_empty(), "{}: {failures:?}", path.display());
            assert!(report.findings.iter().any(|f| f.check == "oracle"), "{name} declares an oracle");
        }
    }
}

fn failures_of(config: &str, name: &str) -> Vec<(String, String)> {
    let (plugin, _dir) = load(name, Limits::default());
    let opts = CheckOptions { config: config.into(), ..CheckOptions::default() };
    check(plugin.as_ref(), &opts).failures().map(|f| (f.check.to_string(), f.detail.clone())).collect()
}

#[test]
fn a_nondeterministic_reset_is_caught() {
    let f = failures_of(r#"{"mode": "nondeterministic"}"#, "hostile");
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].0, "determinism");
    assert!(f[0].1.contains("state leaks between episodes"), "{}", f[0].1);
    // It names the call and the field that differ.
    assert!(f[0].1.contains("differs at reset: the observation text"), "{}", f[0].1);
    // Natively the counter is shared by all instances: even two fresh ones disagree.
    let f = failures_of(r#"{"mode": "nondeterministic"}"#, "hostile.so");
    assert!(f.iter().any(|(c, d)| c == "determinism" && d.contains("two fresh instances differ at reset: the observation text")), "{f:?}");
}

/// Issue 41: an env that drifts only after 12 resets passed `check` (fuzz found it).
#[test]
fn state_that_drifts_after_a_dozen_resets_is_caught() {
    for plugin in ["hostile", "hostile.so"] {
        let f = failures_of(r#"{"mode": "drift-late"}"#, plugin);
        assert_eq!(f.len(), 1, "{plugin}: {f:?}");
        assert_eq!(f[0].0, "determinism");
        assert!(f[0].1.contains("after 44 episodes on one instance differs"), "{plugin}: {}", f[0].1);
    }
}

#[test]
fn nondeterministic_pixels_are_named_as_such() {
    let f = failures_of(r#"{"mode": "noisy-image"}"#, "hostile");
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].0, "determinism");
    assert!(f[0].1.contains("at step 1: image 0's pixels (1 bytes differ, the first at pixel 1 of 2x2)"), "{}", f[0].1);
}

#[test]
fn a_failing_step_is_labelled_as_a_failing_episode_not_as_nondeterminism() {
    let f = failures_of(r#"{"mode": "step-fails"}"#, "hostile");
    let labels: Vec<&str> = f.iter().map(|(c, _)| c.as_str()).collect();
    assert!(labels.contains(&"episodes") && !labels.contains(&"create"), "{f:?}");
    let (_, detail) = f.iter().find(|(c, _)| c == "episodes").unwrap();
    assert!(detail.contains("seed 0, step 1") && detail.contains("step always fails"), "{detail}");
    let (_, det) = f.iter().find(|(c, _)| c == "determinism").unwrap();
    assert!(det.starts_with("not judged"), "{det}");
}

#[test]
fn a_wrong_image_count_is_caught() {
    let f = failures_of(r#"{"mode": "wrong-image"}"#, "hostile");
    assert!(!f.is_empty());
    let mut judged = f.iter().filter(|(_, d)| !d.starts_with("not judged"));
    assert!(judged.clone().count() > 0 && judged.all(|(_, d)| d.contains("0 <image> markers for 1 images")), "{f:?}");
}

#[test]
fn a_weak_oracle_fails_unless_the_bar_is_lowered() {
    let (plugin, _dir) = load("frozenlake", Limits::default());
    let slippery = CheckOptions { config: r#"{"preset": "ragen"}"#.into(), ..CheckOptions::default() };
    let report = check(plugin.as_ref(), &slippery);
    let f: Vec<_> = report.failures().collect();
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(f[0].check == "oracle" && f[0].detail.contains("at least 100% required"), "{:?}", f[0]);
    let lenient = CheckOptions { oracle_min_success: 0.1, ..slippery };
    assert!(check(plugin.as_ref(), &lenient).passed());
}
