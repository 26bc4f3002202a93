//! The critic's first weights: the actor's trunk as RL begins (verl) unless
//! `critic.init = "seed"`; a resumed run reloads the critic it trained instead.

mod common;

use common::{config, parse};
use std::collections::HashMap;
use std::path::Path;
use tch::Tensor;
use vagen_trainer::Trainer;

fn tiny_qwen2() -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../model/tests/fixtures/tiny-qwen2");
    dir.to_str().unwrap().to_string()
}

/// The decoder's tensors (`model.*`), by name.
fn trunk(vars: HashMap<String, Tensor>) -> HashMap<String, Tensor> {
    vars.into_iter().filter(|(name, _)| name.starts_with("model.")).collect()
}

/// Names of trunk tensors that differ between the critic and the actor; both must have
/// the same names.
fn differing(t: &Trainer) -> Vec<String> {
    let critic = trunk(t.critic().expect("a critic-based estimator").vs.variables());
    let actor = trunk(t.actor.vs.variables());
    let mut names: Vec<&String> = critic.keys().collect();
    names.sort();
    let mut actor_names: Vec<&String> = actor.keys().collect();
    actor_names.sort();
    assert_eq!(names, actor_names, "the critic's trunk is the actor's transformer, name for name");
    names.into_iter().filter(|n| !critic[*n].equal(&actor[*n])).cloned().collect()
}

/// A fresh value head: every weight and bias 0, so every value starts at 0.
fn assert_fresh_head(t: &Trainer) {
    let vars = t.critic().unwrap().vs.variables();
    for name in ["score.weight", "score.bias"] {
        assert_eq!(vars[name].abs().sum(tch::Kind::Float).double_value(&[]), 0.0, "{name}");
    }
}

#[test]
fn an_actor_critic_is_a_copy_of_the_actor_as_rl_begins() {
    for model in ["default".to_string(), tiny_qwen2()] {
        let dir = tempfile::tempdir().unwrap();
        let path = format!("model.path={model:?}");
        // Seed 3: the default actor is drawn from it, so a critic drawn from any other seed
        // differs. SFT moves the actor before RL begins.
        let overrides = [path.as_str(), "schedule.seed=3", "sft.steps=2", "sft.episodes_per_step=2", "sft.lr=1e-2"];
        let mut t = Trainer::new(parse(&config("gae", ""), &overrides).unwrap(), dir.path()).unwrap();
        assert_eq!(differing(&t), Vec::<String>::new(), "{model}: at the start");
        assert_fresh_head(&t);
        let before = t.actor.vs.variables()["model.norm.weight"].copy();
        t.sft().unwrap();
        assert!(!before.equal(&t.actor.vs.variables()["model.norm.weight"]), "{model}: SFT moved the actor");
        assert_eq!(differing(&t), Vec::<String>::new(), "{model}: after SFT");
        assert_fresh_head(&t);
    }
}

#[test]
fn a_seed_critic_shares_no_weights_with_the_actor() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = parse(&config("gae", "[critic]\ninit = \"seed\""), &[]).unwrap();
    let t = Trainer::new(cfg, dir.path()).unwrap();
    let differ = differing(&t);
    // Every drawn matrix differs; norm weights (1) and biases (0) are constants in both.
    let drawn = trunk(t.actor.vs.variables()).keys().filter(|n| n.ends_with("weight") && !n.contains("norm")).count();
    assert_eq!(differ.len(), drawn, "{differ:?}");
    assert_fresh_head(&t);
    assert!(parse(&config("gae", "[critic]\ninit = \"policy\""), &[]).unwrap_err().contains("policy"));
}

#[test]
fn a_resumed_run_reloads_its_trained_critic_rather_than_copying_the_actor() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = parse(&config("gae", ""), &["schedule.steps=1", "optim.critic_lr=1e-2"]).unwrap();
    Trainer::new(cfg, dir.path()).unwrap().run().unwrap();
    let saved = Tensor::read_safetensors(dir.path().join("checkpoints/step-000001/critic/model.safetensors")).unwrap();
    let saved: HashMap<String, Tensor> = saved.into_iter().collect();
    // SFT added on resumption moves the actor again; the critic RL trained stays as saved.
    let overrides = ["schedule.steps=2".to_string(), "sft.steps=1".into(), "sft.episodes_per_step=2".into()];
    let mut t = Trainer::resume(dir.path(), &overrides).unwrap();
    t.sft().unwrap();
    assert!(!differing(&t).is_empty(), "the trained critic is not the actor");
    for (name, v) in t.critic().unwrap().vs.variables() {
        assert!(v.equal(&saved[&name]), "{name} is not the saved critic's");
    }
}
