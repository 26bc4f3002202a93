//! Saving in the HF layout (transformers reloads it with identical outputs), loading errors
//! that name the problem, reduced precision, the critic.

mod common;

use common::*;
use tch::{Kind, Tensor};
use vagen_model::{DType, LoadOptions, Model, ValueModel};

fn probe_ids(model: &Model) -> Vec<Vec<u32>> {
    vec![model.tokenizer.encode("You moved Left. The box is stuck.").unwrap(), vec![1, 2, 3]]
}

#[test]
fn a_saved_default_model_reloads_in_transformers_with_identical_logits() {
    let model = Model::from_spec("default", LoadOptions::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    model.save(dir.path()).unwrap();
    let ids = probe_ids(&model);
    let (theirs, class) = transformers_outputs(dir.path(), "causal", &ids);
    assert_eq!(class, "Qwen2ForCausalLM");
    for (seq, t) in ids.iter().zip(&theirs) {
        let err = relative_error(&logits(&model, seq), t);
        assert!(err <= 1e-5, "relative error {err:e}");
    }
    // And it reloads here, template and tokenizer included.
    let again = Model::load(dir.path(), LoadOptions::default()).unwrap();
    assert_eq!(relative_error(&logits(&again, &ids[0]), &logits(&model, &ids[0])), 0.0);
    assert_eq!(again.chat_template().unwrap().source(), model.chat_template().unwrap().source());
    assert_eq!(again.eos_token_ids, model.eos_token_ids);
}

#[test]
fn a_resaved_sharded_checkpoint_stays_identical_for_transformers() {
    let model = load("tiny-qwen2");
    let dir = tempfile::tempdir().unwrap();
    model.save(dir.path()).unwrap();
    let ids = probe_ids(&model);
    let (theirs, _) = transformers_outputs(dir.path(), "causal", &ids);
    for (seq, t) in ids.iter().zip(&theirs) {
        assert!(relative_error(&logits(&model, seq), t) <= 1e-5);
    }
}

#[test]
fn a_critic_from_the_policy_checkpoint_saves_as_token_classification() {
    let critic =
        ValueModel::from_spec(fixtures().join("tiny-qwen2").to_str().unwrap(), LoadOptions::default()).unwrap();
    let ids = Tensor::from_slice(&[5i64, 6, 7, 8]).unsqueeze(0);
    let pos = Tensor::arange(4, tch::kind::INT64_CPU).unsqueeze(0);
    let values = critic.forward(&ids, &pos, None).unwrap();
    assert_eq!(values.size(), [1, 4]);
    assert_eq!(values.abs().sum(Kind::Float).double_value(&[]), 0.0, "a fresh head predicts 0");
    // Give the head weights, save, and compare with transformers.
    {
        let _g = tch::no_grad_guard();
        for (name, mut t) in critic.vs.variables() {
            if name.starts_with("score.") {
                t.copy_(&(Tensor::randn(t.size(), tch::kind::FLOAT_CPU) * 0.1));
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    critic.save(dir.path()).unwrap();
    let seqs = vec![vec![5u32, 6, 7, 8], vec![100, 200]];
    let (theirs, class) = transformers_outputs(dir.path(), "critic", &seqs);
    assert_eq!(class, "Qwen2ForTokenClassification");
    for (seq, t) in seqs.iter().zip(&theirs) {
        let ids = Tensor::from_slice(&seq.iter().map(|&x| x as i64).collect::<Vec<_>>()).unsqueeze(0);
        let pos = Tensor::arange(seq.len() as i64, tch::kind::INT64_CPU).unsqueeze(0);
        let ours = tch::no_grad(|| critic.forward(&ids, &pos, None).unwrap()).squeeze_dim(0);
        let err = relative_error(&ours, &t.squeeze_dim(-1));
        assert!(err <= 1e-5, "critic relative error {err:e}");
    }
    // A saved critic reloads with its head.
    let again = ValueModel::from_spec(dir.path().to_str().unwrap(), LoadOptions::default()).unwrap();
    let v = tch::no_grad(|| again.forward(&ids, &pos, None).unwrap());
    assert!(v.abs().sum(Kind::Float).double_value(&[]) > 0.0);
}

#[test]
fn reduced_precision_stays_close_to_f32() {
    let e = common::expected();
    let seq = ids(&e["ids"][1]);
    let f32_logits = logits(&load("tiny-qwen2"), &seq);
    for (dtype, tolerance) in [(DType::Bf16, 0.1), (DType::F16, 0.02)] {
        let model = Model::load(&fixtures().join("tiny-qwen2"), LoadOptions { dtype, ..Default::default() }).unwrap();
        assert_eq!(model.lm.model.kind(), dtype.kind());
        let err = relative_error(&logits(&model, &seq), &f32_logits);
        assert!(err <= tolerance, "{dtype:?}: relative error {err}");
    }
}

/// A copy of a fixture folder with one file changed by `edit`.
fn broken(edit: impl FnOnce(&std::path::Path)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixtures().join("tiny-qwen2-tied")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    edit(dir.path());
    dir
}

fn load_error(dir: &std::path::Path) -> String {
    Model::load(dir, LoadOptions::default()).err().expect("the load should fail").to_string()
}

fn edit_config(dir: &std::path::Path, key: &str, value: serde_json::Value) {
    let path = dir.join("config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config[key] = value;
    std::fs::write(path, config.to_string()).unwrap();
}

#[test]
fn broken_checkpoints_are_refused_with_the_reason() {
    let missing = broken(|d| std::fs::remove_file(d.join("model.safetensors")).unwrap());
    assert!(load_error(missing.path()).contains("neither model.safetensors nor"));

    let llama = broken(|d| edit_config(d, "model_type", "llama".into()));
    assert!(load_error(llama.path()).contains("model_type \"llama\""));

    let wider = broken(|d| edit_config(d, "hidden_size", 128.into()));
    let err = load_error(wider.path());
    assert!(err.contains("has shape") && err.contains("model.embed_tokens.weight"), "{err}");

    let untied = broken(|d| edit_config(d, "tie_word_embeddings", false.into()));
    assert!(load_error(untied.path()).contains("tensor lm_head.weight is missing"));

    let small_vocab = broken(|d| edit_config(d, "vocab_size", 512.into()));
    let err = load_error(small_vocab.path());
    assert!(err.contains("the tokenizer has") && err.contains("vocab_size is 512"), "{err}");

    let garbage = broken(|d| std::fs::write(d.join("model.safetensors"), b"not safetensors").unwrap());
    assert!(load_error(garbage.path()).contains("model.safetensors"));

    let bad_json = broken(|d| std::fs::write(d.join("config.json"), "{").unwrap());
    assert!(load_error(bad_json.path()).contains("config.json: not a valid config"));

    let yarn = broken(|d| edit_config(d, "rope_scaling", serde_json::json!({"rope_type": "yarn", "factor": 4.0})));
    assert!(load_error(yarn.path()).contains("rope type \"yarn\""));

    assert!(load_error(std::path::Path::new("/nonexistent/model")).contains("no such model folder"));
}
