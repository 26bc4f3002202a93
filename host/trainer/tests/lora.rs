//! LoRA runs: only the adapters move; checkpoints hold PEFT adapters; the critic and the KL
//! reference sit on the actor's frozen base; a run resumes exactly; a merged generator
//! follows the adapters.

mod common;

use common::*;
use std::collections::HashMap;
use tch::Tensor;
use vagen_model::LoadOptions;
use vagen_trainer::Trainer;

const LORA: &str = "[model.lora]\nr = 4\nalpha = 8\ntarget_modules = \"all-linear\"\n";

fn safetensors(path: &std::path::Path) -> HashMap<String, Tensor> {
    Tensor::read_safetensors(path).unwrap().into_iter().collect()
}

#[test]
fn a_lora_run_moves_only_adapters_shares_its_base_and_saves_peft_adapters() {
    let dir = tempfile::tempdir().unwrap();
    let extra = format!(
        "{LORA}[sft]\nsteps = 1\nepisodes_per_step = 2\nlr = 1e-3\n[algorithm.policy_loss.kl]\nkind = \"k3\"\ncoef = 0.1\n"
    );
    let cfg = parse(&config("gae", &extra), &["schedule.steps=1", "optim.actor_lr=1e-3"]).unwrap();
    let seed = cfg.schedule.seed;
    let mut t = Trainer::new(cfg, dir.path()).unwrap();
    t.run().unwrap();

    let base = vagen_model::default_model(seed, LoadOptions::default()).unwrap();
    let actor = t.actor.vs.variables();
    for (name, v) in base.vs.variables() {
        assert!(actor[&name].equal(&v), "{name}: the base is frozen");
    }
    let moved = actor.iter().filter(|(n, v)| n.contains(".lora_B.") && v.abs().max().double_value(&[]) > 0.0).count();
    assert!(moved > 0, "SFT and RL moved the adapters");
    let weight = "model.layers.0.self_attn.q_proj.weight";
    assert_eq!(t.critic().unwrap().vs.variables()[weight].data_ptr(), actor[weight].data_ptr(), "one base");

    let ckpt = dir.path().join("checkpoints/step-000001");
    for folder in ["actor", "critic"] {
        assert!(ckpt.join(folder).join("adapter_config.json").is_file(), "{folder}");
        assert!(!ckpt.join(folder).join("model.safetensors").exists(), "{folder} holds no copy of the base");
    }
    let critic = safetensors(&ckpt.join("critic/adapter_model.safetensors"));
    assert!(critic.contains_key("base_model.model.score.weight"));
    assert!(dir.path().join("reference/adapter_config.json").is_file());
    let moments = safetensors(&ckpt.join("actor_optim.safetensors"));
    assert!(moments.keys().all(|k| k == "step" || k.contains(".lora_")), "optimiser state only for adapters");
    assert_eq!(moments.len(), 1 + 2 * t.actor.trainable().len());

    // The adapter folder names its base, so `--model DIR` loads it as trained.
    let source: vagen_model::ModelSource = ckpt.join("actor").to_str().unwrap().parse().unwrap();
    let loaded = source.load(0, LoadOptions::default()).unwrap();
    for (name, v) in loaded.vs.variables() {
        assert!(actor[&name].equal(&v), "{name}");
    }
}

#[test]
fn a_resumed_lora_run_continues_exactly() {
    let (whole, cut) = common::whole_and_resumed(&config("gae", LORA), |_| {});
    let equal = ["train/reward", "rollout/response_length", "throughput/response_tokens"];
    common::assert_same_step(
        whole.path(),
        cut.path(),
        2,
        &equal,
        &["actor/pg_loss", "critic/vf_loss", "actor/entropy"],
    );
}

