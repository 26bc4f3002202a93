//! Qwen2.5-VL's `config.json`, as transformers 4 writes it (text fields at the top level,
//! `rope_scaling.type = "mrope"`) or 5 (`text_config` / `vision_config`,
//! `rope_parameters`). Fields we do not implement are refused by name.

use crate::Qwen2Config;
use serde::Deserialize;
use serde_json::{Map, Value};

/// The vision tower's shape (`vision_config`). Defaults are transformers' for a missing key.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct VisionConfig {
    #[serde(default = "d_depth")]
    pub depth: usize,
    #[serde(default = "d_hidden")]
    pub hidden_size: usize,
    #[serde(default = "d_intermediate")]
    pub intermediate_size: usize,
    #[serde(default = "d_heads")]
    pub num_heads: usize,
    #[serde(default = "d_channels")]
    pub in_channels: usize,
    #[serde(default = "d_patch")]
    pub patch_size: usize,
    #[serde(default = "d_merge")]
    pub spatial_merge_size: usize,
    #[serde(default = "d_temporal")]
    pub temporal_patch_size: usize,
    /// Side of an attention window in pixels (112: 4 × 4 merged units, 8 × 8 patches).
    #[serde(default = "d_window")]
    pub window_size: usize,
    /// The language model's hidden size: what the merger projects to.
    #[serde(default = "d_hidden")]
    pub out_hidden_size: usize,
    /// Blocks that attend over the whole image instead of within windows.
    #[serde(default = "d_fullatt")]
    pub fullatt_block_indexes: Vec<usize>,
    #[serde(default = "d_act")]
    pub hidden_act: String,
    #[serde(skip)]
    pub rope_theta: f64,
}

fn d_depth() -> usize {
    32
}
fn d_hidden() -> usize {
    3584
}
fn d_intermediate() -> usize {
    3420
}
fn d_heads() -> usize {
    16
}
fn d_channels() -> usize {
    3
}
fn d_patch() -> usize {
    14
}
fn d_merge() -> usize {
    2
}
fn d_temporal() -> usize {
    2
}
fn d_window() -> usize {
    112
}
fn d_fullatt() -> Vec<usize> {
    vec![7, 15, 23, 31]
}
fn d_act() -> String {
    "silu".into()
}

impl VisionConfig {
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_heads
    }

    /// Pixels per side of one merged unit (one LM token): 28 for Qwen2.5-VL.
    pub fn factor(&self) -> usize {
        self.patch_size * self.spatial_merge_size
    }

    /// Values per patch row of `pixel_values`: channels × frames × patch².
    pub fn patch_dim(&self) -> usize {
        self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size
    }

    fn validate(&self, text_hidden: usize) -> std::result::Result<(), String> {
        let v = self;
        if v.hidden_act != "silu" {
            return Err(format!("vision_config.hidden_act {:?}: only \"silu\" is supported", v.hidden_act));
        }
        for (name, value, max) in [
            ("depth", v.depth, 1024),
            ("hidden_size", v.hidden_size, 1 << 16),
            ("intermediate_size", v.intermediate_size, 1 << 18),
            ("num_heads", v.num_heads, 1024),
            ("patch_size", v.patch_size, 1024),
            ("spatial_merge_size", v.spatial_merge_size, 16),
            ("temporal_patch_size", v.temporal_patch_size, 16),
            ("window_size", v.window_size, 1 << 16),
        ] {
            crate::config::in_range(&format!("vision_config.{name}"), value, max)?;
        }
        if v.in_channels != 3 {
            return Err(format!("vision_config.in_channels {}: images are RGB (3)", v.in_channels));
        }
        if v.num_heads == 0 || !v.hidden_size.is_multiple_of(v.num_heads) || !v.head_dim().is_multiple_of(4) {
            return Err(format!(
                "vision_config: hidden_size {} over num_heads {} must give a head size that is a multiple of 4 (2-D rotary)",
                v.hidden_size, v.num_heads
            ));
        }
        if v.patch_size == 0 || v.spatial_merge_size == 0 || v.temporal_patch_size == 0 {
            return Err("vision_config: patch_size, spatial_merge_size and temporal_patch_size must be positive".into());
        }
        if v.window_size < v.factor() || !v.window_size.is_multiple_of(v.factor()) {
            return Err(format!(
                "vision_config.window_size {} must be a positive multiple of patch_size × spatial_merge_size = {}",
                v.window_size,
                v.factor()
            ));
        }
        if let Some(&i) = v.fullatt_block_indexes.iter().find(|&&i| i >= v.depth) {
            return Err(format!("vision_config.fullatt_block_indexes names block {i}; depth is {}", v.depth));
        }
        if v.out_hidden_size != text_hidden {
            return Err(format!(
                "vision_config.out_hidden_size {} differs from the language model's hidden_size {text_hidden}",
                v.out_hidden_size
            ));
        }
        Ok(())
    }
}

