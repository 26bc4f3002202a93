//! `vagen-host parity-dump`: our outputs on cases written by a reference script
//! (`host/model/reference/parity_sweep.py`), for it to compare with transformers'.
//!
//! A case is a model folder holding `case.json`: `{"new_tokens": N, "prompts": [{"messages":
//! [...], "images": ["file.png", ...]}]}` (messages with `<image>` markers). Per case it writes
//! `ours.safetensors` (`logits.I`: the prompt's logits `[len, vocab]` in f32) and `ours.json`
//! (per prompt: `input_ids`, greedy `greedy` ids with `gen_logprobs`, and the log-probs a
//! training forward gives the same tokens, `forward_logprobs`). A case that fails records its
//! error and the next one runs.

use crate::model_args::ModelArgs;
use anyhow::{Context, Result};
use clap::Args;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use tch::Tensor;
use vagen_model::{GenerateOptions, Message, Model, Prompt};

#[derive(Args)]
pub struct ParityDumpArgs {
    /// A folder of case folders (each a model folder with `case.json`).
    #[arg(long)]
    cases: PathBuf,
    /// `cpu`, `cuda` or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    device: vagen_model::DeviceChoice,
    /// Parameter precision: f32, bf16 or f16.
    #[arg(long, default_value = "f32")]
    dtype: vagen_model::DType,
}

#[derive(Deserialize)]
struct Case {
    new_tokens: usize,
    prompts: Vec<CasePrompt>,
}

#[derive(Deserialize)]
struct CasePrompt {
    messages: Vec<Message>,
    #[serde(default)]
    images: Vec<PathBuf>,
}

pub fn parity_dump(a: ParityDumpArgs) -> Result<()> {
    let mut folders: Vec<PathBuf> = std::fs::read_dir(&a.cases)
        .with_context(|| format!("reading {}", a.cases.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("case.json").is_file())
        .collect();
    folders.sort();
    if folders.is_empty() {
        anyhow::bail!("{}: no case folders (folders holding case.json)", a.cases.display());
    }
    for folder in folders {
        let model_args = ModelArgs {
            model: vagen_model::ModelSource::Folder(folder.clone()),
            adapter: None,
            device: a.device,
            dtype: a.dtype,
        };
        // tch turns a libtorch exception into a panic: caught here, it fails this case
        // with its message (without libtorch's frame list) instead of ending every other
        // case's run.
        let outcome = vagen_model::catch_panic(|| Ok(dump_case(&folder, &model_args)));
        let summary = match outcome.map_err(anyhow::Error::from).and_then(|r| r) {
            Ok(summary) => summary,
            Err(e) => serde_json::json!({ "error": format!("{e:#}"), "prompts": [] }),
        };
        std::fs::write(folder.join("ours.json"), summary.to_string())
            .with_context(|| format!("writing {}", folder.join("ours.json").display()))?;
    }
    Ok(())
}

fn dump_case(folder: &Path, model_args: &ModelArgs) -> Result<serde_json::Value> {
    let file = folder.join("case.json");
    let case: Case = serde_json::from_str(&std::fs::read_to_string(&file)?)
        .with_context(|| format!("reading {}", file.display()))?;
    let model = model_args.load()?;
    let mut logits = Vec::new();
    let mut prompts = Vec::new();
    for (i, p) in case.prompts.iter().enumerate() {
        let outcome = dump_prompt(&model, folder, p, case.new_tokens);
        match outcome {
            Ok((l, summary)) => {
                logits.push((format!("logits.{i}"), l));
                prompts.push(summary);
            }
            Err(e) => prompts.push(serde_json::json!({ "error": format!("{e:#}") })),
        }
    }
    Tensor::write_safetensors(&logits, folder.join("ours.safetensors"))?;
    Ok(serde_json::json!({ "prompts": prompts }))
}

/// The prompt's logits (f32, on the CPU) and its summary.
fn dump_prompt(model: &Model, folder: &Path, p: &CasePrompt, new_tokens: usize) -> Result<(Tensor, serde_json::Value)> {
    let images = p.images.iter().map(|f| crate::generate::read_image(&folder.join(f))).collect::<Result<Vec<_>>>()?;
    let prompt = model.encode_chat_images(&p.messages, &images, true)?;
    let logits = tch::no_grad(|| prompt_logits(model, &prompt))?;
    let options = GenerateOptions { max_new_tokens: new_tokens, temperature: 0.0, ..Default::default() };
    let generation = model.generate_vl(&[again(&prompt)], &options)?.remove(0);
    let whole = Prompt {
        ids: prompt.ids.iter().chain(&generation.token_ids).copied().collect(),
        images: again(&prompt).images,
    };
    let scored = match model.vision() {
        Ok(vision) => vagen_model::sequence_logprobs_vl(&model.lm, vision, &[whole], 1.0)?,
        Err(_) => vagen_model::sequence_logprobs(&model.lm, &[whole.ids], 1.0)?,
    };
    let forward = scored[0][prompt.ids.len() - 1..].to_vec();
    let summary = serde_json::json!({
        "input_ids": prompt.ids,
        "greedy": generation.token_ids,
        "gen_logprobs": generation.logprobs,
        "forward_logprobs": forward,
    });
    Ok((logits.to_kind(tch::Kind::Float).to_device(tch::Device::Cpu), summary))
}

/// Logits `[len, vocab]` of the whole prompt: the training forward.
fn prompt_logits(model: &Model, prompt: &Prompt) -> Result<Tensor> {
    let logits = match model.vision() {
        Ok(vision) => vision.logits(&model.lm, &[prompt])?.0,
        Err(_) => {
            let device = model.device();
            let ids: Vec<i64> = prompt.ids.iter().map(|&t| t as i64).collect();
            let ids = Tensor::from_slice(&ids).unsqueeze(0).to_device(device);
            let positions = Tensor::arange(prompt.ids.len() as i64, (tch::Kind::Int64, device)).unsqueeze(0);
            model.lm.forward(&ids, &positions, None, None)?
        }
    };
    Ok(logits.squeeze_dim(0))
}

fn again(p: &Prompt) -> Prompt {
    Prompt { ids: p.ids.clone(), images: p.images.clone() }
}
