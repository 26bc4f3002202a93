//! LoRA: fresh adapters leave the outputs as they were and train alone; adapters save and
//! load in PEFT's layout (peft itself loads ours and we load peft's with the same logits,
//! merges agree); a critic and a KL reference sit on the actor's frozen base.

mod common;

use common::*;
use std::path::Path;
use tch::{Kind, Tensor};
use vagen_model::{LoadOptions, LoraConfig, Model, ModelSource, Targets, ValueModel};

fn config(r: usize, alpha: f64, targets: Targets) -> LoraConfig {
    LoraConfig { r: r.try_into().unwrap(), alpha, target_modules: targets, ..LoraConfig::default() }
}

fn names(list: &[&str]) -> Targets {
    Targets::Names(list.iter().map(|s| s.to_string()).collect())
}

/// Every B drawn at random, so the adapters change the outputs; whole modules that train
/// (`modules_to_save`) moved too.
fn randomise(model: &Model, seed: i64) {
    let _g = tch::no_grad_guard();
    tch::manual_seed(seed);
    for (name, mut t) in model.vs.variables() {
        if name.contains(".lora_B.") {
            t.copy_(&(Tensor::randn_like(&t) * 0.1));
        } else if t.requires_grad() && !name.contains(".lora_") {
            t.copy_(&(&t + Tensor::randn_like(&t) * 0.1));
        }
    }
}

fn probe(model: &Model) -> Vec<Vec<u32>> {
    ["<|im_start|>user\nmove left<|im_end|>", "the box is at (2, 3); go up"]
        .iter()
        .map(|t| model.tokenizer.encode(t).unwrap())
        .collect()
}

fn peft(args: &[&str], stdin: &str) -> serde_json::Value {
    reference("peft_parity.py", args, stdin)
}

/// peft's logits for our probe sequences, base + adapter folder.
fn peft_logits(base: &Path, adapter: &Path, ids: &[Vec<u32>]) -> Vec<Tensor> {
    let input = serde_json::json!({ "ids": ids }).to_string();
    let out = peft(&["logits", base.to_str().unwrap(), adapter.to_str().unwrap()], &input);
    out["outputs"].as_array().unwrap().iter().map(rows).collect()
}

#[test]
fn fresh_adapters_leave_the_outputs_unchanged_and_alone_receive_gradients() {
    let mut model = load("tiny-qwen2");
    let seq = &probe(&model)[0];
    let before = logits(&model, seq);
    let layers = model.config().num_hidden_layers;
    assert_eq!(model.attach_lora(&LoraConfig::default(), 3).unwrap(), 2 * layers, "q_proj and v_proj");
    assert!(logits(&model, seq).equal(&before), "B starts at zero");
    let trainable = model.trainable();
    assert_eq!(trainable.len(), 4 * layers);
    assert!(trainable.keys().all(|n| n.contains(".lora_A.") || n.contains(".lora_B.")), "{:?}", trainable.keys());

    randomise(&model, 1);
    let ids = Tensor::from_slice(&seq.iter().map(|&t| t as i64).collect::<Vec<_>>()).unsqueeze(0);
    let pos = Tensor::arange(seq.len() as i64, tch::kind::INT64_CPU).unsqueeze(0);
    model.lm.forward(&ids, &pos, None, None).unwrap().square().sum(Kind::Float).backward();
    let vars = model.vs.variables();
    assert!(!vars["model.layers.0.mlp.up_proj.weight"].grad().defined(), "the base is frozen");
    assert!(vars["model.layers.0.self_attn.q_proj.lora_A.weight"].grad().defined());
    assert!(vars["model.layers.1.self_attn.v_proj.lora_B.weight"].grad().defined());

    let mut other = load("tiny-qwen2");
    let e = other.attach_lora(&config(4, 8.0, names(&["q_proj", "qproj"])), 0).unwrap_err().to_string();
    assert!(e.contains("\"qproj\" names no linear layer"), "{e}");
}

