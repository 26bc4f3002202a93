//! `vagen-host serve`: the command line of `vagen-serve`'s server.

use crate::model_args::ModelArgs;
use anyhow::{Context, Result};
use clap::Args;
use std::num::NonZeroUsize;
use std::time::Duration;
use vagen_serve::{ImageLimits, ServerOptions, listen, server};

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// 0 picks a free port; the address is printed on the first line of stdout.
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Completions decoded together at most; more wait and join as rows end.
    #[arg(long, default_value = "64")]
    max_batch: NonZeroUsize,
    /// How long a request reaching an idle server waits for others to share its first
    /// prefill (ms); a busy server takes requests in at its next step regardless.
    #[arg(long, default_value_t = 5)]
    batch_wait_ms: u64,
    /// The model's id in `/v1/models` and responses (default: `--model`'s value).
    #[arg(long)]
    served_name: Option<String>,
    /// A LoRA adapter folder (PEFT's layout) served as model NAME (repeatable): a request's
    /// `model` picks an adapter or the base, and requests for different ones share a batch.
    #[arg(long = "lora", value_name = "NAME=DIR", value_parser = parse_lora)]
    lora: Vec<(String, std::path::PathBuf)>,
    /// Request bodies larger than this are refused (413) before they are read whole (MiB).
    #[arg(long, default_value = "16")]
    max_body_mib: NonZeroUsize,
    /// Pixels an image may have, read from its header before it is decoded (a small file
    /// can decode to gigabytes).
    #[arg(long, default_value = "16777216")]
    max_image_pixels: u64,
    /// Images one request may hold, counted before any is read.
    #[arg(long, default_value = "8")]
    max_images: usize,
    /// Pixels of all of a request's images together, from their headers before decoding
    /// (each decodes to 3 bytes a pixel, and the tower's work grows with them).
    #[arg(long, default_value = "33554432")]
    max_request_pixels: u64,
    /// Pixels of decoded pictures all requests in the server hold at once; a request past
    /// it is answered 503 with `Retry-After` (default: four requests' worth).
    #[arg(long, default_value = "134217728")]
    max_server_pixels: u64,
    /// Completions waiting or being generated at most; past it a request is answered 503
    /// with `Retry-After` instead of queueing without bound.
    #[arg(long, default_value = "256")]
    max_queue: NonZeroUsize,
    /// Open connections at most; past it a new connection is closed at once.
    #[arg(long, default_value = "256")]
    max_connections: NonZeroUsize,
    /// Seconds a client has to send a request's headers, and again its body; a slower one
    /// is disconnected (headers) or answered 408 (body).
    #[arg(long, default_value_t = 10)]
    read_timeout_s: u64,
}

fn parse_lora(s: &str) -> Result<(String, std::path::PathBuf), String> {
    match s.split_once('=') {
        Some((name, dir)) if !name.is_empty() && !dir.is_empty() => Ok((name.to_string(), dir.into())),
        _ => Err(format!("{s:?}: expected NAME=DIR")),
    }
}

pub fn serve(a: ServeArgs) -> Result<()> {
    let mut model = a.model.load()?;
    let mut names = vec![a.served_name.clone().unwrap_or_else(|| a.model.model.to_string())];
    for (adapter, dir) in &a.lora {
        if names.contains(adapter) {
            anyhow::bail!("--lora {adapter}={}: the name {adapter:?} is taken", dir.display());
        }
        let index = model.add_served_adapter(dir).with_context(|| format!("--lora {adapter}={}", dir.display()))?;
        debug_assert_eq!(index, names.len(), "served adapters are numbered from 1 in order");
        names.push(adapter.clone());
    }
    let options = ServerOptions {
        names,
        max_batch: a.max_batch,
        batch_wait: Duration::from_millis(a.batch_wait_ms),
        max_body: a.max_body_mib.get() << 20,
        images: ImageLimits {
            per_request: a.max_images,
            pixels_per_image: a.max_image_pixels,
            pixels_per_request: a.max_request_pixels,
        },
        max_server_pixels: a.max_server_pixels,
        max_queue: a.max_queue,
        read_timeout: Duration::from_secs(a.read_timeout_s),
        kv_cache_mib: NonZeroUsize::new(1024).expect("positive"),
        trim_memory: true,
    };
    let (app, worker) = server(&model, &options, None);
    std::thread::Builder::new().name("generation".into()).spawn(move || worker.run(&model))?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        listen(&a.host, a.port, app, a.max_connections.get(), Duration::from_secs(a.read_timeout_s)).await
    })
}
