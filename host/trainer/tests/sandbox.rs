//! The `[sandbox]` table: the limits a run loads its plugin under, kept in the run folder
//! for its resumption, refused up front when unusable.

mod common;

use common::{config, hostile_config, parse, step_line};
use vagen_runtime::Limits;
use vagen_trainer::{TrainConfig, Trainer};

/// The hostile plugin's `spin` mode burning 200 million loop iterations per step: ≈250 ms
/// on 2 cores, well past a 50 ms deadline (which fires by 70 ms) and well within the
/// default 2 s.
const SLOW: [&str; 2] = ["env.config.mode=\"spin\"", "env.config.spin_millions=200"];

#[test]
fn a_call_deadline_from_the_config_fails_slow_calls_that_the_default_allows() {
    // Default limits: the slow step is merely slow.
    let dir = tempfile::tempdir().unwrap();
    let cfg = parse(&hostile_config("healthy", ""), &[SLOW[0], SLOW[1], "schedule.steps=1"]).unwrap();
    assert_eq!(cfg.sandbox, Limits::default());
    Trainer::new(cfg, dir.path()).unwrap().run().unwrap();
    assert_eq!(step_line(dir.path(), 1)["train/failed_trajectories"], 0.0);
    // 50 ms: every episode times out, and the run stops naming the deadline.
    let dir = tempfile::tempdir().unwrap();
    let text = hostile_config("healthy", "[sandbox]\ncall_timeout_ms = 50");
    let cfg = parse(&text, &[SLOW[0], SLOW[1], "schedule.steps=1"]).unwrap();
    let err = Trainer::new(cfg, dir.path()).unwrap().run().unwrap_err().to_string();
    assert!(err.contains("step timed out after 50ms"), "{err}");
}

#[test]
fn a_resumed_run_keeps_the_limits_it_was_started_with() {
    // Healthy steps pass a 50 ms deadline; the run's config.toml keeps it.
    let dir = tempfile::tempdir().unwrap();
    let text = hostile_config("healthy", "[sandbox]\ncall_timeout_ms = 50\nfuel_millions_per_call = 100000");
    let cfg = parse(&text, &["schedule.steps=1"]).unwrap();
    Trainer::new(cfg.clone(), dir.path()).unwrap().run().unwrap();
    let saved = std::fs::read_to_string(dir.path().join("config.toml")).unwrap();
    assert_eq!(TrainConfig::parse(&saved, "config.toml", &[]).unwrap(), cfg);
    // Resumed into slow steps, with no limit given again: the deadline is still 50 ms.
    let overrides = [SLOW[0].to_string(), SLOW[1].into(), "schedule.steps=2".into()];
    let mut resumed = Trainer::resume(dir.path(), &overrides).unwrap();
    assert_eq!(
        resumed.cfg.sandbox,
        Limits { call_timeout_ms: 50, fuel_millions_per_call: Some(100_000), ..Limits::default() }
    );
    let err = resumed.run().unwrap_err().to_string();
    assert!(err.contains("step timed out after 50ms"), "{err}");
}

#[test]
fn unusable_limits_are_refused_naming_the_table_and_key() {
    let good = config("grpo", "");
    let cases: Vec<(String, Vec<&str>, &str)> = vec![
        (good.clone(), vec!["sandbox.call_timeout_ms=0"], "sandbox.call_timeout_ms: 0 ms"),
        (config("grpo", "[sandbox]\ncreate_timeout_ms = 0"), vec![], "sandbox.create_timeout_ms: 0 ms"),
        (good.clone(), vec!["sandbox.memory_mib=0"], "sandbox.memory_mib: 0 MiB"),
        (good.clone(), vec!["sandbox.fuel_millions_per_call=0"], "sandbox.fuel_millions_per_call"),
        (good.clone(), vec!["sandbox.memory_mib=-1"], "sandbox.memory_mib: invalid value"),
        (good.clone(), vec!["sandbox.call_timeout_ms=\"soon\""], "sandbox.call_timeout_ms: invalid type"),
        (config("grpo", "[sandbox]\ncall_timeout = 50"), vec![], "sandbox.call_timeout: no such limit"),
        (good.clone(), vec!["sandbox=5"], "sandbox must be a table"),
    ];
    for (text, overrides, needle) in cases {
        let err = parse(&text, &overrides).expect_err(needle);
        assert!(err.contains(needle), "{err} should name {needle}");
    }
}
