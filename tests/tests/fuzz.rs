//! `fuzz` finds what the hostile fixtures hide, and its reproducers replay the failure.

use std::time::{Duration, Instant};
use vagen_runtime::fuzz::{FindingKind, FuzzOptions, Verdict, fuzz, replay};
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
        assert!(
            matches!(again.verdict, Verdict::Reproduced(_)),
            "{mode}: {:?} did not replay: {:?} {:?}",
            f.kind,
            again.verdict,
            f.reproducer
        );
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
fn a_step_that_always_fails_is_a_finding_at_the_first_step() {
    let r = campaign("step-fails");
    assert_eq!(kinds(&r), [FindingKind::Error]);
    let f = &r.findings[0];
    assert!(f.message.starts_with("step 1: environment failed in step: step always fails"), "{}", f.message);
    assert_eq!(f.reproducer.answers.len(), 1, "{:?}", f.reproducer);
    assert_eq!(f.reproducer.failed_call, Some(1));
}

#[test]
fn a_reset_that_fails_for_some_seeds_is_a_finding() {
    let r = campaign("reset-fails");
    assert_eq!(kinds(&r), [FindingKind::Error]);
    let f = &r.findings[0];
    assert!(f.message.starts_with("reset: environment failed in reset: cannot start seed"), "{}", f.message);
    assert_eq!(f.reproducer.seed % 3, 1);
    assert!(f.reproducer.answers.is_empty(), "{:?}", f.reproducer);
}

#[test]
fn a_campaign_keeps_to_its_time_budget_within_a_call() {
    let (plugin, _dir) = load("hostile", Limits::default());
    // Steps slow but within every deadline: one takes `step`, an episode four of them (three
    // steps, then the step after done), so judging time only between episodes overshot a
    // budget of one step by three.
    let config = r#"{"mode": "spin", "spin_millions": 150}"#;
    let mut env = plugin.create(config).unwrap();
    env.reset(0).unwrap();
    let t = Instant::now();
    env.step("go").unwrap();
    let step = t.elapsed();
    assert!(step > Duration::from_millis(50), "a spin step took only {step:?}: too fast to tell");
    let opts = FuzzOptions { config: config.into(), duration: Some(step), ..FuzzOptions::default() };
    let started = Instant::now();
    let r = fuzz(plugin.as_ref(), &opts).unwrap();
    let took = started.elapsed();
    assert!(took < step * 5 / 2, "a campaign of {step:?} took {took:?}");
    assert!(r.findings.iter().all(|f| f.kind == FindingKind::SlowCall), "{:?}", kinds(&r));
}

#[test]
fn a_replay_says_why_a_recorded_failure_did_not_recur() {
    let (plugin, _dir) = load("hostile", Limits::default());
    let f = &campaign("step-fails").findings[0];
    // The same script on a healthy instance: no error at step 1.
    let healthy = vagen_runtime::fuzz::Reproducer { config: r#"{"mode": "healthy"}"#.into(), ..f.reproducer.clone() };
    match replay(plugin.as_ref(), &healthy).unwrap().verdict {
        Verdict::NotReproduced(why) => {
            assert!(why.contains("played without error") && why.contains("recorded at step 1"), "{why}")
        }
        v => panic!("{v:?}"),
    }
    // A different error at the same call is not the recorded one.
    let other = vagen_runtime::fuzz::Reproducer { config: r#"{"mode": "panic"}"#.into(), ..f.reproducer.clone() };
    match replay(plugin.as_ref(), &other).unwrap().verdict {
        Verdict::NotReproduced(why) => assert!(why.contains("failed differently") && why.contains("trapped"), "{why}"),
        v => panic!("{v:?}"),
    }
}

#[test]
fn a_per_episode_leak_is_found() {
    let r = campaign("leak");
    assert_eq!(kinds(&r), [FindingKind::Leak]);
    assert!(r.findings[0].message.contains("memory grew"), "{}", r.findings[0].message);
    // The replay judges growth by the fuzzer's threshold, recorded with the finding: the
    // same growth under a higher one is not a leak.
    let found = &r.findings[0].reproducer;
    assert_eq!(found.leak_bytes, Some(FuzzOptions::default().leak_bytes));
    let (plugin, _dir) = load("hostile", Limits::default());
    let lenient = vagen_runtime::fuzz::Reproducer { leak_bytes: Some(1 << 40), ..found.clone() };
    match replay(plugin.as_ref(), &lenient).unwrap().verdict {
        Verdict::NotReproduced(why) => assert!(why.contains("within the fuzzer's threshold of 1048576 MiB"), "{why}"),
        v => panic!("{v:?}"),
    }
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

/// The Rust SDK's starting point (`examples/guess-number`, as docs/writing-an-environment.md
/// points to) passes a minute of fuzzing as shipped, as the other SDKs' templates do
/// (host/env-tool/tests/languages.rs).
#[test]
fn the_rust_starting_point_passes_a_minute_of_fuzzing() {
    let (plugin, _dir) = load("guess-number", Limits::default());
    let opts = FuzzOptions { duration: Some(Duration::from_secs(60)), ..FuzzOptions::default() };
    let r = fuzz(plugin.as_ref(), &opts).unwrap();
    assert!(r.findings.is_empty(), "{:?}", r.findings.iter().map(|f| &f.message).collect::<Vec<_>>());
    assert!(r.episodes > 100, "only {} episodes", r.episodes);
}
