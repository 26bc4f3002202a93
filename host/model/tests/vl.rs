//! Qwen2.5-VL against transformers' outputs recorded by `reference/make_vl_fixtures.py`:
//! image processor, chat template with images, M-RoPE positions, logits, greedy decoding.

mod common;

use common::*;
use tch::Tensor;
use vagen_model::{GenerateOptions, Image, LoadOptions, Message, Model, Prompt};

const MODELS: [&str; 2] = ["tiny-qwen2-vl-a", "tiny-qwen2-vl-b"];

fn vl_tensors() -> Vec<(String, Tensor)> {
    Tensor::read_safetensors(fixtures().join("vl-expected.safetensors")).unwrap()
}

fn tensor(all: &[(String, Tensor)], name: &str) -> Tensor {
    all.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no {name}")).1.shallow_clone()
}

fn prompts(model: &Model) -> Vec<Prompt> {
    vl_expected()["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let (messages, images) = prompt_inputs(p);
            model.encode_chat_images(&messages, &images, true).unwrap()
        })
        .collect()
}

#[test]
fn pixel_values_match_transformers() {
    let e = vl_expected();
    let all = vl_tensors();
    let model = load(MODELS[0]);
    let processor = &model.vision().unwrap().processor;
    for (name, info) in e["images"].as_object().unwrap() {
        let got = processor.process(&image(name)).unwrap();
        let grid: Vec<usize> =
            info["grid_thw"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
        assert_eq!(got.grid.to_vec(), grid, "image {name}: image_grid_thw");
        let want = tensor(&all, &format!("pixels.{name}"));
        let pil = tensor(&all, &format!("pixels_pil.{name}"));
        assert_eq!(got.values.size(), want.size(), "image {name}");
        let diff = (&got.values - &want).abs().max().double_value(&[]);
        let pil_diff = (&got.values - &pil).abs().max().double_value(&[]);
        let resized = grid[1] * 14 != info["height"].as_u64().unwrap() as usize
            || grid[2] * 14 != info["width"].as_u64().unwrap() as usize;
        eprintln!("image {name} (resized: {resized}): max |ours - torchvision| {diff:e}, |ours - PIL| {pil_diff:e}");
        // The same libtorch kernels as transformers' torchvision backend: identical, resized
        // or not (PIL's bicubic differs by a few 8-bit levels on resized images).
        assert_eq!(diff, 0.0, "image {name}: pixel_values differ from transformers' by {diff:e}");
    }
}

#[test]
fn prompts_render_and_expand_like_the_processor() {
    let e = vl_expected();
    let model = load(MODELS[0]);
    let template = model.chat_template().unwrap();
    for (p, got) in e["prompts"].as_array().unwrap().iter().zip(prompts(&model)) {
        let (messages, _) = prompt_inputs(p);
        assert_eq!(template.render_with_images(&messages, true).unwrap(), p["text"].as_str().unwrap());
        assert_eq!(got.ids, ids(&p["input_ids"]), "{messages:?}");
        if let Some(want) = p.get("positions") {
            let vision = model.vision().unwrap();
            let pos = vision.positions(&got.ids, &got.grids()).unwrap();
            for axis in 0..3 {
                let col: Vec<i64> = pos.positions.iter().map(|x| x[axis]).collect();
                let want: Vec<i64> = want[axis].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
                assert_eq!(col, want, "axis {axis} of {messages:?}");
            }
            assert_eq!(pos.delta, p["delta"].as_i64().unwrap());
        }
    }
}

#[test]
fn logits_match_transformers_in_f32() {
    let all = vl_tensors();
    for name in MODELS {
        let model = load(name);
        let vision = model.vision().unwrap();
        for (i, prompt) in prompts(&model).iter().enumerate() {
            let _g = tch::no_grad_guard();
            let (logits, _) = vision.logits(&model.lm, &[prompt]).unwrap();
            let want = tensor(&all, &format!("{name}.logits.{i}"));
            let got = logits.squeeze_dim(0);
            assert_eq!(got.size(), want.size());
            let err = relative_error(&got, &want);
            eprintln!("{name} prompt {i} ({} images): relative error {err:e}", prompt.images.len());
            assert!(err <= 1e-4, "{name} prompt {i}: relative error {err:e}");
        }
    }
}

#[test]
fn greedy_continuations_are_identical_alone_and_left_padded() {
    let e = vl_expected();
    let options = GenerateOptions { max_new_tokens: 10, temperature: 0.0, ..Default::default() };
    for name in MODELS {
        let model = load(name);
        let prompts = prompts(&model);
        for (i, p) in prompts.iter().enumerate() {
            let one = Prompt { ids: p.ids.clone(), images: p.images.clone() };
            let got = model.generate_vl(&[one], &options).unwrap();
            assert_eq!(got[0].token_ids, ids(&e["greedy"][name][i]), "{name} prompt {i}");
        }
        let batched = model.generate_vl(&prompts, &options).unwrap();
        for (i, g) in batched.iter().enumerate() {
            assert_eq!(g.token_ids, ids(&e["greedy_batched"][name][i]), "{name} batched prompt {i}");
        }
    }
}

#[test]
fn generation_logprobs_equal_a_training_forward_with_images() {
    let model = load(MODELS[0]);
    let vision = model.vision().unwrap();
    let prompts = prompts(&model);
    let options = GenerateOptions { max_new_tokens: 8, temperature: 1.0, seed: 5, ..Default::default() };
    let generations = model.generate_vl(&prompts, &options).unwrap();
    let sequences: Vec<Prompt> = prompts
        .iter()
        .zip(&generations)
        .map(|(p, g)| Prompt { ids: p.ids.iter().chain(&g.token_ids).copied().collect(), images: p.images.clone() })
        .collect();
    let scored = vagen_model::sequence_logprobs_vl(&model.lm, vision, &sequences, 1.0).unwrap();
    for ((p, g), s) in prompts.iter().zip(&generations).zip(&scored) {
        let tail = &s[p.ids.len() - 1..];
        assert_eq!(tail.len(), g.logprobs.len());
        for (a, b) in tail.iter().zip(&g.logprobs) {
            assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "training forward {a} vs generation {b}");
        }
    }
}

