//! The embedded default: a small Qwen2-shaped model and a tokenizer with the chat special
//! tokens, built from a seed with no download, through the same loader as real checkpoints.

use crate::checkpoint::Parts;
use crate::sampling::gaussian;
use crate::{ChatTemplate, ImageProcessor, LoadOptions, Model, Qwen2Config, Qwen2VlConfig, Result, Tokenizer};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::collections::HashMap;
use std::path::Path;
use tch::Tensor;

/// Byte-level BPE in Qwen2's layout, trained on env-style text by
/// `host/model/reference/make_fixtures.py`; `<|endoftext|>`, `<|im_start|>`, `<|im_end|>`.
const TOKENIZER: &[u8] = include_bytes!("../assets/tokenizer.json");
/// Its `tokenizer_config.json`, with Qwen2.5's chat template.
const TOKENIZER_CONFIG: &str = include_str!("../assets/tokenizer_config.json");

/// Qwen2.5-VL's chat template (images as `<|vision_start|><|image_pad|><|vision_end|>`).
const VL_CHAT_TEMPLATE: &str = include_str!("../assets/vl_chat_template.jinja");
/// Qwen2-VL's vision special tokens, added after the embedded tokenizer's own.
const VISION_TOKENS: [&str; 4] = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"];

pub const DEFAULT_SEED: u64 = 0;

/// Hidden size 256, 4 layers, 4 query / 2 key-value heads, tied head: Qwen2.5-0.5B's shape,
/// shrunk so a training step runs in well under a second on a CPU. `rope_theta` is 10⁴
/// (Qwen2.5: 10⁶): prompts here are short, and faster-turning rotary pairs give a model
/// trained from scratch more position detail within them.
pub fn default_config() -> Qwen2Config {
    let json = serde_json::json!({
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "vocab_size": 1024,
        "hidden_size": 256,
        "intermediate_size": 704,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": true,
        "hidden_act": "silu",
        "initializer_range": 0.02,
        "bos_token_id": 818,
        "eos_token_id": 820,
        "use_sliding_window": false,
        "attention_dropout": 0.0,
    });
    Qwen2Config::from_json(&json.to_string()).expect("the default config is valid")
}

/// The default model with weights drawn from `seed`: N(0, 0.02) matrices (HF's
/// `initializer_range`), zero biases, unit norms. Same seed, same weights, on any machine.
pub fn default_model(seed: u64, options: LoadOptions) -> Result<Model> {
    let mut model = random_model(default_config(), seed, options)?;
    model.name_or_path = format!("default@{seed}");
    Ok(model)
}

/// A model of any Qwen2 shape with weights drawn from `seed` and the embedded tokenizer
/// (for benchmarks of big shapes without downloading them).
pub fn random_model(config: Qwen2Config, seed: u64, options: LoadOptions) -> Result<Model> {
    let tensors = initial_weights(&config, seed);
    Model::assemble(text_parts(config)?, &tensors, Path::new("<default>"), options)
}

/// The default model's language model with a small Qwen2.5-VL vision tower (hidden 128,
/// 4 blocks of which 1 and 3 attend fully, windows of 4 × 4 merged units) and the vision
/// special tokens; images up to 224 × 224 pixels (64 tokens each) by default.
pub fn default_vl_config() -> Qwen2VlConfig {
    let tokenizer = vl_tokenizer().expect("the embedded tokenizer loads");
    let id = |t: &str| tokenizer.token_to_id(t).expect("vision tokens were added");
    let text = default_config();
    let mut text_json = text.raw.clone();
    let m = text_json.as_object_mut().expect("an object");
    m.shift_remove("architectures");
    m.insert("model_type".into(), "qwen2_5_vl_text".into());
    m.insert("rope_parameters".into(), serde_json::json!({ "rope_type": "default", "type": "mrope", "mrope_section": [8, 12, 12], "rope_theta": text.rope_theta }));
    m.shift_remove("rope_theta");
    let json = serde_json::json!({
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "model_type": "qwen2_5_vl",
        "text_config": text_json,
        "vision_config": {
            "model_type": "qwen2_5_vl_vision",
            "depth": 4,
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_heads": 4,
            "in_channels": 3,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 112,
            "out_hidden_size": text.hidden_size,
            "fullatt_block_indexes": [1, 3],
            "hidden_act": "silu",
            "initializer_range": 0.02,
            "tokens_per_second": 4,
        },
        "image_token_id": id("<|image_pad|>"),
        "video_token_id": id("<|video_pad|>"),
        "vision_start_token_id": id("<|vision_start|>"),
        "vision_end_token_id": id("<|vision_end|>"),
        "tie_word_embeddings": text.tie_word_embeddings,
    });
    Qwen2VlConfig::from_json(&json.to_string()).expect("the default VL config is valid")
}

