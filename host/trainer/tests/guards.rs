//! What the trainer refuses rather than trains on: numbers that are not numbers, SFT with
//! no oracle to imitate, failed episodes hidden from a success rate, a diverged loss.

mod common;

use common::{config, hostile_config, parse};
use std::path::Path;
use vagen_trainer::Trainer;

#[test]
fn non_finite_and_out_of_range_numbers_are_refused_when_the_config_is_read() {
    let good = config("grpo", "");
    for (set, field) in [
        ("sft.lr=nan", "sft.lr: NaN is not a learning rate in (0, 1]"),
        ("optim.weight_decay=inf", "optim.weight_decay: inf is not"),
        ("optim.grad_clip=-1", "optim.grad_clip"),
        ("rollout.top_p=7", "rollout.top_p: 7 is not in (0, 1]"),
        ("rollout.temperature=-0.5", "rollout.temperature"),
        ("rollout.val_temperature=nan", "rollout.val_temperature"),
        ("algorithm.advantage.gamma=1.5", "algorithm.advantage.gamma"),
        ("algorithm.policy_loss.dual_clip=0.5", "algorithm.policy_loss.dual_clip: 0.5 is not a finite number > 1"),
        ("rollout.format_reward.bonus=inf", "rollout.format_reward.bonus"),
        ("sandbox.max_abs_reward=0", "sandbox.max_abs_reward"),
        ("sandbox.max_turns=0", "sandbox.max_turns"),
        ("rollout.format=\"raw\"", "rollout.format: `raw` is `vagen-host run`'s"),
        // Issue 41: a learning rate of 1e300 was accepted.
        ("optim.actor_lr=1e300", "optim.actor_lr: 1e300 is not a learning rate in (0, 1]"),
        ("sft.lr=2", "sft.lr: 2 is not a learning rate in (0, 1]"),
        ("optim.weight_decay=5", "optim.weight_decay: 5 is not in [0, 1]"),
        ("algorithm.policy_loss.entropy_coef=1e9", "entropy_coef: 1e9 is not a number within ±1e6"),
        ("rollout.format_reward.penalty=-1e300", "rollout.format_reward.penalty"),
        ("env.val_samples=0", "env.val_samples: at least one answer"),
        ("env.val_samples=4", "env.val_samples: 4 answers a seed at rollout.val_temperature 0"),
    ] {
        let err = parse(&good, &[set]).expect_err(set);
        assert!(err.contains(field), "{set}: {err}");
    }
}

#[test]
fn sft_needs_an_oracle_and_stops_when_the_oracle_traps() {
    // A plugin without an oracle: refused before any work.
    let no_oracle = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-plugins/wit-0-1.wasm");
    let text = config("grpo", "").replace(common::plugin().to_str().unwrap(), no_oracle.to_str().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let err = Trainer::new(parse(&text, &["sft.steps=2"]).unwrap(), dir.path()).err().unwrap().to_string();
    assert!(err.contains("sft.steps") && err.contains("has none"), "{err}");
    // An oracle that traps fails every SFT episode: the run stops instead of training on
    // empty answers (loss 0), naming the step and leaving a reproducer.
    let dir = tempfile::tempdir().unwrap();
    let cfg = parse(&hostile_config("oracle-traps", ""), &["sft.steps=2", "sft.episodes_per_step=2"]).unwrap();
    let err = Trainer::new(cfg, dir.path()).unwrap().run().unwrap_err().to_string();
    assert!(err.contains("failed in SFT step 1") && err.contains("the oracle traps"), "{err}");
    let reproducer = std::fs::read_dir(dir.path()).unwrap().flatten().any(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        name.starts_with("failure-sft1-seed") && name.ends_with(".json")
    });
    assert!(reproducer, "{err}");
}

#[test]
fn an_evaluation_with_failed_episodes_counts_them_and_stops_past_the_rate() {
    // One seed in three cannot start: of the 4 held-out seeds from 0, seed 1; 25% is above
    // a 10% limit, so the first evaluation stops the run.
    let dir = tempfile::tempdir().unwrap();
    let cfg = parse(&hostile_config("reset-fails", ""), &["env.max_failure_rate=0.1", "env.val_seed_start=0"])
        .unwrap_or_else(|e| panic!("{e}"));
    let t = Trainer::new(cfg, dir.path()).unwrap();
    let err = t.evaluate().unwrap_err().to_string();
    assert!(err.contains("failed in the evaluation at step 0") && err.contains("cannot start seed"), "{err}");
    // Within the rate, the failed episodes count against success.
    let dir = tempfile::tempdir().unwrap();
    // Within the rate, the failed episode counts against success: the three others are won
    // (the healthy game ends in success at its third step), 3 of 4.
    let overrides = ["env.max_failure_rate=0.5", "env.val_seed_start=0", "env.max_turns=3"];
    let cfg = parse(&hostile_config("reset-fails", ""), &overrides).unwrap();
    let m = Trainer::new(cfg, dir.path()).unwrap().evaluate_all().unwrap();
    assert_eq!((m.episodes, m.failed), (4, 1));
    assert_eq!(m.success, 0.75, "the failed episode is a failure, not left out (that gave 1.0)");
}

#[test]
fn a_loss_that_diverges_stops_the_run_naming_why() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = parse(&config("grpo", ""), &["sft.steps=8", "sft.episodes_per_step=2"]).unwrap();
    // A config file cannot say this any more (learning rates are refused past 1); a
    // program building its config can, and the run still stops rather than train on.
    cfg.sft.lr = 1e30;
    let err = Trainer::new(cfg, dir.path()).unwrap().run().unwrap_err().to_string();
    assert!(err.contains("not finite") && err.contains("sft.lr"), "{err}");
}

#[test]
fn steps_with_nothing_to_train_on_are_not_a_diverged_loss() {
    // No reward at all (no format bonus, and the untrained model does not reach the goal
    // in two turns): every advantage is 0, every row is dropped, no update runs. Four such
    // steps in a row are a quiet start, not three skipped updates.
    let dir = tempfile::tempdir().unwrap();
    let overrides = [
        "schedule.steps=4",
        "algorithm.filter.drop_zero_advantage=true",
        "algorithm.policy_loss.entropy_coef=0",
        "rollout.format_reward.bonus=0",
    ];
    let cfg = parse(&config("grpo", ""), &overrides).unwrap();
    Trainer::new(cfg, dir.path()).unwrap().run().unwrap();
    let rewards: Vec<f64> =
        common::metrics(dir.path()).iter().filter_map(|m| m.get("train/reward").and_then(|r| r.as_f64())).collect();
    assert_eq!(rewards, [0.0; 4], "the premise: nothing to learn from");
}