#[test]
fn a_fresh_adapters_gradient_is_the_full_weights_gradient_projected_on_it() {
    // y = W x + s B A x with B = 0: dL/dB = s (dL/dW) Aᵀ and dL/dA = 0, for any loss. An
    // adapter path that is detached, scaled twice or fed the wrong input breaks it.
    let full = load("tiny-qwen2");
    let seq = &probe(&full)[1];
    let ids = Tensor::from_slice(&seq.iter().map(|&t| t as i64).collect::<Vec<_>>()).unsqueeze(0);
    let pos = Tensor::arange(seq.len() as i64, tch::kind::INT64_CPU).unsqueeze(0);
    let loss = |m: &Model| {
        m.lm.forward(&ids, &pos, None, None).unwrap().log_softmax(-1, Kind::Float).select(2, 5).sum(Kind::Float)
    };
    loss(&full).backward();
    let mut lora = load("tiny-qwen2");
    let cfg = config(4, 16.0, Targets::AllLinear);
    lora.attach_lora(&cfg, 7).unwrap();
    loss(&lora).backward();
    let (theirs, ours) = (full.vs.variables(), lora.vs.variables());
    let mut checked = 0;
    for (name, w) in &theirs {
        let Some(layer) = name.strip_suffix(".weight") else { continue };
        let Some(b) = ours.get(&format!("{layer}.lora_B.weight")) else { continue };
        let a = &ours[&format!("{layer}.lora_A.weight")];
        let projected = w.grad().matmul(&a.tr()) * cfg.scale();
        let err = (b.grad() - &projected).abs().max().double_value(&[]);
        let size = projected.abs().max().double_value(&[]);
        assert!(size > 0.0 && err <= 1e-4 * size, "{layer}: |dL/dB - s dL/dW Aᵀ| = {err:e} of {size:e}");
        assert_eq!(a.grad().abs().max().double_value(&[]), 0.0, "{layer}: B = 0 gives A no gradient");
        checked += 1;
    }
    assert_eq!(checked, 7 * full.config().num_hidden_layers, "every linear layer of the decoder");
}

#[test]
fn an_adapter_we_save_loads_in_peft_with_the_same_logits_and_back_here_exactly() {
    let base = fixtures().join("tiny-qwen2");
    let mut model = load("tiny-qwen2");
    // PEFT's rule: `norm` is every norm, the last and each layer's two.
    let lora = LoraConfig { modules_to_save: vec!["norm".into()], ..config(4, 8.0, Targets::AllLinear) };
    model.attach_lora(&lora, 5).unwrap();
    let trained = model.trainable();
    assert!(trained.contains_key("model.norm.weight") && trained.contains_key("model.layers.1.input_layernorm.weight"));
    randomise(&model, 2);
    let dir = tempfile::tempdir().unwrap();
    model.save(dir.path()).unwrap();
    assert!(vagen_model::is_adapter_folder(dir.path()));
    let ids = probe(&model);
    for (seq, theirs) in ids.iter().zip(peft_logits(&base, dir.path(), &ids)) {
        let err = relative_error(&logits(&model, seq), &theirs);
        assert!(err <= 1e-4, "peft's logits: relative error {err:e}");
    }
    // The folder names its base, so it loads alone.
    let source: ModelSource = dir.path().to_str().unwrap().parse().unwrap();
    let again = source.load(0, LoadOptions::default()).unwrap();
    assert_eq!(again.lora(), model.lora());
    assert!(logits(&again, &ids[0]).equal(&logits(&model, &ids[0])));
}

#[test]
fn an_adapter_peft_saves_loads_here_with_the_same_logits_and_merges_as_peft_merges() {
    let base = fixtures().join("tiny-qwen2");
    let dir = tempfile::tempdir().unwrap();
    let spec = serde_json::json!({
        "r": 6, "alpha": 12, "target_modules": ["q_proj", "o_proj", "up_proj", "down_proj"], "rslora": true,
        "modules_to_save": ["model.norm"],
    });
    peft(&["make", base.to_str().unwrap(), dir.path().to_str().unwrap(), "7"], &spec.to_string());
    let source = ModelSource::Folder(base.clone());
    let model = source.load_with_adapter(dir.path(), 0, LoadOptions::default()).unwrap();
    let lora = model.lora().unwrap();
    assert_eq!((lora.r.get(), lora.rslora), (6, true));
    let ids = probe(&model);
    for (seq, theirs) in ids.iter().zip(peft_logits(&base, dir.path(), &ids)) {
        let err = relative_error(&logits(&model, seq), &theirs);
        assert!(err <= 1e-4, "peft's adapter here: relative error {err:e}");
    }

    assert!(model.trainable().contains_key("model.norm.weight"));
    let merged_dir = tempfile::tempdir().unwrap();
    peft(&["merge", base.to_str().unwrap(), dir.path().to_str().unwrap(), merged_dir.path().to_str().unwrap()], "");
    let theirs: std::collections::HashMap<String, Tensor> =
        Tensor::read_safetensors(merged_dir.path().join("merged.safetensors")).unwrap().into_iter().collect();
    let ours = model.merged_weights();
    assert_eq!(ours.len(), 4 * model.config().num_hidden_layers + 1, "the adapted layers and the last norm");
    for (name, w) in &ours {
        let err = (w - &theirs[name]).abs().max().double_value(&[]);
        assert!(err <= 1e-5, "{name}: merged weights differ by {err:e}");
    }
    let merged = model.merged().unwrap();
    assert!(merged.lora().is_none() && merged.trainable().len() == merged.vs.variables().len());
    let err = relative_error(&logits(&merged, &ids[0]), &logits(&model, &ids[0]));
    assert!(err <= 1e-5, "merged against unmerged: {err:e}");
}