/// A model whose head favours the image placeholder still never writes it: the next
/// prompt would read it as an image. Generation and the training forward agree on that.
#[test]
fn generation_never_writes_an_image_placeholder_even_where_the_head_favours_it() {
    let model = vagen_model::default_vl_model(3, LoadOptions::default()).unwrap();
    let vision = model.vision().unwrap();
    let pad = vision.config.image_token_id as i64;
    let prompt = || Prompt::text(model.encode_chat(&[Message::user("Where now?")], true).unwrap());
    let greedy = GenerateOptions { max_new_tokens: 1, temperature: 0.0, ..Default::default() };
    let first = model.generate_vl(&[prompt()], &greedy).unwrap()[0].token_ids[0] as i64;
    // The (tied) head's rows of that token and of the placeholder swapped: unsuppressed, the
    // placeholder is now the most likely next token.
    tch::no_grad(|| {
        let vars = model.vs.variables();
        let w = &vars["model.embed_tokens.weight"];
        let (a, b) = (w.get(first).copy(), w.get(pad).copy());
        w.get(first).copy_(&b);
        w.get(pad).copy_(&a);
    });
    let p = prompt();
    let (logits, _) = tch::no_grad(|| vision.logits(&model.lm, &[&p]).unwrap());
    assert_eq!(logits.get(0).get(p.ids.len() as i64 - 1).argmax(-1, false).int64_value(&[]), pad);
    let options = GenerateOptions { max_new_tokens: 4, temperature: 1.0, seed: 1, ..Default::default() };
    for o in [greedy, options] {
        let g = model.generate_vl(&[prompt()], &o).unwrap().remove(0);
        assert!(g.token_ids.iter().all(|t| !vision.placeholder_tokens().contains(t)), "{:?}", g.token_ids);
        let seq = Prompt::text(p.ids.iter().chain(&g.token_ids).copied().collect());
        let scored = vagen_model::sequence_logprobs_vl(&model.lm, vision, &[seq], o.temperature.max(1.0)).unwrap();
        let tail = &scored[0][p.ids.len() - 1..];
        for (a, b) in tail.iter().zip(&g.logprobs) {
            assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "training forward {a} vs generation {b}");
        }
    }
}

#[test]
fn gradients_reach_the_vision_tower_unless_frozen() {
    let mut model = load(MODELS[1]);
    let prompt = prompts(&model).remove(1);
    let vision_grad = |model: &Model| {
        let (logits, _) = model.vision().unwrap().logits(&model.lm, &[&prompt]).unwrap();
        logits.sum(tch::Kind::Float).backward();
        let vars = model.vs.variables();
        let w = &vars["visual.patch_embed.proj.weight"];
        let g = w.grad();
        let defined = g.defined() && g.abs().sum(tch::Kind::Float).double_value(&[]) > 0.0;
        for (_, v) in vars {
            let mut g = v.grad();
            if g.defined() {
                let _ = g.zero_();
            }
        }
        defined
    };
    assert!(vision_grad(&model), "the vision tower gets gradients by default");
    model.set_vision_trainable(false);
    assert!(!vision_grad(&model), "a frozen vision tower gets none");
}

