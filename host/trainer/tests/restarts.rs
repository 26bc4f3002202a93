//! Long runs and the ways they end early: killed during SFT, a corrupt newest checkpoint,
//! a config refused late, a disk that should not fill with checkpoints.

mod common;

use common::{config, hostile_config, metrics, parse};
use std::path::Path;
use vagen_trainer::Trainer;

fn checkpoints(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("checkpoints"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `sft/loss` by SFT step, as `metrics::read` resolves resumed runs.
fn sft_losses(dir: &Path) -> Vec<(u64, f64)> {
    vagen_trainer::read_metrics(dir)
        .unwrap()
        .iter()
        .filter_map(|m| Some((m.get("sft/step")?.as_f64()? as u64, m["sft/loss"].as_f64()?)))
        .collect()
}

#[test]
fn a_run_stopped_during_sft_resumes_there_and_repeats_the_same_steps() {
    let sft = ["sft.steps=4", "sft.episodes_per_step=2", "sft.save_every=2", "schedule.steps=1"];
    let whole = tempfile::tempdir().unwrap();
    Trainer::new(parse(&config("grpo", ""), &sft).unwrap(), whole.path()).unwrap().run().unwrap();
    assert_eq!(checkpoints(whole.path()), ["sft-000002", "sft-000004", "step-000001"]);
    // The same run stopped after 3 SFT steps (its last checkpoint at 2), then resumed with
    // the whole schedule: it redoes step 3 from the checkpoint and goes on.
    let cut = tempfile::tempdir().unwrap();
    let mut t =
        Trainer::new(parse(&config("grpo", ""), &[&sft[..], &["sft.steps=3"]].concat()).unwrap(), cut.path()).unwrap();
    t.sft().unwrap();
    drop(t);
    std::fs::remove_dir_all(cut.path().join("checkpoints/sft-000003")).unwrap(); // killed before saving it
    let overrides: Vec<String> = ["sft.steps=4", "sft.save_every=2"].map(String::from).to_vec();
    let mut resumed = Trainer::resume(cut.path(), &overrides).unwrap();
    assert_eq!((resumed.state.step, resumed.state.sft_steps_done), (0, 2));
    resumed.run().unwrap();
    let (a, b) = (sft_losses(whole.path()), sft_losses(cut.path()));
    assert_eq!(a.iter().map(|x| x.0).collect::<Vec<_>>(), [1, 2, 3, 4]);
    assert_eq!(b.iter().map(|x| x.0).collect::<Vec<_>>(), [1, 2, 3, 4], "step 3 once, as redone");
    for ((step, x), (_, y)) in a.iter().zip(&b) {
        assert!((x - y).abs() < 1e-6, "SFT step {step}: {x} vs {y}");
    }
    // The log was appended to, never rewritten: the first step-3 line is still in the file.
    assert_eq!(metrics(cut.path()).iter().filter(|m| m["sft/step"] == 3.0).count(), 2);
}

#[test]
fn a_corrupt_newest_checkpoint_falls_back_to_the_one_before() {
    let dir = tempfile::tempdir().unwrap();
    Trainer::new(parse(&config("gae", ""), &[]).unwrap(), dir.path()).unwrap().run().unwrap();
    let weights = dir.path().join("checkpoints/step-000002/actor/model.safetensors");
    let len = std::fs::metadata(&weights).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&weights).unwrap().set_len(len / 2).unwrap();
    let resumed = Trainer::resume(dir.path(), &["schedule.steps=3".into()]).unwrap();
    assert_eq!(resumed.state.step, 1, "resumed from step-000001");
    // The torn one is kept aside, out of the way of later saves, resumes and keep_last.
    assert_eq!(checkpoints(dir.path()), [".step-000002.corrupt", "step-000001"]);
    drop(resumed);
    // No checkpoint loads: refused, naming it.
    let state = dir.path().join("checkpoints/step-000001/state.json");
    std::fs::write(&state, "{ not json").unwrap();
    let err = Trainer::resume(dir.path(), &[]).err().unwrap().to_string();
    assert!(err.contains("no checkpoint") && err.contains("step-000001"), "{err}");
}

/// Issue 41: a checkpoint whose config made libtorch panic (`vocab_size` 2^40) ended the
/// resume with exit 101 instead of falling back like a torn one.
#[test]
fn a_checkpoint_that_fails_for_any_reason_falls_back_to_the_one_before() {
    let dir = tempfile::tempdir().unwrap();
    Trainer::new(parse(&config("grpo", ""), &[]).unwrap(), dir.path()).unwrap().run().unwrap();
    let path = dir.path().join("checkpoints/step-000002/actor/config.json");
    let mut actor: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    actor["vocab_size"] = (1u64 << 40).into();
    std::fs::write(&path, actor.to_string()).unwrap();
    let resumed = Trainer::resume(dir.path(), &["schedule.steps=3".into()]).unwrap();
    assert_eq!(resumed.state.step, 1, "resumed from step-000001");
    assert_eq!(checkpoints(dir.path()), [".step-000002.corrupt", "step-000001"]);
}

#[test]
fn keep_last_deletes_older_checkpoints_after_each_save() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = parse(&config("grpo", ""), &["schedule.steps=3", "schedule.keep_last=2"]).unwrap();
    Trainer::new(cfg, dir.path()).unwrap().run().unwrap();
    assert_eq!(checkpoints(dir.path()), ["step-000002", "step-000003"]);
}