#[test]
fn a_vl_adapter_over_every_linear_layer_matches_peft_with_images() {
    let base = fixtures().join("tiny-qwen2-vl-a");
    let mut model = load("tiny-qwen2-vl-a");
    let adapted = model.attach_lora(&config(4, 16.0, Targets::AllLinear), 9).unwrap();
    let vars = model.vs.variables();
    assert!(vars.contains_key("visual.blocks.0.attn.qkv.lora_A.weight"), "all-linear adapts the vision tower");
    assert!(vars.contains_key("visual.merger.mlp.2.lora_B.weight"));
    assert!(!vars.keys().any(|n| n.starts_with("lm_head.lora")), "never the LM head");
    assert!(adapted > 7 * model.config().num_hidden_layers);
    randomise(&model, 3);
    let dir = tempfile::tempdir().unwrap();
    model.save(dir.path()).unwrap();
    let prompt = &vl_expected()["prompts"][1];
    let (messages, images) = prompt_inputs(prompt);
    assert!(!images.is_empty());
    let ours = model.encode_chat_images(&messages, &images, true).unwrap();
    let logits = {
        let _g = tch::no_grad_guard();
        model.vision().unwrap().logits(&model.lm, &[&ours]).unwrap().0.squeeze_dim(0)
    };
    let fixtures = fixtures();
    let args = ["logits-vl", base.to_str().unwrap(), dir.path().to_str().unwrap(), fixtures.to_str().unwrap()];
    let theirs = rows(&peft(&args, &prompt.to_string())["logits"]);
    let err = relative_error(&logits, &theirs);
    assert!(err <= 1e-4, "peft's VL logits: relative error {err:e}");
}

#[test]
fn a_critic_and_a_reference_share_the_actors_frozen_base() {
    let mut actor = Model::from_spec("default", LoadOptions::default()).unwrap();
    let lora = LoraConfig { modules_to_save: vec!["model.norm".into()], ..config(8, 16.0, Targets::AllLinear) };
    actor.attach_lora(&lora, 1).unwrap();
    randomise(&actor, 4);
    let critic = ValueModel::from_policy(&actor).unwrap();
    let weight = "model.layers.2.mlp.down_proj.weight";
    let (a, c) = (actor.vs.variables(), critic.vs.variables());
    assert_eq!(a[weight].data_ptr(), c[weight].data_ptr(), "the same tensor, not a copy");
    let norm = "model.norm.weight";
    assert_ne!(a[norm].data_ptr(), c[norm].data_ptr(), "a module trained whole is the critic's own");
    assert!(a[norm].equal(&c[norm]) && critic.trainable().contains_key(norm));
    let adapter = "model.layers.2.mlp.down_proj.lora_B.weight";
    assert_ne!(a[adapter].data_ptr(), c[adapter].data_ptr(), "its own adapter");
    assert!(a[adapter].equal(&c[adapter]), "starting from the actor's");
    let trainable = critic.trainable();
    assert!(trainable.contains_key("score.weight") && !trainable.contains_key(weight));

    let dir = tempfile::tempdir().unwrap();
    critic.save(dir.path()).unwrap();
    let again = ValueModel::load_sharing(&actor, dir.path()).unwrap();
    let seq = &probe(&actor)[1];
    let ids = Tensor::from_slice(&seq.iter().map(|&t| t as i64).collect::<Vec<_>>()).unsqueeze(0);
    let pos = Tensor::arange(seq.len() as i64, tch::kind::INT64_CPU).unsqueeze(0);
    let _g = tch::no_grad_guard();
    assert!(again.forward(&ids, &pos, None).unwrap().equal(&critic.forward(&ids, &pos, None).unwrap()));

    actor.save(dir.path()).unwrap();
    let mut reference = actor.sharing_base().unwrap();
    reference.load_adapter(dir.path()).unwrap();
    assert_eq!(reference.vs.variables()[weight].data_ptr(), a[weight].data_ptr());
    assert_ne!(reference.vs.variables()[norm].data_ptr(), a[norm].data_ptr());
    assert!(logits(&reference, seq).equal(&logits(&actor, seq)));
}

#[test]
fn a_merged_copy_follows_the_adapters_after_a_refresh() {
    let mut actor = Model::from_spec("default", LoadOptions::default()).unwrap();
    actor.attach_lora(&LoraConfig::default(), 0).unwrap();
    let merged = actor.merged().unwrap();
    let seq = &probe(&actor)[0];
    assert!(logits(&merged, seq).allclose(&logits(&actor, seq), 1e-6, 1e-6, false));
    randomise(&actor, 5);
    assert!(!logits(&merged, seq).allclose(&logits(&actor, seq), 1e-4, 1e-4, false), "stale until refreshed");
    actor.refresh_merged(&merged).unwrap();
    let err = relative_error(&logits(&merged, seq), &logits(&actor, seq));
    assert!(err <= 1e-5, "refreshed: {err:e}");
}

