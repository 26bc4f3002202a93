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

/// `Model::load` in a thread, failing the test (not hanging it) when it does not return.
fn load_error_within(dir: &std::path::Path, seconds: u64) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    let dir = dir.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(Model::load(&dir, LoadOptions::default()).err().map(|e| e.to_string()));
    });
    let outcome = rx.recv_timeout(std::time::Duration::from_secs(seconds)).expect("the load did not return");
    outcome.expect("the load should fail")
}

fn shard_index(dir: &std::path::Path, shard: &str) {
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    let index = serde_json::json!({ "weight_map": { "model.embed_tokens.weight": shard } });
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
}

/// Issue 41: a shard index naming `../../dev/zero`, `/etc/shadow` or a FIFO was opened (and
/// `/dev/zero` read to 4.5 GB, the FIFO waited forever); `tokenizer.json` linked to
/// `/dev/zero` read to 8.7 GB; a huge one loaded whole; `vocab_size` 2^40 panicked in
/// libtorch; a huge dimension beside a zero in a safetensors header printed a C++ backtrace.
#[test]
fn model_folder_files_are_read_within_bounds() {
    for shard in ["../../dev/zero", "/etc/shadow"] {
        let dir = broken(|d| shard_index(d, shard));
        let err = load_error_within(dir.path(), 20);
        assert!(err.contains("not a plain relative name inside the model folder"), "{shard}: {err}");
    }
    let fifo = broken(|d| {
        shard_index(d, "shard.safetensors");
        let path = std::ffi::CString::new(d.join("shard.safetensors").to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    });
    assert!(load_error_within(fifo.path(), 20).contains("not a regular file (a FIFO)"));

    let zero = broken(|d| {
        std::fs::remove_file(d.join("tokenizer.json")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", d.join("tokenizer.json")).unwrap();
    });
    let err = load_error_within(zero.path(), 20);
    assert!(err.contains("a link to /dev/zero, outside the model folder"), "{err}");
    let huge = broken(|d| {
        // Sparse: 65 MiB on paper, nothing on disk.
        std::fs::OpenOptions::new().write(true).open(d.join("tokenizer.json")).unwrap().set_len(65 << 20).unwrap();
    });
    let err = load_error_within(huge.path(), 20);
    assert!(err.contains("tokenizer.json: larger than the cap of 64 MiB"), "{err}");

    let vocab = broken(|d| edit_config(d, "vocab_size", (1u64 << 40).into()));
    let err = load_error(vocab.path());
    assert!(err.contains("vocab_size 1099511627776 is out of range"), "{err}");
    // Within every bound but not what the tensors hold: refused before anything is built.
    let layers = broken(|d| edit_config(d, "num_hidden_layers", 900.into()));
    let err = load_error(layers.path());
    assert!(err.contains("tensor model.layers.2.self_attn.q_proj.weight is missing"), "{err}");
    let wide = broken(|d| edit_config(d, "intermediate_size", 200_000.into()));
    let err = load_error(wide.path());
    assert!(err.contains("mlp.gate_proj.weight has shape") && err.contains("intermediate_size"), "{err}");

    let header =
        br#"{"model.embed_tokens.weight":{"dtype":"F32","shape":[9223372036854775808,0],"data_offsets":[0,0]}}"#;
    let negative = broken(|d| {
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header);
        std::fs::write(d.join("model.safetensors"), bytes).unwrap();
    });
    let err = load_error(negative.path());
    assert!(err.contains("dimension 9223372036854775808 is out of range"), "{err}");
    assert!(!err.contains("frame #"), "{err}");

    let spin = broken(|d| {
        let spin = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
        std::fs::write(d.join("chat_template.jinja"), spin).unwrap();
    });
    let model = Model::load(spin.path(), LoadOptions::default()).unwrap();
    let hi = [vagen_model::Message::user("hi")];
    let err = model.chat.as_ref().unwrap().render(&hi, true).unwrap_err();
    assert!(err.to_string().contains("fuel"), "{err}");
}