#[test]
fn bad_input_gets_an_error_naming_it() {
    let model = load(MODELS[0]);
    let two_markers = [Message::user("<image> and <image>?")];
    let err = model.encode_chat_images(&two_markers, &[image("a")], true).unwrap_err().to_string();
    assert!(err.contains("2 image placeholder") && err.contains("1 image"), "{err}");
    // 28 x 2000 stays above max_pixels after smart_resize's floor to 28.
    let thin = Image { width: 2000, height: 28, rgb: vec![0; 2000 * 28 * 3] };
    let err = model.encode_chat_images(&[Message::user("<image>")], &[thin], true).unwrap_err().to_string();
    assert!(err.contains("image 0") && err.contains("max_pixels"), "{err}");
    let short = Image { width: 4, height: 4, rgb: vec![0; 10] };
    let err = model.encode_chat_images(&[Message::user("<image>")], &[short], true).unwrap_err().to_string();
    assert!(err.contains("RGB8"), "{err}");
    let text_model = load("tiny-qwen2");
    let err = text_model.encode_chat_images(&[Message::user("<image>")], &[image("a")], true).unwrap_err();
    assert!(err.to_string().contains("text-only"), "{err}");

    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join(MODELS[0]).join("config.json")).unwrap())
            .unwrap();
    for (path, value, needle) in [
        ("/vision_config/hidden_act", serde_json::json!("gelu"), "hidden_act"),
        ("/vision_config/window_size", serde_json::json!(50), "window_size"),
        ("/text_config/rope_parameters/mrope_section", serde_json::json!([2, 2, 2]), "mrope_section"),
        ("/text_config/use_sliding_window", serde_json::json!(true), "sliding"),
        ("/vision_config/fullatt_block_indexes", serde_json::json!([9]), "fullatt_block_indexes"),
    ] {
        let mut c = config.clone();
        *c.pointer_mut(path).unwrap() = value;
        let err = vagen_model::Qwen2VlConfig::from_json(&c.to_string()).unwrap_err();
        assert!(err.contains(needle), "{path}: {err}");
    }
}

#[test]
fn transformers_4_configs_load_too() {
    // transformers 4 wrote the text fields at the top level and `rope_scaling.type = mrope`.
    let v5: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join(MODELS[0]).join("config.json")).unwrap())
            .unwrap();
    let mut v4 = v5.clone();
    let text = v4.as_object_mut().unwrap().remove("text_config").unwrap();
    for (k, v) in text.as_object().unwrap() {
        if k != "rope_parameters" && k != "model_type" {
            v4[k] = v.clone();
        }
    }
    v4["rope_scaling"] = serde_json::json!({"type": "mrope", "mrope_section": [2, 3, 3]});
    v4["rope_theta"] = text["rope_parameters"]["rope_theta"].clone();
    let a = vagen_model::Qwen2VlConfig::from_json(&v5.to_string()).unwrap();
    let b = vagen_model::Qwen2VlConfig::from_json(&v4.to_string()).unwrap();
    assert_eq!(a.vision, b.vision);
    assert_eq!(a.text.mrope_section, b.text.mrope_section);
    assert_eq!((a.text.rope_theta, a.text.num_key_value_heads), (b.text.rope_theta, b.text.num_key_value_heads));
    assert_eq!(a.text.tie_word_embeddings, b.text.tie_word_embeddings);
}