#[test]
fn unmerged_generation_logprobs_equal_a_training_forward_through_the_adapters() {
    use vagen_model::{Engine, EngineOptions, EngineRequest, GenerateOptions, sequence_logprobs};
    let mut model = load("tiny-qwen2");
    model.attach_lora(&config(8, 16.0, Targets::AllLinear), 2).unwrap();
    randomise(&model, 6);
    let prompts = probe(&model);
    let options = GenerateOptions { max_new_tokens: 16, temperature: 0.9, seed: 4, ..Default::default() };
    let plain = model.generate(&prompts, &options).unwrap();
    let requests: Vec<EngineRequest> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| EngineRequest {
            key: i as u64,
            ids: p.clone(),
            images: vec![],
            max_new_tokens: 16,
            seed: i as u64,
            adapter: 0,
        })
        .collect();
    let engine = model.generate_with(&mut Engine::new(EngineOptions::default()), &requests, &options).unwrap();
    for generations in [plain, engine] {
        let full: Vec<Vec<u32>> =
            prompts.iter().zip(&generations).map(|(p, g)| [&p[..], &g.token_ids].concat()).collect();
        let scored = sequence_logprobs(&model.lm, &full, options.temperature).unwrap();
        for ((p, g), s) in prompts.iter().zip(&generations).zip(&scored) {
            assert!(!g.token_ids.is_empty());
            // Relative: under load libtorch may split a product over fewer threads, so sums
            // of f32 change order (seen once at 1.2e-4 on a log-prob of -1.44).
            for (a, b) in g.logprobs.iter().zip(&s[p.len() - 1..]) {
                assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "generation log-prob {a} vs forward {b}");
            }
        }
    }
}

#[test]
fn two_served_adapters_and_the_base_answer_in_one_batch_as_each_would_alone() {
    use vagen_model::{Engine, EngineOptions, EngineRequest, GenerateOptions};
    let save = |seed: i64, lora: LoraConfig| {
        let mut m = load("tiny-qwen2");
        m.attach_lora(&lora, seed as u64).unwrap();
        randomise(&m, seed);
        let dir = tempfile::tempdir().unwrap();
        m.save(dir.path()).unwrap();
        dir
    };
    let adapters =
        [save(11, config(4, 8.0, Targets::AllLinear)), save(12, config(8, 4.0, names(&["q_proj", "down_proj"])))];
    let mut served = load("tiny-qwen2");
    for (i, dir) in adapters.iter().enumerate() {
        assert_eq!(served.add_served_adapter(dir.path()).unwrap(), i + 1);
    }
    let prompts = probe(&served);
    // The same prompt for the base and the first adapter: no prefix is shared across them.
    let asked = [(0, &prompts[0]), (1, &prompts[0]), (2, &prompts[1]), (1, &prompts[1])];
    let request = |key: usize, adapter: usize, ids: &Vec<u32>| EngineRequest {
        key: key as u64,
        ids: ids.clone(),
        images: vec![],
        max_new_tokens: 12,
        seed: 40 + key as u64,
        adapter,
    };
    let options = GenerateOptions { max_new_tokens: 12, temperature: 1.0, ..Default::default() };
    let requests: Vec<EngineRequest> = asked.iter().enumerate().map(|(k, &(a, ids))| request(k, a, ids)).collect();
    let mut engine = Engine::new(EngineOptions::default());
    let mixed = served.generate_with(&mut engine, &requests, &options).unwrap();
    for (k, &(adapter, ids)) in asked.iter().enumerate() {
        let mut alone = load("tiny-qwen2");
        if adapter > 0 {
            alone.load_adapter(adapters[adapter - 1].path()).unwrap();
        }
        let want =
            alone.generate_with(&mut Engine::new(EngineOptions::default()), &[request(k, 0, ids)], &options).unwrap();
        assert_eq!(mixed[k].token_ids, want[0].token_ids, "request {k} (adapter {adapter})");
        for (a, b) in mixed[k].logprobs.iter().zip(&want[0].logprobs) {
            assert!((a - b).abs() <= 1e-4, "request {k}: {a} vs {b}");
        }
    }
    assert_ne!(mixed[0].token_ids, mixed[1].token_ids, "the adapter changes the answer to the same prompt");
    let e = served.generate_with(&mut engine, &[request(9, 3, &prompts[0])], &options).unwrap_err().to_string();
    assert!(e.contains("adapter 3 is not served"), "{e}");
}
