//! A run's figures depend on its seed and config, never on timing: the same seeded run
//! gives the same logged figures (timings aside) and the same weights, with the machine
//! idle or with every core busy with other work.

mod common;

use common::{config, metrics, parse};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use vagen_trainer::Trainer;

/// What a run logs that is a measurement of time, not a result.
fn is_timing(key: &str) -> bool {
    key.starts_with("timing_s/") || key.ends_with("_per_s")
}

/// SFT, RL with the continuous engine, an evaluation: every phase that samples or trains.
fn run(dir: &std::path::Path) -> (Vec<serde_json::Value>, Vec<u8>) {
    let overrides =
        ["sft.steps=2", "sft.episodes_per_step=2", "schedule.eval_every=2", "schedule.steps=2", "env.group_size=4"];
    let cfg = parse(&config("gigpo", ""), &overrides).unwrap();
    Trainer::new(cfg, dir).unwrap().run().unwrap();
    let mut lines = metrics(dir);
    for line in &mut lines {
        line.as_object_mut().unwrap().retain(|k, _| !is_timing(k));
    }
    let weights = std::fs::read(dir.join("checkpoints/step-000002/actor/model.safetensors")).unwrap();
    (lines, weights)
}

#[test]
fn the_same_seeded_run_gives_the_same_figures_on_a_busy_machine() {
    let quiet = tempfile::tempdir().unwrap();
    let (expected, weights) = run(quiet.path());
    assert!(expected.iter().any(|l| l.get("val/success").is_some()), "the run evaluates");
    // Twice as many spinning threads as cores: the run's threads are preempted at
    // arbitrary points, its sandbox calls and engine steps take longer.
    let stop = Arc::new(AtomicBool::new(false));
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let spinners: Vec<_> = (0..2 * cores)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        })
        .collect();
    let busy = tempfile::tempdir().unwrap();
    let (got, busy_weights) = run(busy.path());
    stop.store(true, Ordering::Relaxed);
    spinners.into_iter().for_each(|s| s.join().unwrap());
    assert_eq!(got.len(), expected.len());
    for (a, b) in expected.iter().zip(&got) {
        assert_eq!(a, b, "a logged figure changed under load");
    }
    assert!(weights == busy_weights, "the trained weights changed under load");
}
