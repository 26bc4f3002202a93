//! `[async] max_staleness`: rollouts on the generator thread, k updates behind.

mod common;

use common::{config, metrics, parse};
use vagen_trainer::Trainer;

fn run(dir: &std::path::Path, overrides: &[&str]) -> Vec<serde_json::Map<String, serde_json::Value>> {
    let mut all = vec!["schedule.steps=4", "schedule.save_every=0", "schedule.eval_every=0"];
    all.extend(overrides.iter().filter(|o| **o != FROZEN));
    let mut cfg = parse(&config("grpo", ""), &all).unwrap();
    if overrides.contains(&FROZEN) {
        // No config may say so (it is refused as a learning rate), but a test may: the
        // weights never change, so every version is the first.
        cfg.optim.actor_lr = 0.0;
    }
    Trainer::new(cfg, dir).unwrap().run().unwrap();
    metrics(dir)
        .into_iter()
        .filter_map(|l| l.get("train/reward").is_some().then(|| l.as_object().unwrap().clone()))
        .collect()
}

/// Not a `--set`: see `run`.
const FROZEN: &str = "frozen";

/// Figures of the step itself: what neither timing nor the pipeline's own bookkeeping is.
fn results(line: &serde_json::Map<String, serde_json::Value>) -> Vec<(String, serde_json::Value)> {
    line.iter()
        .filter(|(k, _)| !k.starts_with("timing_s/") && !k.ends_with("_per_s") && !k.starts_with("async/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[test]
fn with_weights_that_never_change_the_generator_thread_plays_what_the_trainer_would() {
    // Every version of the weights is the first, so the thread's batches must be the
    // synchronous trainer's, figure for figure.
    // Old log-probs recomputed in both (`auto` reuses them only without staleness).
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sync = run(a.path(), &[FROZEN, "rollout.reuse_logprobs=false"]);
    let ahead = run(b.path(), &[FROZEN, "async.max_staleness=2", "rollout.reuse_logprobs=false"]);
    assert_eq!(sync.len(), 4);
    for (s, t) in sync.iter().zip(&ahead) {
        assert_eq!(results(s), results(t));
        assert!(s.get("async/staleness").is_none());
    }
}

#[test]
fn k_zero_is_the_synchronous_trainer_figure_for_figure() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sync = run(a.path(), &["schedule.steps=2"]);
    let zero = run(b.path(), &["schedule.steps=2", "async.max_staleness=0", "async.refresh=\"batch\""]);
    assert_eq!(sync.len(), 2);
    for (s, z) in sync.iter().zip(&zero) {
        assert_eq!(results(s), results(z));
        assert!(!z.keys().any(|k| k.starts_with("async/")), "no generator, no pipeline figures");
    }
}

#[test]
fn batches_are_exactly_k_versions_behind_and_runs_repeat() {
    let (a, b, c) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = run(a.path(), &["async.max_staleness=2", "rollout.reuse_logprobs=false"]);
    // Step n (0-based) is played with the weights after update max(n − 2, 0).
    for name in ["async/staleness", "async/staleness_max"] {
        let staleness: Vec<f64> = first.iter().map(|l| l[name].as_f64().unwrap()).collect();
        assert_eq!(staleness, [0.0, 1.0, 2.0, 2.0], "{name}");
    }
    // Stale weights show where generation's log-probs meet the update's forward: equal for the
    // first batch (the weights it was played with are the trainer's), not after updates.
    let diff = |l: &serde_json::Map<String, serde_json::Value>| l["rollout/logprob_diff_max"].as_f64().unwrap();
    assert!(diff(&first[0]) < 1e-4, "{}", diff(&first[0]));
    assert!(diff(&first[3]) > 1e-3, "{}", diff(&first[3]));
    // The weights a batch uses do not depend on how fast either thread is.
    let again = run(b.path(), &["async.max_staleness=2", "rollout.reuse_logprobs=false"]);
    for (x, y) in first.iter().zip(&again) {
        assert_eq!(results(x), results(y));
    }
    // The synchronous trainer differs from step 2 on (its batches are fresher).
    let sync = run(c.path(), &["rollout.reuse_logprobs=false"]);
    assert_eq!(results(&sync[0]), results(&first[0]));
    assert_ne!(results(&sync[2]), results(&first[2]));
}

#[test]
fn with_decode_step_refresh_no_consumed_token_is_more_than_k_versions_old() {
    let dir = tempfile::tempdir().unwrap();
    let lines = run(dir.path(), &["async.max_staleness=1", "async.refresh=\"decode-step\"", "schedule.steps=6"]);
    assert_eq!(lines.len(), 6);
    for (n, l) in lines.iter().enumerate() {
        let (mean, max) = (l["async/staleness"].as_f64().unwrap(), l["async/staleness_max"].as_f64().unwrap());
        // Batch n starts once the weights after update n − 1 are out, and takes newer ones
        // as they come: which token gets which depends on the threads' timing, not its bound.
        assert!(max <= 1.0 && mean <= max && mean >= 0.0, "step {}: staleness {mean} (max {max})", n + 1);
        assert_eq!(l["async/dropped_batches"].as_f64(), Some(0.0));
        let idle = l["async/generator_idle"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&idle), "{idle}");
    }
    assert_eq!(lines[0]["async/staleness_max"].as_f64(), Some(0.0), "the first batch is the first version's");
}

#[test]
fn decode_step_refresh_or_an_engine_device_without_a_generator_is_refused_by_name() {
    let refused = |sets: &[&str]| parse(&config("grpo", ""), sets).err().unwrap();
    let e = refused(&["async.refresh=\"decode-step\""]);
    assert!(e.contains("async.refresh") && e.contains("max_staleness"), "{e}");
    let e = refused(&["async.refresh=\"decode-step\"", "async.max_staleness=1", "engine.kind=\"static\""]);
    assert!(e.contains("async.refresh") && e.contains("continuous engine"), "{e}");
    let e = refused(&["engine.device=\"cpu\""]);
    assert!(e.contains("engine.device") && e.contains("max_staleness"), "{e}");
}

#[test]
fn the_generator_may_run_on_a_device_of_its_own() {
    // Only the CPU here: the path that places the generator's copy and copies each
    // version across (the GPU bundle has no second GPU either).
    let dir = tempfile::tempdir().unwrap();
    let lines = run(dir.path(), &["async.max_staleness=1", "engine.device=\"cpu\"", "schedule.steps=2"]);
    assert_eq!(lines[1]["async/staleness"].as_f64(), Some(1.0));
}

#[test]
fn merged_generation_with_a_generator_thread_is_refused_by_name() {
    let e = parse(&config("grpo", "[model.lora]\nr = 4\n"), &["async.max_staleness=1", "engine.merge_lora=true"])
        .err()
        .unwrap();
    assert!(e.contains("engine.merge_lora") && e.contains("[async]"), "{e}");
}

#[test]
fn a_plugin_fault_on_the_generator_thread_stops_the_run_with_a_reproducer() {
    // Training steps past a 50 ms deadline (held-out ones healthy): every training episode
    // fails, on the generator's thread.
    let dir = tempfile::tempdir().unwrap();
    let text = common::hostile_config("healthy", "[sandbox]\ncall_timeout_ms = 50");
    let sets = [
        "env.train_config.mode=\"spin\"",
        "env.train_config.spin_millions=200",
        "schedule.steps=2",
        "async.max_staleness=1",
    ];
    let cfg = parse(&text, &sets).unwrap();
    let err = Trainer::new(cfg, dir.path()).unwrap().run().unwrap_err().to_string();
    assert!(err.contains("step timed out after 50ms") && err.contains("reproducer"), "{err}");
    let reproducers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("failure-step1-"))
        .collect();
    assert_eq!(reproducers.len(), 1, "{err}");
}

#[test]
fn a_resumed_run_starts_its_generator_at_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let sets = ["async.max_staleness=1", "schedule.steps=2", "schedule.save_every=1", "schedule.eval_every=0"];
    Trainer::new(parse(&config("grpo", ""), &sets).unwrap(), dir.path()).unwrap().run().unwrap();
    let mut resumed = Trainer::resume(dir.path(), &["schedule.steps=4".into()]).unwrap();
    resumed.run().unwrap();
    // The queue is not saved: step 3 is played with the checkpoint's weights (fresh), step 4
    // one update behind again.
    let staleness = |step: u64| common::step_line(dir.path(), step)["async/staleness"].as_f64().unwrap();
    assert_eq!([staleness(1), staleness(2), staleness(3), staleness(4)], [0.0, 1.0, 0.0, 1.0]);
}
