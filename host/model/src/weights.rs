//! Safetensors in, safetensors out, name for name with the HF layout.

use crate::folder::{FileKind, ModelFolder};
use crate::{Error, Qwen2Config, Result, VisionConfig};
use safetensors::SafeTensors;
use std::collections::HashMap;
use std::path::Path;
use tch::nn::VarStore;
use tch::{Device, Tensor};
use vagen_files::{self as files, Links};

/// Every tensor of a checkpoint folder, named as the layout files name them (see
/// [`legacy_names`]): `model.safetensors`, or the shards listed in
/// `model.safetensors.index.json` (each a file inside the folder).
pub(crate) fn read_dir(folder: &ModelFolder) -> Result<HashMap<String, Tensor>> {
    const SINGLE: &str = "model.safetensors";
    const INDEX: &str = "model.safetensors.index.json";
    let mut out = HashMap::new();
    if let Some(bytes) = folder.read(SINGLE, FileKind::Weights)? {
        out.extend(parse(&bytes, &folder.path().join(SINGLE))?);
    } else {
        let Some(json) = folder.read_json(INDEX, FileKind::Json)? else {
            return Err(Error::Weights {
                path: folder.path().into(),
                message: format!("neither {SINGLE} nor {INDEX} is here"),
            });
        };
        let map = json.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| Error::Weights {
            path: folder.path().join(INDEX),
            message: "no \"weight_map\" object".into(),
        })?;
        let mut shards: Vec<&str> = map.values().filter_map(|v| v.as_str()).collect();
        shards.sort();
        shards.dedup();
        for shard in shards {
            let path = folder.path().join(shard);
            let bytes = folder.read(shard, FileKind::Weights)?.ok_or_else(|| Error::Weights {
                path: path.clone(),
                message: "listed in the shard index but not in the folder".into(),
            })?;
            out.extend(parse(&bytes, &path)?);
        }
    }
    legacy_names(&mut out);
    Ok(out)
}

/// The tensors of one safetensors file the run wrote itself (optimiser moments): a regular
/// file, not a link, of at most [`FileKind::Weights`]' cap.
pub fn read_file(path: &Path) -> Result<Vec<(String, Tensor)>> {
    let bytes = files::read_regular(path, Links::Refuse, FileKind::Weights.cap())
        .map_err(|e| Error::Weights { path: path.into(), message: e.to_string() })?;
    parse(&bytes, path)
}

/// Tensors from safetensors bytes, every header entry checked before anything is made of
/// it: the format itself checks that the sizes match the data, and a dimension must also
/// fit libtorch's signed sizes (a huge one next to a zero passes the first check).
fn parse(bytes: &[u8], path: &Path) -> Result<Vec<(String, Tensor)>> {
    let bad = |message: String| Error::Weights { path: path.into(), message };
    let st = SafeTensors::deserialize(bytes).map_err(|e| bad(format!("not a valid safetensors file: {e}")))?;
    let mut out = Vec::new();
    for (name, view) in st.tensors() {
        if let Some(d) = view.shape().iter().find(|&&d| i64::try_from(d).is_err()) {
            return Err(bad(format!("tensor {name}: dimension {d} is out of range")));
        }
        let tensor = Tensor::try_from(view).map_err(|e| bad(format!("tensor {name}: {}", Error::from(e))))?;
        out.push((name, tensor));
    }
    Ok(out)
}

/// transformers 5's in-memory names for Qwen2.5-VL (`model.language_model.*`,
/// `model.visual.*`), which some checkpoints carry, as the layout files use (`model.*`,
/// `visual.*`).
fn legacy_names(tensors: &mut HashMap<String, Tensor>) {
    let renamed: Vec<String> = tensors
        .keys()
        .filter(|k| k.starts_with("model.language_model.") || k.starts_with("model.visual."))
        .cloned()
        .collect();
    for old in renamed {
        let new = match old.strip_prefix("model.language_model.") {
            Some(rest) => format!("model.{rest}"),
            None => old.trim_start_matches("model.").to_string(),
        };
        let t = tensors.remove(&old).expect("listed above");
        tensors.insert(new, t);
    }
}