/// A Qwen2.5-VL config: the language model (a [`Qwen2Config`] with M-RoPE sections), the
/// vision tower, and the special token ids that place images in the text.
#[derive(Debug, Clone)]
pub struct Qwen2VlConfig {
    pub text: Qwen2Config,
    pub vision: VisionConfig,
    pub image_token_id: u32,
    pub video_token_id: u32,
    pub vision_start_token_id: u32,
    pub vision_end_token_id: u32,
    /// The file as read, saved back with the dtype updated.
    pub raw: Value,
}

#[derive(Deserialize)]
struct Ids {
    #[serde(default = "d_image")]
    image_token_id: u32,
    #[serde(default = "d_video")]
    video_token_id: u32,
    #[serde(default = "d_start")]
    vision_start_token_id: u32,
    #[serde(default = "d_end")]
    vision_end_token_id: u32,
}
fn d_image() -> u32 {
    151655
}
fn d_video() -> u32 {
    151656
}
fn d_start() -> u32 {
    151652
}
fn d_end() -> u32 {
    151653
}

/// Is this `config.json` text a Qwen2.5-VL one?
pub(crate) fn is_vl(raw: &Value) -> bool {
    raw.get("model_type").and_then(Value::as_str) == Some("qwen2_5_vl")
}

impl Qwen2VlConfig {
    pub fn from_json(text: &str) -> std::result::Result<Self, String> {
        let raw: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let top = raw.as_object().ok_or("config.json is not an object")?;
        match top.get("model_type").and_then(Value::as_str) {
            Some("qwen2_5_vl") => {}
            Some("qwen2_vl") => {
                return Err(
                    "model_type \"qwen2_vl\": Qwen2-VL differs from Qwen2.5-VL; only \"qwen2_5_vl\" is supported"
                        .into(),
                );
            }
            other => return Err(format!("model_type {other:?}: expected \"qwen2_5_vl\"")),
        }
        let (text_config, mrope_section) = text_fields(top)?;
        let mut text_cfg =
            Qwen2Config::from_json(&Value::Object(text_config).to_string()).map_err(|e| format!("text_config: {e}"))?;
        let half = text_cfg.head_dim / 2;
        if mrope_section.iter().sum::<usize>() != half {
            return Err(format!(
                "mrope_section {mrope_section:?} sums to {}; it must cover head_dim / 2 = {half}",
                mrope_section.iter().sum::<usize>()
            ));
        }
        text_cfg.mrope_section = Some(mrope_section);
        let vision_value = top.get("vision_config").cloned().unwrap_or_else(|| Value::Object(Map::new()));
        let mut vision: VisionConfig =
            serde_json::from_value(vision_value.clone()).map_err(|e| format!("vision_config: {e}"))?;
        vision.rope_theta = rope_theta(vision_value.as_object(), 10000.0);
        vision.validate(text_cfg.hidden_size)?;
        let ids: Ids = serde_json::from_value(raw.clone()).map_err(|e| e.to_string())?;
        for (name, id) in [
            ("image_token_id", ids.image_token_id),
            ("video_token_id", ids.video_token_id),
            ("vision_start_token_id", ids.vision_start_token_id),
            ("vision_end_token_id", ids.vision_end_token_id),
        ] {
            if id as usize >= text_cfg.vocab_size {
                return Err(format!("{name} {id} is outside the vocabulary ({})", text_cfg.vocab_size));
            }
        }
        Ok(Qwen2VlConfig {
            text: text_cfg,
            vision,
            image_token_id: ids.image_token_id,
            video_token_id: ids.video_token_id,
            vision_start_token_id: ids.vision_start_token_id,
            vision_end_token_id: ids.vision_end_token_id,
            raw,
        })
    }

