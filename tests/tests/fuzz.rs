//! `fuzz` finds what the hostile fixtures hide, and its reproducers replay the failure.

use std::time::{Duration, Instant};
use vagen_runtime::fuzz::{FindingKind, FuzzOptions, fuzz, replay};
use vagen_runtime::{Error, Limits};
use vagen_tests::{load, plugin_path, reference_plugins, runtime};

fn campaign(mode: &str) -> vagen_runtime::fuzz::FuzzReport {
    let (plugin, _dir) = load("hostile", Limits::default());
    let opts = FuzzOptions {
        config: format!(r#"{{"mode": "{mode}"}}"#),
        duration: Some(Duration::from_secs(60)),
        stop_on_finding: true,
        ..FuzzOptions::default()
    };
    let started = Instant::now();
    let report = fuzz(plugin.as_ref(), &opts).unwrap();
    assert!(started.elapsed() < Duration::from_secs(60), "{mode}: not found within 60 s");
    // The reproducer plays the failure back on fresh instances.
    for f in &report.findings {
        let again = replay(plugin.as_ref(), &f.reproducer).unwrap();
        assert!(again.reproduced.is_some(), "{mode}: {:?} did not replay: {:?}", f.kind, f.reproducer);
    }
    report
}

fn kinds(r: &vagen_runtime::fuzz::FuzzReport) -> Vec<FindingKind> {
    r.findings.iter().map(|f| f.kind).collect()
}

#[test]
fn a_trap_on_a_rare_action_sequence_is_found_and_shrunk() {
    let r = campaign("rare-trap");
    assert_eq!(kinds(&r), [FindingKind::Fault]);
    let f = &r.findings[0];
    assert!(f.message.contains("rare sequence go, GO"), "{}", f.message);
    // Shrinking keeps just the two answers that matter.
    assert_eq!(f.reproducer.answers.iter().map(|a| a.trim()).collect::<Vec<_>>(), ["go", "GO"]);
}

#[test]
fn a_per_episode_leak_is_found() {
    let r = campaign("leak");
    assert_eq!(kinds(&r), [FindingKind::Leak]);
    assert!(r.findings[0].message.contains("memory grew"), "{}", r.findings[0].message);
}

#[test]
fn nondeterminism_is_found() {
    let r = campaign("nondeterministic");
    assert_eq!(kinds(&r), [FindingKind::Nondeterminism]);
}

#[test]
fn a_huge_image_claim_is_a_typed_error_without_the_allocation() {
    let (plugin, _dir) = load("hostile", Limits::default());
    let mut env = plugin.create(r#"{"mode": "huge-image"}"#).unwrap();
    env.reset(0).unwrap();
    let err = env.step("go").unwrap_err();
    // 100 000 × 100 000 × 3 bytes would be 30 GB; the claim is refused on its dimensions.
    assert!(matches!(&err, Error::Malformed { call: "step", detail } if detail.contains("100000x100000")), "{err}");
}

#[test]
fn a_manifest_that_never_returns_times_out_at_load() {
    let (rt, _dir) = runtime(Limits { create_timeout_ms: 300, ..Limits::default() });
    let started = Instant::now();
    let err = rt.load(plugin_path("slow-manifest")).err().expect("a spinning manifest cannot load");
    assert!(matches!(err, Error::Timeout { call: "manifest", .. }), "{err}");
    assert!(started.elapsed() < Duration::from_millis(600 + 500), "took {:?}", started.elapsed());
}

#[test]
fn reference_plugins_survive_a_short_campaign() {
    for (name, wasm, _) in reference_plugins() {
        let (rt, _dir) = runtime(Limits::default());
        let plugin = rt.load(&wasm).unwrap();
        let opts = FuzzOptions { duration: Some(Duration::from_secs(2)), ..FuzzOptions::default() };
        let r = fuzz(plugin.as_ref(), &opts).unwrap();
        assert!(r.findings.is_empty(), "{name}: {:?}", r.findings.iter().map(|f| &f.message).collect::<Vec<_>>());
        assert!(r.episodes > 20, "{name}: only {} episodes", r.episodes);
    }
}