/// The default VL model with weights drawn from `seed` (its language model equals
/// [`default_model`]'s for the same seed).
pub fn default_vl_model(seed: u64, options: LoadOptions) -> Result<Model> {
    let processor = ImageProcessor { min_pixels: 28 * 28, max_pixels: 224 * 224, ..Default::default() };
    let config = default_vl_config();
    let mut tensors = initial_weights(&config.text, seed);
    tensors.extend(initial_vision_weights(&config, seed));
    let mut model = Model::assemble(vl_parts(config, processor)?, &tensors, Path::new("<default-vl>"), options)?;
    model.name_or_path = format!("default-vl@{seed}");
    Ok(model)
}

/// A Qwen2.5-VL model of any shape with the embedded tokenizer (and its vision tokens) and
/// weights drawn from `seed` straight into the parameters: N(0, 0.02) matrices, zero
/// biases, unit norms. For benchmarks of big shapes without downloading them.
/// A model of any Qwen2 shape, or Qwen2.5-VL shape with `vl`, for benchmarks: N(0, 0.02)
/// matrices drawn in place by libtorch's generator on the model's own device, zero biases,
/// unit norms, the embedded tokenizer. Seconds for billions of parameters, where
/// [`random_model`]'s portable stream takes minutes (24 s for 0.5 B); the weights differ
/// from one device to another, so figures, not results, come from it.
pub fn benchmark_model(
    config: Qwen2Config,
    vl: Option<Qwen2VlConfig>,
    seed: u64,
    options: LoadOptions,
) -> Result<Model> {
    let parts = match vl {
        Some(vl) => vl_parts(vl, ImageProcessor::default())?,
        None => text_parts(config)?,
    };
    Model::assemble_with(
        parts,
        options,
        |_| Ok(()),
        HashMap::new(),
        |vs| {
            let _guard = tch::no_grad_guard();
            tch::manual_seed(seed as i64);
            let mut vars: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
            vars.sort_by(|a, b| a.0.cmp(&b.0));
            for (name, mut var) in vars {
                if name.ends_with(".bias") {
                    let _ = var.f_zero_()?;
                } else if name.contains("norm") || name.contains("ln_q") {
                    let _ = var.f_fill_(1.0)?;
                } else {
                    let _ = var.f_normal_(0.0, 0.02)?;
                }
            }
            Ok(())
        },
    )
}

/// The embedded models' chat template (Qwen2.5's), for texts rendered before a model is
/// built (the tokenizer the embedded model learns from an env's and a data file's texts).
pub fn embedded_chat_template() -> ChatTemplate {
    let config: serde_json::Value =
        serde_json::from_str(TOKENIZER_CONFIG).expect("the embedded tokenizer config is JSON");
    ChatTemplate::from_tokenizer_config(&config).ok().flatten().expect("the embedded tokenizer config has a template")
}

pub(crate) fn text_tokenizer() -> Result<Tokenizer> {
    Tokenizer::from_bytes(TOKENIZER)
}

fn text_parts(config: Qwen2Config) -> Result<Parts> {
    let tokenizer = text_tokenizer()?;
    let tokenizer_config: serde_json::Value =
        serde_json::from_str(TOKENIZER_CONFIG).expect("the embedded tokenizer config is JSON");
    let chat = ChatTemplate::from_tokenizer_config(&tokenizer_config)?;
    Ok(Parts { config, vl: None, tokenizer, tokenizer_config, generation_config: None, chat })
}

fn vl_parts(config: Qwen2VlConfig, processor: ImageProcessor) -> Result<Parts> {
    let tokenizer = vl_tokenizer()?;
    let mut tokenizer_config: serde_json::Value =
        serde_json::from_str(TOKENIZER_CONFIG).expect("the embedded tokenizer config is JSON");
    tokenizer_config["chat_template"] = VL_CHAT_TEMPLATE.into();
    let chat = ChatTemplate::from_tokenizer_config(&tokenizer_config)?;
    Ok(Parts {
        config: config.text.clone(),
        vl: Some((config, processor)),
        tokenizer,
        tokenizer_config,
        generation_config: None,
        chat,
    })
}