    /// The JSON to save next to weights stored in `dtype`.
    pub fn to_json(&self, dtype: &str) -> Value {
        let mut v = crate::config::stamped(&self.raw, dtype, "Qwen2_5_VLForConditionalGeneration");
        if let Some(Value::Object(t)) = v.get_mut("text_config") {
            t.insert("dtype".into(), dtype.into());
        }
        v
    }
}

/// The language model's fields as a plain Qwen2 config (`text_config`, or the top level for
/// transformers 4 files), with the M-RoPE sections taken out of the rope settings.
fn text_fields(top: &Map<String, Value>) -> std::result::Result<(Map<String, Value>, Vec<usize>), String> {
    let mut text = match top.get("text_config") {
        Some(Value::Object(t)) => {
            // transformers 4.5x writes both; fields it left at the top level still count.
            let mut merged: Map<String, Value> =
                top.iter().filter(|(k, _)| !k.ends_with("_config")).map(|(k, v)| (k.clone(), v.clone())).collect();
            merged.extend(t.clone());
            merged
        }
        _ => top.clone(),
    };
    let rope = text.get("rope_parameters").or_else(|| text.get("rope_scaling")).cloned();
    let rope = rope.as_ref().and_then(Value::as_object);
    if let Some(r) = rope {
        let kind = r.get("rope_type").or_else(|| r.get("type")).and_then(Value::as_str).unwrap_or("default");
        // transformers 5 writes both: `"type": "mrope"` and `"rope_type": "default"`.
        let kinds: Vec<&str> = ["rope_type", "type"].iter().filter_map(|k| r.get(*k)?.as_str()).collect();
        if kinds.iter().any(|k| *k != "mrope" && *k != "default") {
            return Err(format!("rope type {kind:?}: only M-RoPE (\"mrope\" / \"default\") is supported"));
        }
    }
    let mrope_section: Vec<usize> = match rope.and_then(|r| r.get("mrope_section")) {
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| format!("mrope_section: {e}"))?,
        None => vec![16, 24, 24],
    };
    if mrope_section.len() != 3 {
        return Err(format!("mrope_section {mrope_section:?}: expected three sections (t, h, w)"));
    }
    let theta = rope_theta(Some(&text), 1_000_000.0);
    for key in ["rope_parameters", "rope_scaling", "model_type", "layer_types", "sliding_window", "max_window_layers"] {
        text.shift_remove(key);
    }
    text.insert("rope_theta".into(), theta.into());
    text.entry("rms_norm_eps").or_insert(1e-5.into());
    // transformers ties the head when either level says so.
    let tied = |m: &Map<String, Value>| m.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(false);
    let tie = tied(top) || tied(&text);
    text.insert("tie_word_embeddings".into(), tie.into());
    Ok((text, mrope_section))
}

/// `rope_parameters.rope_theta`, `rope_scaling.rope_theta` or `rope_theta`, else `default`.
fn rope_theta(config: Option<&Map<String, Value>>, default: f64) -> f64 {
    let Some(c) = config else { return default };
    ["rope_parameters", "rope_scaling"]
        .iter()
        .filter_map(|k| c.get(*k)?.get("rope_theta")?.as_f64())
        .next()
        .or_else(|| c.get("rope_theta")?.as_f64())
        .unwrap_or(default)
}