#[test]
fn a_merged_generator_follows_the_adapters_through_training() {
    let dir = tempfile::tempdir().unwrap();
    let extra = format!("{LORA}[engine]\nmerge_lora = true\n");
    let cfg = parse(&config("grpo", &extra), &["schedule.steps=2", "optim.actor_lr=1e-2"]).unwrap();
    let mut t = Trainer::new(cfg, dir.path()).unwrap();
    t.run().unwrap();
    let generator = t.generator();
    assert!(generator.lora().is_none(), "rollouts sample from the merged copy");
    let theirs = generator.vs.variables();
    let merged = t.actor.merged_weights();
    assert!(!merged.is_empty());
    for (name, w) in merged {
        let err = (&w - &theirs[&name]).abs().max().double_value(&[]);
        assert!(err < 1e-6, "{name}: the merged copy is {err:e} behind the adapters");
    }
    let last = step_line(dir.path(), 2);
    assert!(last["actor/pg_loss"].as_f64().unwrap().is_finite());
}

/// Every step's line of a run's metrics.
fn step_lines(dir: &std::path::Path, steps: u64) -> Vec<serde_json::Value> {
    (1..=steps).map(|s| step_line(dir, s)).collect()
}

#[test]
fn lora_rl_samples_from_the_adapters_it_trains_and_starts_each_update_on_policy() {
    // One mini-batch a step, so each step's one update starts where rollouts sampled: a
    // ratio of 1 (no clipping, PPO's KL 0) unless generation used other weights than the
    // update, and log-probs recomputed by the training forward equal generation's. A large
    // learning rate makes a stale copy show.
    for merge in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let extra =
            format!("{LORA}[engine]\nmerge_lora = {merge}\n[algorithm.policy_loss.kl]\nkind = \"k3\"\ncoef = 0.1\n");
        let overrides = ["schedule.steps=3", "optim.actor_lr=2e-2", "rollout.reuse_logprobs=false"];
        let mut t = Trainer::new(parse(&config("grpo", &extra), &overrides).unwrap(), dir.path()).unwrap();
        t.run().unwrap();
        let lines = step_lines(dir.path(), 3);
        for (i, m) in lines.iter().enumerate() {
            let f = |k: &str| m[k].as_f64().unwrap_or_else(|| panic!("merge {merge}, step {}: no {k}", i + 1));
            assert!(f("rollout/logprob_diff_max") < 1e-3, "merge {merge}, step {}: {m}", i + 1);
            assert!(f("actor/ppo_kl").abs() < 1e-5, "merge {merge}, step {}: {m}", i + 1);
            assert_eq!(f("actor/pg_clipfrac"), 0.0, "merge {merge}, step {}", i + 1);
        }
        assert!(lines[0]["actor/kl"].as_f64().unwrap().abs() < 1e-6, "the reference is the actor as RL began");
        assert!(
            lines[2]["actor/kl"].as_f64().unwrap() > 1e-6,
            "merge {merge}: the updates moved the policy: {}",
            lines[2]
        );
    }
}

