//! Safetensors in, safetensors out, name for name with the HF layout.

use crate::{Error, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tch::nn::VarStore;
use tch::{Device, Tensor};

/// Every tensor of a checkpoint folder: `model.safetensors`, or the shards listed in
/// `model.safetensors.index.json`.
pub(crate) fn read_dir(dir: &Path) -> Result<HashMap<String, Tensor>> {
    let single = dir.join("model.safetensors");
    let index = dir.join("model.safetensors.index.json");
    let files: Vec<PathBuf> = if single.is_file() {
        vec![single]
    } else if index.is_file() {
        let text = std::fs::read_to_string(&index).map_err(|e| Error::io(&index, e))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::Weights { path: index.clone(), message: e.to_string() })?;
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| Error::Weights { path: index.clone(), message: "no \"weight_map\" object".into() })?;
        let mut shards: Vec<String> = map.values().filter_map(|v| v.as_str().map(String::from)).collect();
        shards.sort();
        shards.dedup();
        shards.iter().map(|s| dir.join(s)).collect()
    } else {
        return Err(Error::Weights {
            path: dir.into(),
            message: "neither model.safetensors nor model.safetensors.index.json is here".into(),
        });
    };
    let mut out = HashMap::new();
    for file in files {
        let tensors = Tensor::read_safetensors(&file)
            .map_err(|e| Error::Weights { path: file.clone(), message: e.to_string() })?;
        out.extend(tensors);
    }
    Ok(out)
}

/// transformers 5's in-memory names for Qwen2.5-VL (`model.language_model.*`,
/// `model.visual.*`), which some checkpoints carry, as the layout files use (`model.*`,
/// `visual.*`).
pub(crate) fn legacy_names(tensors: &mut HashMap<String, Tensor>) {
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
