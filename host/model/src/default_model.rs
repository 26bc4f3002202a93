//! The embedded default: a small Qwen2-shaped model and a tokenizer with the chat special
//! tokens, built from a seed with no download, through the same loader as real checkpoints.

use crate::checkpoint::Parts;
use crate::{ChatTemplate, LoadOptions, Model, Qwen2Config, Result, Tokenizer};
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use std::collections::HashMap;
use std::path::Path;
use tch::Tensor;

/// Byte-level BPE in Qwen2's layout, trained on env-style text by
/// `host/model/reference/make_fixtures.py`; `<|endoftext|>`, `<|im_start|>`, `<|im_end|>`.
const TOKENIZER: &[u8] = include_bytes!("../assets/tokenizer.json");
/// Its `tokenizer_config.json`, with Qwen2.5's chat template.
const TOKENIZER_CONFIG: &str = include_str!("../assets/tokenizer_config.json");

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
    random_model(default_config(), seed, options)
}

/// A model of any Qwen2 shape with weights drawn from `seed` and the embedded tokenizer
/// (for benchmarks of big shapes without downloading them).
pub fn random_model(config: Qwen2Config, seed: u64, options: LoadOptions) -> Result<Model> {
    let tokenizer = Tokenizer::from_bytes(TOKENIZER)?;
    let tokenizer_config: serde_json::Value =
        serde_json::from_str(TOKENIZER_CONFIG).expect("the embedded tokenizer config is JSON");
    let chat = ChatTemplate::from_tokenizer_config(&tokenizer_config)?;
    let tensors = initial_weights(&config, seed);
    let parts = Parts { config, vl: None, tokenizer, tokenizer_config, generation_config: None, chat };
    Model::assemble(parts, &tensors, Path::new("<default>"), options)
}

pub(crate) fn initial_weights(c: &Qwen2Config, seed: u64) -> HashMap<String, Tensor> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let std = c.raw.get("initializer_range").and_then(|v| v.as_f64()).unwrap_or(0.02);
    let mut normal = |shape: &[usize]| {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n).map(|_| (gaussian(&mut rng) * std) as f32).collect();
        Tensor::from_slice(&data).view(shape.iter().map(|&d| d as i64).collect::<Vec<_>>().as_slice())
    };
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

/// Standard normal by Box–Muller: portable, unlike libtorch's generator across devices.
fn gaussian(rng: &mut ChaCha8Rng) -> f64 {
    let u1 = ((rng.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    let u2 = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}
