//! Training a VL model on image observations: FrozenLake as pictures only, the embedded
//! default-vl model. The step's first epoch starts at ratio 1, generation's log-probs match
//! the training forward over the same image tokens, a resumed run continues exactly.

mod common;

use common::{config, parse, step_line};
use std::collections::BTreeMap;
use tch::Tensor;
use vagen_model::{DType, LoadOptions, Model};
use vagen_trainer::Trainer;

/// `config` with the lake as a 112-pixel picture (4 × 4 cells of 28 pixels: one merged
/// vision token each) and no text grid, for the default VL model.
fn vision_config(estimator: &str, extra: &str) -> String {
    config(estimator, extra)
        .replace("[model]", "[env.config]\nobservation = \"image\"\nimage_size = 112\n[model]\npath = \"default-vl\"")
}

fn visual_weights(dir: &std::path::Path) -> BTreeMap<String, Tensor> {
    let m = Model::load(dir, LoadOptions::default()).unwrap();
    m.vs.variables().into_iter().filter(|(n, _)| n.starts_with("visual.")).collect()
}

#[test]
fn a_vl_step_on_pictures_starts_at_ratio_one_and_generation_matches_the_training_forward() {
    let dir = tempfile::tempdir().unwrap();
    // Old log-probs from the training forward, to compare generation's with.
    let cfg = parse(&vision_config("bi-level-gae", ""), &["schedule.steps=1", "rollout.reuse_logprobs=false"]).unwrap();
    Trainer::new(cfg, dir.path()).unwrap().run().unwrap();
    let m = step_line(dir.path(), 1);
    let f = |k: &str| m[k].as_f64().unwrap_or_else(|| panic!("{k}: {m}"));
    assert_eq!(f("rollout/image_tokens"), 32.0, "two turns of 16 tokens per sequence: {m}");
    assert_eq!(f("actor/ppo_kl"), 0.0, "first epoch: new log-probs are the old ones exactly");
    assert_eq!(f("actor/pg_clipfrac"), 0.0);
    assert!(f("rollout/logprob_diff_max") <= 1e-4, "generation vs training forward: {}", f("rollout/logprob_diff_max"));
    assert!(f("critic/vf_loss").is_finite() && f("timing_s/vision_forward") > 0.0);
    // Checkpoints are VL folders transformers reads, the critic's too.
    let actor = dir.path().join("checkpoints/step-000001/actor");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(actor.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["model_type"], "qwen2_5_vl");
    assert!(actor.join("preprocessor_config.json").is_file());
    assert!(dir.path().join("checkpoints/step-000001/critic/preprocessor_config.json").is_file());
    // TensorBoard has the numbers and the held-out episodes' first pictures.
    assert!(common::assert_tensorboard_matches_metrics(dir.path()) > 20);
    let frames = &common::tensorboard(dir.path())["images"]["eval/first-frame"];
    assert_eq!(frames.as_array().map(Vec::len), Some(2), "before and after RL: {frames}");
    assert_eq!(frames[0][1], 112);
}

#[test]
fn a_resumed_vl_run_continues_exactly() {
    let (whole, cut) = common::whole_and_resumed(&vision_config("bi-level-gae", ""), |_| {});
    let equal = ["train/reward", "rollout/response_length", "rollout/image_tokens", "throughput/response_tokens"];
    common::assert_same_step(
        whole.path(),
        cut.path(),
        2,
        &equal,
        &["actor/pg_loss", "critic/vf_loss", "actor/entropy"],
    );
}

#[test]
fn sft_on_oracle_pictures_then_a_frozen_vision_tower_stays_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let extra = "[sft]\nsteps = 1\nepisodes_per_step = 2\nlr = 1e-3\n";
    let cfg = parse(&vision_config("grpo", extra), &["schedule.steps=1", "model.freeze_vision=true"]).unwrap();
    Trainer::new(cfg, dir.path()).unwrap().run().unwrap();
    let sft = vagen_trainer::read_metrics(dir.path()).unwrap();
    let loss = sft.iter().find_map(|m| m["sft/loss"].as_f64()).expect("an SFT line");
    assert!(loss.is_finite() && loss > 0.0, "{loss}");
    let initial = vagen_model::default_vl_model(0, LoadOptions::default()).unwrap();
    let (after_sft, after_rl) = (
        visual_weights(&dir.path().join("checkpoints/sft-000001/actor")),
        visual_weights(&dir.path().join("checkpoints/step-000001/actor")),
    );
    for (name, t) in initial.vs.variables().into_iter().filter(|(n, _)| n.starts_with("visual.")) {
        assert!(after_sft[&name].equal(&t) && after_rl[&name].equal(&t), "{name} moved while frozen");
    }
    // Unfrozen (the default, as VAGEN), SFT moves the tower.
    let free = tempfile::tempdir().unwrap();
    let cfg = parse(&vision_config("grpo", extra), &["schedule.steps=0"]).unwrap();
    Trainer::new(cfg, free.path()).unwrap().run().unwrap();
    let moved = visual_weights(&free.path().join("checkpoints/sft-000001/actor"));
    let initial: BTreeMap<String, Tensor> = initial.vs.variables().into_iter().collect();
    assert!(moved.iter().any(|(n, t)| !t.equal(&initial[n])), "SFT left the vision tower unchanged");
}

