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

#[test]
fn lora_settings_are_refused_before_any_work_naming_the_field() {
    let cases = [
        (config("gae", LORA), vec!["critic.init=\"seed\""], "critic.init"),
        (config("grpo", ""), vec!["engine.merge_lora=true"], "engine.merge_lora"),
        (config("grpo", LORA), vec!["model.lora.alpha=-1"], "model.lora"),
        (config("grpo", LORA), vec!["model.lora.dropout=1.5"], "lora.dropout"),
        (config("grpo", LORA), vec!["model.lora.rank=4"], "rank"),
        (config("grpo", LORA), vec!["model.lora.target_modules=\"q.*\""], "all-linear"),
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