pub(crate) fn vl_tokenizer() -> Result<Tokenizer> {
    let mut tokenizer = Tokenizer::from_bytes(TOKENIZER)?;
    tokenizer.add_special_tokens(&VISION_TOKENS);
    Ok(tokenizer)
}

/// `visual.*` drawn from its own stream (seed + 1), so the language model's weights are the
/// text default's.
fn initial_vision_weights(c: &Qwen2VlConfig, seed: u64) -> HashMap<String, Tensor> {
    let v = &c.vision;
    let mut normal = normal_sampler(
        seed.wrapping_add(1),
        c.raw.pointer("/vision_config/initializer_range").and_then(|x| x.as_f64()).unwrap_or(0.02),
    );
    let zeros = |n: usize| Tensor::zeros([n as i64], tch::kind::FLOAT_CPU);
    let ones = |n: usize| Tensor::ones([n as i64], tch::kind::FLOAT_CPU);
    let (h, i) = (v.hidden_size, v.intermediate_size);
    let unit = h * v.spatial_merge_size * v.spatial_merge_size;
    let mut w = HashMap::new();
    w.insert(
        "visual.patch_embed.proj.weight".to_string(),
        normal(&[h, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size]),
    );
    for l in 0..v.depth {
        let p = format!("visual.blocks.{l}");
        for (name, out, inp) in [
            ("attn.qkv", 3 * h, h),
            ("attn.proj", h, h),
            ("mlp.gate_proj", i, h),
            ("mlp.up_proj", i, h),
            ("mlp.down_proj", h, i),
        ] {
            w.insert(format!("{p}.{name}.weight"), normal(&[out, inp]));
            w.insert(format!("{p}.{name}.bias"), zeros(out));
        }
        w.insert(format!("{p}.norm1.weight"), ones(h));
        w.insert(format!("{p}.norm2.weight"), ones(h));
    }
    w.insert("visual.merger.ln_q.weight".into(), ones(h));
    w.insert("visual.merger.mlp.0.weight".into(), normal(&[unit, unit]));
    w.insert("visual.merger.mlp.0.bias".into(), zeros(unit));
    w.insert("visual.merger.mlp.2.weight".into(), normal(&[v.out_hidden_size, unit]));
    w.insert("visual.merger.mlp.2.bias".into(), zeros(v.out_hidden_size));
    w
}

/// N(0, std²) tensors of any shape from one seeded stream.
fn normal_sampler(seed: u64, std: f64) -> impl FnMut(&[usize]) -> Tensor {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    move |shape: &[usize]| {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n).map(|_| (gaussian(&mut rng) * std) as f32).collect();
        Tensor::from_slice(&data).view(shape.iter().map(|&d| d as i64).collect::<Vec<_>>().as_slice())
    }
}

pub(crate) fn initial_weights(c: &Qwen2Config, seed: u64) -> HashMap<String, Tensor> {
    let std = c.raw.get("initializer_range").and_then(|v| v.as_f64()).unwrap_or(0.02);
    let mut normal = normal_sampler(seed, std);
    let (h, i, d) = (c.hidden_size, c.intermediate_size, c.head_dim);
    let (q, kv) = (c.num_attention_heads * d, c.num_key_value_heads * d);
    let mut w = HashMap::new();
    w.insert("model.embed_tokens.weight".to_string(), normal(&[c.vocab_size, h]));
    for l in 0..c.num_hidden_layers {
        let p = format!("model.layers.{l}");
        for (name, out, inp) in [("q_proj", q, h), ("k_proj", kv, h), ("v_proj", kv, h), ("o_proj", h, q)] {
            w.insert(format!("{p}.self_attn.{name}.weight"), normal(&[out, inp]));
            if name != "o_proj" {
                w.insert(format!("{p}.self_attn.{name}.bias"), Tensor::zeros([out as i64], tch::kind::FLOAT_CPU));
            }
        }
        for (name, out, inp) in [("gate_proj", i, h), ("up_proj", i, h), ("down_proj", h, i)] {
            w.insert(format!("{p}.mlp.{name}.weight"), normal(&[out, inp]));
        }
        for norm in ["input_layernorm", "post_attention_layernorm"] {
            w.insert(format!("{p}.{norm}.weight"), Tensor::ones([h as i64], tch::kind::FLOAT_CPU));
        }
    }
    w.insert("model.norm.weight".to_string(), Tensor::ones([h as i64], tch::kind::FLOAT_CPU));
    if !c.tie_word_embeddings {
        w.insert("lm_head.weight".to_string(), normal(&[c.vocab_size, h]));
    }
    w
}
