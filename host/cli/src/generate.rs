//! `vagen-host generate`: continue one prompt, for a quick look at a model.

use crate::model_args::ModelArgs;
use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::{Path, PathBuf};
use vagen_model::{GenerateOptions, Image, Message, Prompt};

#[derive(Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The prompt text.
    #[arg(long)]
    prompt: String,
    /// A PNG image shown before the prompt text in the user message
    /// (repeatable; needs --chat and a VL model, e.g. `--model default-vl`).
    #[arg(long)]
    image: Vec<PathBuf>,
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
    if !a.image.is_empty() && !a.chat {
        bail!("--image needs --chat: images enter the prompt through the chat template");
    }
    let images: Vec<Image> = a.image.iter().map(|p| read_image(p)).collect::<Result<_>>()?;
    let model = a.model.load()?;
    let prompt = if a.chat {
        let text = format!("{}{}", vagen_model::IMAGE_MARKER.repeat(images.len()), a.prompt);
        model.encode_chat_images(&[Message::user(text)], &images, true)?
    } else {
        Prompt::text(model.tokenizer.encode(&a.prompt)?)
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
    let out = model.generate_vl(&[prompt], &options)?.remove(0);
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

/// An image file as RGB8 (alpha dropped, grey expanded), as an env would send it.
pub(crate) fn read_image(path: &Path) -> Result<Image> {
    let img = image::open(path).with_context(|| format!("reading image {}", path.display()))?.to_rgb8();
    Ok(Image { width: img.width(), height: img.height(), rgb: img.into_raw() })
}
