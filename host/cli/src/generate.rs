//! `vagen-host generate`: continue one prompt, for a quick look at a model.

use crate::model_args::ModelArgs;
use anyhow::Result;
use clap::Args;
use vagen_model::{GenerateOptions, Message};

#[derive(Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The prompt text.
    #[arg(long)]
    prompt: String,
    /// Wrap the prompt as one user message through the model's chat template, with the
    /// assistant's generation prompt.
    #[arg(long)]
    chat: bool,
    #[arg(long, default_value_t = 64)]
    max_new_tokens: usize,
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    #[arg(long, default_value_t = 1.0)]
    top_p: f64,
    /// 0: no limit.
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Stop once the text contains this (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// End with one JSON line: {"text", "token_ids" (the new ids), "logprobs", "finish"}.
    #[arg(long)]
    json: bool,
}

pub fn generate(a: GenerateArgs) -> Result<()> {
    let model = a.model.load()?;
    let prompt = if a.chat {
        model.encode_chat(&[Message::user(a.prompt.as_str())], true)?
    } else {
        model.tokenizer.encode(&a.prompt)?
    };
    let options = GenerateOptions {
        max_new_tokens: a.max_new_tokens,
        temperature: a.temperature,
        top_p: a.top_p,
        top_k: a.top_k,
        stop: a.stop,
        seed: a.seed,
        ..Default::default()
    };
    let out = model.generate(&[prompt], &options)?.remove(0);
    if a.json {
        let line = serde_json::json!({
            "text": out.text,
            "token_ids": out.token_ids,
            "logprobs": out.logprobs,
            "finish": out.finish,
        });
        println!("{line}");
    } else {
        println!("{}", out.text);
    }
    Ok(())
}
