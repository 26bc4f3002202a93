use crate::Result;
use serde::Deserialize;
use serde_json::Value;

/// The fields of a Hugging Face Qwen2 `config.json` the forward pass needs. Other fields are
/// kept verbatim in `raw`, so a saved checkpoint carries them unchanged.
#[derive(Debug, Clone)]
pub struct Qwen2Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub max_position_embeddings: usize,
    pub rope_theta: f64,
    pub rms_norm_eps: f64,
    pub tie_word_embeddings: bool,
    /// End-of-sequence ids from the config (`eos_token_id` may be one id or a list).
    pub eos_token_ids: Vec<i64>,
    /// Qwen2.5-VL's M-RoPE: how many rotary frequency pairs take the temporal, height and
    /// width position (summing to `head_dim / 2`). `None` for the text family.
    pub mrope_section: Option<Vec<usize>>,
    pub raw: Value,
}

/// The JSON as written by transformers 4.x (`rope_theta`, `torch_dtype`) or 5.x
/// (`rope_parameters`, `dtype`).
#[derive(Deserialize)]
struct Raw {
    model_type: Option<String>,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    #[serde(default = "default_max_positions")]
    max_position_embeddings: usize,
    rope_theta: Option<f64>,
    rope_parameters: Option<RopeParameters>,
    rope_scaling: Option<RopeParameters>,
    #[serde(default = "default_eps")]
    rms_norm_eps: f64,
    #[serde(default)]
    tie_word_embeddings: bool,
    #[serde(default = "default_act")]
    hidden_act: String,
    #[serde(default)]
    use_sliding_window: bool,
    eos_token_id: Option<Value>,
}

#[derive(Deserialize)]
struct RopeParameters {
    rope_type: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    rope_theta: Option<f64>,
}

fn default_max_positions() -> usize {
    32768
}
fn default_eps() -> f64 {
    1e-6
}
fn default_act() -> String {
    "silu".into()
}

/// The largest vocabulary a config may declare (Gemma's 262k is the largest in use).
const MAX_VOCAB: usize = 1 << 22;

/// `value` within 1..=`max`, else an error naming the field: a dimension is checked before
/// anything is allocated from it.
pub(crate) fn in_range(name: &str, value: usize, max: usize) -> Result<(), String> {
    if (1..=max).contains(&value) {
        Ok(())
    } else {
        Err(format!("{name} {value} is out of range: expected 1 to {max}"))
    }
}

impl Qwen2Config {
    pub fn from_json(text: &str) -> Result<Self, String> {
        let raw: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let r: Raw = serde_json::from_value(raw.clone()).map_err(|e| e.to_string())?;
        if let Some(t) = r.model_type.as_deref()
            && t != "qwen2"
        {
            return Err(format!("model_type {t:?}: only the Qwen2 / Qwen2.5 text family (\"qwen2\") is supported"));
        }
        if r.hidden_act != "silu" {
            return Err(format!("hidden_act {:?}: only \"silu\" is supported", r.hidden_act));
        }
        if r.use_sliding_window {
            return Err("use_sliding_window = true: sliding-window attention is not supported".into());
        }
        for rope in [&r.rope_parameters, &r.rope_scaling].into_iter().flatten() {
            let kind = rope.rope_type.as_deref().or(rope.kind.as_deref()).unwrap_or("default");
            if kind != "default" {
                return Err(format!("rope type {kind:?}: only the default rotary embedding is supported"));
            }
        }
        for (name, value, max) in [
            ("vocab_size", r.vocab_size, MAX_VOCAB),
            ("hidden_size", r.hidden_size, 1 << 16),
            ("intermediate_size", r.intermediate_size, 1 << 18),
            ("num_hidden_layers", r.num_hidden_layers, 1024),
            ("num_attention_heads", r.num_attention_heads, 1024),
            ("head_dim", r.head_dim.unwrap_or(1), 1024),
            ("max_position_embeddings", r.max_position_embeddings, 1 << 24),
        ] {
            in_range(name, value, max)?;
        }
        for (name, value) in [("rms_norm_eps", Some(r.rms_norm_eps)), ("rope_theta", r.rope_theta)] {
            if value.is_some_and(|v| !(v.is_finite() && v > 0.0)) {
                return Err(format!("{name} {}: expected a positive number", value.unwrap_or_default()));
            }
        }
        let rope_theta = r.rope_parameters.as_ref().and_then(|p| p.rope_theta).or(r.rope_theta).unwrap_or(10000.0);
        let heads = r.num_attention_heads;
        let kv_heads = r.num_key_value_heads.unwrap_or(heads);
        if heads == 0 || kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(format!("num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"));
        }
        let head_dim = r.head_dim.unwrap_or(r.hidden_size / heads);
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(format!("head_dim {head_dim} must be even and positive"));
        }
        let eos_token_ids = match &r.eos_token_id {
            None | Some(Value::Null) => vec![],
            Some(Value::Number(n)) => n.as_i64().into_iter().collect(),
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_i64).collect(),
            Some(other) => return Err(format!("eos_token_id {other}: expected an id or a list of ids")),
        };
        Ok(Qwen2Config {
            vocab_size: r.vocab_size,
            hidden_size: r.hidden_size,
            intermediate_size: r.intermediate_size,
            num_hidden_layers: r.num_hidden_layers,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            max_position_embeddings: r.max_position_embeddings,
            rope_theta,
            rms_norm_eps: r.rms_norm_eps,
            tie_word_embeddings: r.tie_word_embeddings,
            eos_token_ids,
            mrope_section: None,
            raw,
        })
    }

    /// The JSON to save next to weights stored in `dtype`: the original fields, with the
    /// dtype under both the 4.x and the 5.x key.
    pub fn to_json(&self, dtype: &str) -> Value {
        let mut v = stamped(&self.raw, dtype, "Qwen2ForCausalLM");
        if let Value::Object(m) = &mut v {
            m.entry("model_type").or_insert_with(|| "qwen2".into());
        }
        v
    }
}

/// `raw` with `dtype` under both transformers' keys and an `architectures` entry if missing.
pub(crate) fn stamped(raw: &Value, dtype: &str, architecture: &str) -> Value {
    let mut v = raw.clone();
    if let Value::Object(m) = &mut v {
        m.insert("torch_dtype".into(), dtype.into());
        m.insert("dtype".into(), dtype.into());
        m.entry("architectures").or_insert_with(|| serde_json::json!([architecture]));
    }
    v
}