/// Checks, before the model is built, the checkpoint tensors whose shapes fix how much the
/// config makes it allocate (every layer's and block's largest, the embeddings, the
/// merger): a config.json that says `vocab_size` 2^40 or 4,000 layers is refused by name
/// against the tensors really there, never allocated.
pub(crate) fn check_shapes(
    c: &Qwen2Config,
    vision: Option<&VisionConfig>,
    tensors: &HashMap<String, Tensor>,
    source: &Path,
) -> Result<()> {
    let (h, d) = (c.hidden_size as i64, c.head_dim as i64);
    let mut expected: Vec<(String, Vec<i64>, &str)> =
        vec![("model.embed_tokens.weight".into(), vec![c.vocab_size as i64, h], "vocab_size, hidden_size")];
    for i in 0..c.num_hidden_layers {
        let layer = format!("model.layers.{i}");
        expected.extend([
            (
                format!("{layer}.self_attn.q_proj.weight"),
                vec![c.num_attention_heads as i64 * d, h],
                "num_attention_heads × head_dim",
            ),
            (
                format!("{layer}.self_attn.k_proj.weight"),
                vec![c.num_key_value_heads as i64 * d, h],
                "num_key_value_heads × head_dim",
            ),
            (
                format!("{layer}.mlp.gate_proj.weight"),
                vec![c.intermediate_size as i64, h],
                "intermediate_size, num_hidden_layers",
            ),
        ]);
    }
    if let Some(v) = vision {
        let (vh, m) = (v.hidden_size as i64, v.spatial_merge_size as i64);
        let p = v.patch_size as i64;
        expected.push((
            "visual.patch_embed.proj.weight".into(),
            vec![vh, v.in_channels as i64, v.temporal_patch_size as i64, p, p],
            "vision_config: hidden_size, temporal_patch_size, patch_size",
        ));
        for i in 0..v.depth {
            expected.extend([
                (format!("visual.blocks.{i}.attn.qkv.weight"), vec![3 * vh, vh], "vision_config: hidden_size, depth"),
                (
                    format!("visual.blocks.{i}.mlp.gate_proj.weight"),
                    vec![v.intermediate_size as i64, vh],
                    "vision_config.intermediate_size",
                ),
            ]);
        }
        let unit = vh * m * m;
        expected.extend([
            ("visual.merger.mlp.0.weight".into(), vec![unit, unit], "vision_config.spatial_merge_size"),
            (
                "visual.merger.mlp.2.weight".into(),
                vec![v.out_hidden_size as i64, unit],
                "vision_config.out_hidden_size",
            ),
        ]);
    }
    for (name, shape, fields) in expected {
        let message = match tensors.get(&name) {
            Some(t) if t.size() == shape => continue,
            Some(t) => format!("tensor {name} has shape {:?}; config.json ({fields}) implies {shape:?}", t.size()),
            None => format!("tensor {name} is missing; config.json ({fields}) implies it, of shape {shape:?}"),
        };
        return Err(Error::Weights { path: source.into(), message });
    }
    Ok(())
}

/// Copies `tensors` into the variables of `vs` (converting dtype and device). Every variable
/// must be present with its exact shape; extra tensors (e.g. a tied `lm_head.weight`) are
/// ignored.
pub(crate) fn fill(vs: &VarStore, tensors: &HashMap<String, Tensor>, source: &Path) -> Result<()> {
    let _guard = tch::no_grad_guard();
    let mut names: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, mut var) in names {
        let t = tensors
            .get(&name)
            .ok_or_else(|| Error::Weights { path: source.into(), message: format!("tensor {name} is missing") })?;
        if t.size() != var.size() {
            return Err(Error::Weights {
                path: source.into(),
                message: format!("tensor {name} has shape {:?}; the config implies {:?}", t.size(), var.size()),
            });
        }
        var.f_copy_(t)?;
    }
    Ok(())
}

/// Writes the variables of `vs` to `path` (safetensors, CPU, contiguous), through a
/// temporary file renamed into place so a crash never leaves a half-written file.
pub(crate) fn write(vs: &VarStore, path: &Path) -> Result<()> {
    let mut named: Vec<(String, Tensor)> =
        vs.variables().into_iter().map(|(n, t)| (n, t.detach().to_device(Device::Cpu).contiguous())).collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    let tmp = path.with_extension("safetensors.partial");
    Tensor::write_safetensors(&named, &tmp)
        .map_err(|e| Error::Weights { path: tmp.clone(), message: e.to_string() })?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}