#[test]
fn vision_settings_on_a_text_model_and_impossible_image_budgets_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = parse(&config("grpo", ""), &["model.freeze_vision=true"]).unwrap();
    let err = Trainer::new(cfg, dir.path()).err().unwrap().to_string();
    assert!(err.contains("model.freeze_vision") && err.contains("no vision tower"), "{err}");
    // Each picture takes 16 tokens: a budget of 8 cannot hold the first observation.
    let dir = tempfile::tempdir().unwrap();
    let cfg = parse(&vision_config("grpo", ""), &["rollout.max_image_tokens=8"]).unwrap();
    let err = format!("{:#}", Trainer::new(cfg, dir.path()).unwrap().run().unwrap_err());
    assert!(err.contains("max_image_tokens 8"), "{err}");
    // Pixels below one merged patch per image.
    let dir = tempfile::tempdir().unwrap();
    let cfg = parse(&vision_config("grpo", ""), &["rollout.max_image_pixels=100"]).unwrap();
    let err = format!("{:#}", Trainer::new(cfg, dir.path()).err().unwrap());
    assert!(err.contains("rollout.max_image_pixels"), "{err}");
}

/// `examples/vagen/*.toml` as written, on a tiny random VL checkpoint and a small batch:
/// each starts and runs one step (the turn-aware bi-level variant its comment gives, too).
/// The presets' bf16 runs as written once, on one group: on a CPU without bf16 matrix units
/// a bf16 update is ~25x an f32 one (60 s against 2.4 s for two groups of this step), so
/// the other three run in f32.
#[test]
fn the_vagen_presets_run_a_step_on_a_tiny_vl_checkpoint() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let folder = tempfile::tempdir().unwrap();
    vagen_model::default_vl_model(7, LoadOptions::default()).unwrap().save(folder.path()).unwrap();
    let model = format!("model.path={:?}", folder.path().display().to_string());
    let f32 = ["model.dtype=\"f32\"", "env.groups=2"];
    let bi_level_bf16 =
        ["algorithm.advantage.estimator=\"bi-level-gae\"", "rollout.rewards=\"per-turn\"", "env.groups=1"];
    let rows = [
        ("frozenlake", &f32[..], DType::F32),
        ("sokoban", &f32, DType::F32),
        ("navigation", &f32, DType::F32),
        ("frozenlake", &bi_level_bf16, DType::Bf16),
    ];
    for (name, extra, dtype) in rows {
        let path = root.join(format!("examples/vagen/{name}.toml"));
        let text = std::fs::read_to_string(&path).unwrap();
        let plugin = format!("env.plugin={:?}", root.join(format!("target/plugins/{name}.wasm")).display().to_string());
        let mut overrides = vec![
            model.as_str(),
            plugin.as_str(),
            "env.val_episodes=2",
            "rollout.max_new_tokens=8",
            "schedule.steps=1",
            "schedule.eval_every=0",
        ];
        overrides.extend(extra);
        let cfg = parse(&text, &overrides).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(cfg.rollout.episodes.format, vagen_rollout::Format::GroundingWorldModeling);
        assert_eq!(cfg.model.dtype, dtype, "{name}");
        let dir = tempfile::tempdir().unwrap();
        Trainer::new(cfg, dir.path()).unwrap().run().unwrap_or_else(|e| panic!("{name} {extra:?}: {e:#}"));
        let m = step_line(dir.path(), 1);
        assert!(m["critic/vf_loss"].as_f64().unwrap().is_finite(), "{name}: {m}");
        assert!(m["rollout/image_tokens"].as_f64().unwrap() > 0.0, "{name}: {m}");
    }
}

/// `examples/vagen/primitive-skill.toml` parses as written, keeps VAGEN-Base's env settings,
/// and names a native plugin, which a config file alone cannot load.
#[test]
fn the_primitive_skill_preset_parses_and_needs_allow_native() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join("examples/vagen/primitive-skill.toml")).unwrap();
    let plugin = format!("env.plugin={:?}", root.join("target/plugins/primitive-skill.so").display().to_string());
    let cfg = parse(&text, &[&plugin]).unwrap();
    assert_eq!(cfg.env.config["task"].as_str(), Some("StackThreeCube"));
    assert_eq!(cfg.env.config["observation"].as_str(), Some("image"));
    assert_eq!((cfg.env.max_turns, cfg.env.group_size), (3, 2));
    assert_eq!(cfg.rollout.episodes.format, vagen_rollout::Format::GroundingWorldModeling);
    let dir = tempfile::tempdir().unwrap();
    let err = format!("{:#}", Trainer::new(cfg, dir.path()).err().expect("refused"));
    assert!(err.contains("allow-native"), "{err}");
}

/// The visual demo's config keeps its promise: default-vl, the picture as the only
/// observation (no text grid, no state description), one vision token per cell.
#[test]
fn the_visual_demo_sees_only_the_picture() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/frozenlake-vision-cpu.toml");
    let plugin = format!("env.plugin={:?}", common::plugin().display().to_string());
    let cfg = parse(&std::fs::read_to_string(path).unwrap(), &[&plugin]).unwrap();
    assert_eq!(cfg.model.path.to_string(), "default-vl");
    assert_eq!(cfg.env.config["observation"].as_str(), Some("image"));
    assert!(
        !cfg.rollout.episodes.describe_state && cfg.rollout.episodes.system_prompt.as_deref() == Some("FrozenLake.")
    );
    let (view, size) = (cfg.env.config["view"].as_str(), cfg.env.config["image_size"].as_integer());
    assert_eq!((view, size), (Some("centered"), Some(7 * 28)), "7×7 cells of 28 pixels");
}