#[test]
fn a_config_refused_late_leaves_no_config_behind() {
    // The plugin refuses the env config only when asked to create an instance, after the
    // model has been built: the folder must not look like a run that can be resumed.
    let dir = tempfile::tempdir().unwrap();
    let cfg = parse(&hostile_config("no-such-mode", ""), &[]).unwrap();
    let err = Trainer::new(cfg.clone(), dir.path()).err().unwrap().to_string();
    assert!(err.contains("env.config") && err.contains("unknown mode"), "{err}");
    assert!(!dir.path().join("config.toml").exists());
    // So the same folder takes a corrected run.
    let good = parse(&hostile_config("healthy", ""), &["schedule.steps=0"]).unwrap();
    Trainer::new(good, dir.path()).unwrap();
    assert!(dir.path().join("config.toml").is_file());
}

/// Issue 41: two trainers on one `--run-dir` both ran (steps logged twice, config and
/// checkpoints from different runs), and a folder of unrelated files got its `report.html`
/// overwritten.
#[test]
fn one_trainer_writes_a_run_folder_and_a_new_run_needs_an_empty_one() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = parse(&config("grpo", ""), &["schedule.steps=1"]).unwrap();
    let mut first = Trainer::new(cfg.clone(), dir.path()).unwrap();
    first.run().unwrap();
    // While the first trainer lives, a second one on the folder is refused, naming it.
    let err = Trainer::resume(dir.path(), &[]).err().unwrap().to_string();
    assert!(err.contains("in use by another trainer") && err.contains(&format!("pid {}", std::process::id())), "{err}");
    drop(first);
    // Released with the trainer: the run resumes and goes on.
    let mut resumed = Trainer::resume(dir.path(), &["schedule.steps=2".into()]).unwrap();
    resumed.run().unwrap();
    drop(resumed);

    // A folder of someone's files is refused before anything is written into it.
    let theirs = tempfile::tempdir().unwrap();
    std::fs::write(theirs.path().join("report.html"), "mine").unwrap();
    std::fs::write(theirs.path().join("notes.txt"), "mine").unwrap();
    let err = Trainer::new(cfg.clone(), theirs.path()).err().unwrap().to_string();
    assert!(err.contains("holds files that are not a run's") && err.contains("notes.txt"), "{err}");
    assert_eq!(std::fs::read_to_string(theirs.path().join("report.html")).unwrap(), "mine");
    let names: Vec<_> = std::fs::read_dir(theirs.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(names.len(), 2, "nothing added: {names:?}");
    // An empty folder, or one left by an attempt that stopped before its config, is fine.
    let empty = tempfile::tempdir().unwrap();
    std::fs::write(empty.path().join("metrics.jsonl"), "").unwrap();
    Trainer::new(cfg, empty.path()).unwrap();
}