#[test]
fn sft_full_trains_every_weight_then_rl_trains_adapters_over_the_saved_base() {
    let dir = tempfile::tempdir().unwrap();
    let extra = format!("{LORA}[sft]\nsteps = 2\nepisodes_per_step = 2\nlr = 1e-3\nfull = true\n");
    let cfg = parse(&config("gae", &extra), &["schedule.steps=2", "optim.actor_lr=1e-3"]).unwrap();
    let seed = cfg.schedule.seed;
    let mut t = Trainer::new(cfg, dir.path()).unwrap();
    t.run().unwrap();

    // SFT moved every weight; the model it left is the base, frozen through RL.
    let drawn = vagen_model::default_model(seed, LoadOptions::default()).unwrap().vs.variables();
    let base_dir = dir.path().join("base");
    let base = vagen_model::Model::load(&base_dir, LoadOptions::default()).unwrap().vs.variables();
    let actor = t.actor.vs.variables();
    let weight = "model.layers.0.mlp.down_proj.weight";
    assert!(!base[weight].equal(&drawn[weight]), "SFT trained the base weights");
    for (name, v) in &base {
        assert!(actor[name].equal(v), "{name}: RL leaves the fine-tuned base as it was");
    }
    assert!(actor.iter().any(|(n, v)| n.contains(".lora_B.") && v.abs().max().double_value(&[]) > 0.0));
    let weight = "model.layers.0.self_attn.q_proj.weight";
    assert_eq!(t.critic().unwrap().vs.variables()[weight].data_ptr(), actor[weight].data_ptr(), "one base");

    // SFT's checkpoint holds the whole model, RL's an adapter naming the base.
    let sft = dir.path().join("checkpoints/sft-000002/actor");
    assert!(sft.join("config.json").is_file() && !sft.join("adapter_config.json").exists());
    let rl = dir.path().join("checkpoints/step-000002");
    let adapter: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(rl.join("actor/adapter_config.json")).unwrap()).unwrap();
    let named = std::path::absolute(&base_dir).unwrap();
    assert_eq!(adapter["base_model_name_or_path"], named.display().to_string());
    let moments = safetensors(&rl.join("actor_optim.safetensors"));
    assert!(moments.keys().all(|k| k == "step" || k.contains(".lora_")), "optimiser state only for adapters");
    let source: vagen_model::ModelSource = rl.join("actor").to_str().unwrap().parse().unwrap();
    let loaded = source.load(0, LoadOptions::default()).unwrap();
    for (name, v) in loaded.vs.variables() {
        assert!(actor[&name].equal(&v), "{name}: `--model CHECKPOINT` loads the run's actor");
    }
}

#[test]
fn an_sft_full_run_resumes_exactly_from_sft_and_from_rl() {
    let extra = format!("{LORA}[sft]\nsteps = 2\nepisodes_per_step = 2\nlr = 1e-3\nfull = true\n");
    let text = config("gae", &extra);
    let (whole, cut) = common::whole_and_resumed(&text, |_| {});
    let equal = ["train/reward", "rollout/response_length"];
    let close = ["actor/pg_loss", "critic/vf_loss", "actor/entropy"];
    common::assert_same_step(whole.path(), cut.path(), 2, &equal, &close);
    // Stopped as SFT ended (its checkpoint is the whole model; base/ written or not).
    let at_sft = tempfile::tempdir().unwrap();
    Trainer::new(parse(&text, &["schedule.steps=0"]).unwrap(), at_sft.path()).unwrap().run().unwrap();
    std::fs::remove_dir_all(at_sft.path().join("base")).unwrap();
    let mut resumed = Trainer::resume(at_sft.path(), &["schedule.steps=2".into()]).unwrap();
    assert_eq!((resumed.state.step, resumed.state.sft_steps_done), (0, 2));
    resumed.run().unwrap();
    common::assert_same_step(whole.path(), at_sft.path(), 2, &equal, &close);
}

#[test]
fn lora_settings_are_refused_before_any_work_naming_the_field() {
    let cases = [
        (config("gae", LORA), vec!["critic.init=\"seed\""], "critic.init"),
        (config("grpo", ""), vec!["engine.merge_lora=true"], "engine.merge_lora"),
        (config("grpo", LORA), vec!["model.lora.alpha=-1"], "model.lora"),
        (config("grpo", LORA), vec!["model.lora.dropout=1.5"], "lora.dropout"),
        (config("grpo", LORA), vec!["model.lora.rank=4"], "rank"),
        (config("grpo", LORA), vec!["model.lora.target_modules=\"q.*\""], "all-linear"),
        (config("grpo", ""), vec!["sft.steps=2", "sft.full=true"], "sft.full"),
        (config("grpo", LORA), vec!["sft.full=true"], "sft.full"),
    ];
    for (text, overrides, says) in cases {
        let e = parse(&text, &overrides).unwrap_err();
        assert!(e.contains(says), "{overrides:?}: {e}");
    }
    let cfg = parse(&config("grpo", LORA), &["model.lora.target_modules=[\"qproj\"]"]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let e = format!("{:#}", Trainer::new(cfg, dir.path()).err().unwrap());
    assert!(e.contains("model.lora") && e.contains("\"qproj\" names no linear layer"), "{e}");
}