#[test]
fn a_saved_vl_checkpoint_reloads_in_transformers_with_identical_logits() {
    let model = Model::load(&fixtures().join(MODELS[1]), LoadOptions::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    model.save(dir.path()).unwrap();
    let again = Model::load(dir.path(), LoadOptions::default()).unwrap();
    let e = vl_expected();
    let prompt = &e["prompts"][2];
    let (messages, images) = prompt_inputs(prompt);
    let ours = again.encode_chat_images(&messages, &images, true).unwrap();
    let (logits, _) = {
        let _g = tch::no_grad_guard();
        again.vision().unwrap().logits(&again.lm, &[&ours]).unwrap()
    };
    let theirs = transformers_vl_logits(dir.path(), prompt);
    // transformers computes exactly what it computes from its own checkpoint: every weight,
    // the processor settings and the template came back unchanged. Both on this machine: the
    // stored fixture logits came from another CPU, whose kernels differ in the last digits.
    let original = transformers_vl_logits(&fixtures().join(MODELS[1]), prompt);
    assert_eq!((&theirs - &original).abs().max().double_value(&[]), 0.0, "transformers' logits changed");
    let err = relative_error(&logits.squeeze_dim(0), &theirs);
    eprintln!("saved VL checkpoint reloaded by transformers: relative error {err:e}");
    assert!(err <= 1e-4, "relative error {err:e}");
}

/// transformers' logits for one fixture prompt from a saved folder (its own processor).
fn transformers_vl_logits(dir: &std::path::Path, prompt: &serde_json::Value) -> Tensor {
    let v = reference("reload_vl.py", &[dir.as_os_str(), fixtures().as_os_str()], &prompt.to_string());
    assert_eq!(v["class"], "Qwen2_5_VLForConditionalGeneration");
    rows(&v["logits"])
}

#[test]
fn the_default_vl_model_is_seeded_and_saves_as_a_folder_transformers_loads() {
    let model = Model::from_spec("default-vl", LoadOptions::default()).unwrap();
    let text = Model::from_spec("default", LoadOptions::default()).unwrap();
    let (vl_vars, text_vars) = (model.vs.variables(), text.vs.variables());
    let name = "model.layers.0.self_attn.q_proj.weight";
    assert!(vl_vars[name].equal(&text_vars[name]), "the language model is the text default's");
    let e = vl_expected();
    let prompt = &e["prompts"][1];
    let (messages, images) = prompt_inputs(prompt);
    let encoded = model.encode_chat_images(&messages, &images, true).unwrap();
    assert_eq!(encoded.images.len(), 1);
    let options = GenerateOptions { max_new_tokens: 6, temperature: 1.0, seed: 9, ..Default::default() };
    let first = model.generate_vl(&[encoded], &options).unwrap();
    let again = Model::from_spec("default-vl", LoadOptions::default()).unwrap();
    let encoded = again.encode_chat_images(&messages, &images, true).unwrap();
    assert_eq!(again.generate_vl(&[encoded], &options).unwrap(), first, "same seed, same model, same tokens");

    let dir = tempfile::tempdir().unwrap();
    model.save(dir.path()).unwrap();
    let ours = model.encode_chat_images(&messages, &images, true).unwrap();
    let logits = {
        let _g = tch::no_grad_guard();
        model.vision().unwrap().logits(&model.lm, &[&ours]).unwrap().0
    };
    let theirs = transformers_vl_logits(dir.path(), prompt);
    let err = relative_error(&logits.squeeze_dim(0), &theirs);
    assert!(err <= 1e-4, "default-vl reloaded by transformers: relative error {err:e}");
}

#[test]
fn a_transformers_4_folder_with_chat_template_json_loads() {
    // transformers 4 saved the VL template as chat_template.json and the pixel bounds in
    // preprocessor_config.json.
    let dir = tempfile::tempdir().unwrap();
    let src = fixtures().join(MODELS[0]);
    for f in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    let template = std::fs::read_to_string(src.join("chat_template.jinja")).unwrap();
    std::fs::write(dir.path().join("chat_template.json"), serde_json::json!({ "chat_template": template }).to_string())
        .unwrap();
    let processor: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("processor_config.json")).unwrap()).unwrap();
    let mut pre = processor["image_processor"].clone();
    pre["min_pixels"] = pre["size"]["shortest_edge"].clone();
    pre["max_pixels"] = pre["size"]["longest_edge"].clone();
    pre.as_object_mut().unwrap().remove("size");
    std::fs::write(dir.path().join("preprocessor_config.json"), pre.to_string()).unwrap();
    let model = Model::load(dir.path(), LoadOptions::default()).unwrap();
    let reference = load(MODELS[0]);
    assert_eq!(model.vision().unwrap().processor, reference.vision().unwrap().processor);
    assert_eq!(prompts(&model)[2].ids, prompts(&reference)[2].ids);
}

#[test]
fn bf16_and_f16_stay_close_to_f32_with_images() {
    let f32_model = load(MODELS[0]);
    let prompt = prompts(&f32_model).remove(2);
    let _g = tch::no_grad_guard();
    let reference = f32_model.vision().unwrap().logits(&f32_model.lm, &[&prompt]).unwrap().0;
    // The fixture's weights are N(0, 0.5): rounding grows layer by layer. transformers' own
    // bf16 / f16 logits for this prompt are 0.170 / 0.032 from its f32 ones.
    for (dtype, tolerance) in [(vagen_model::DType::Bf16, 0.2), (vagen_model::DType::F16, 0.05)] {
        let options = LoadOptions { dtype, ..Default::default() };
        let model = Model::load(&fixtures().join(MODELS[0]), options).unwrap();
        let logits = model.vision().unwrap().logits(&model.lm, &[&prompt]).unwrap().0;
        let err = relative_error(&logits, &reference);
        eprintln!("{dtype:?} with images: relative error {err:e}");
        assert!(err <= tolerance, "{dtype:?}: relative error {err:e}");
    }
}
