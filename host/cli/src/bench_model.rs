//! `vagen-host bench-model`: prefill and decode throughput of the generation engine, next to
//! transformers' `generate` on the same shape, batch and lengths (prints figures).

use crate::model_args::ModelArgs;
use anyhow::{Context, Result, bail};
use clap::Args;
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use std::path::PathBuf;
use std::time::Instant;
use vagen_model::{GenerateOptions, Model, Qwen2Config};

#[derive(Args)]
pub struct BenchModelArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Benchmark random weights of this shape instead of `--model`: a config.json path, or
    /// `qwen2.5-0.5b` (Qwen2.5-0.5B-Instruct's shape).
    #[arg(long)]
    config: Option<String>,
    /// Batch sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
    batch: Vec<usize>,
    /// Prompt tokens per row.
    #[arg(long, default_value_t = 128)]
    prompt_len: usize,
    /// Generated tokens per row (end-of-sequence ignored, so every row makes this many).
    #[arg(long, default_value_t = 64)]
    new_tokens: usize,
    /// Also run host/model/reference/bench_transformers.py with this Python (transformers
    /// installed); `VAGEN_PYTHON` if set. `cargo xtask env` exports the project venv's.
    #[arg(long)]
    transformers: bool,
    #[arg(long)]
    python: Option<PathBuf>,
}

struct Figures {
    prefill: f64,
    decode: f64,
}

pub fn bench_model(a: BenchModelArgs) -> Result<()> {
    let (mut model, config_file) = match &a.config {
        Some(shape) => {
            let config = shape_config(shape)?;
            let file = tempfile_with(&config.raw.to_string())?;
            let started = Instant::now();
            let model = vagen_model::random_model(config, 0, a.model.options()?)?;
            eprintln!("random weights ready in {:.1} s", started.elapsed().as_secs_f64());
            (model, Some(file))
        }
        None => (a.model.load()?, None),
    };
    // Every row generates exactly new_tokens, as on the transformers side.
    model.eos_token_ids.clear();
    let c = model.config();
    let params: i64 = model.vs.variables().values().map(|t| t.numel() as i64).sum();
    println!(
        "model: hidden {} x {} layers, vocab {}, {:.1} M parameters, {:?} on {:?}; prompt {} + {} new tokens",
        c.hidden_size,
        c.num_hidden_layers,
        c.vocab_size,
        params as f64 / 1e6,
        model.dtype,
        model.device(),
        a.prompt_len,
        a.new_tokens
    );
    measure(&model, 1, a.prompt_len.min(8), 2)?; // warm-up: allocator, kernels
    let mut ours = Vec::new();
    for &b in &a.batch {
        ours.push(measure(&model, b, a.prompt_len, a.new_tokens)?);
    }
    let theirs = if a.transformers { Some(run_transformers(&a, config_file.as_ref())?) } else { None };
    println!(
        "{:>6} | {:>16} {:>16} | {:>16} {:>16}",
        "batch", "prefill tok/s", "decode tok/s", "hf prefill tok/s", "hf decode tok/s"
    );
    for (i, &b) in a.batch.iter().enumerate() {
        let hf =
            theirs.as_ref().map(|t: &Vec<Figures>| (format!("{:.0}", t[i].prefill), format!("{:.0}", t[i].decode)));
        let (hp, hd) = hf.unwrap_or(("-".into(), "-".into()));
        println!("{b:>6} | {:>16.0} {:>16.0} | {hp:>16} {hd:>16}", ours[i].prefill, ours[i].decode);
    }
    Ok(())
}

/// Prefill alone is timed as a one-token generation; decode is the rest of a full one.
fn measure(model: &Model, batch: usize, prompt_len: usize, new_tokens: usize) -> Result<Figures> {
    let mut rng = ChaCha8Rng::seed_from_u64(batch as u64);
    let vocab = model.tokenizer.vocab_size().min(model.config().vocab_size) as u64;
    let prompts: Vec<Vec<u32>> =
        (0..batch).map(|_| (0..prompt_len).map(|_| (rng.next_u64() % vocab) as u32).collect()).collect();
    let options = |n| GenerateOptions { max_new_tokens: n, temperature: 1.0, ..Default::default() };
    let t = Instant::now();
    model.generate(&prompts, &options(1))?;
    let prefill_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let out = model.generate(&prompts, &options(new_tokens))?;
    let total_s = t.elapsed().as_secs_f64();
    if out.iter().any(|g| g.token_ids.len() != new_tokens) {
        bail!("a row stopped before {new_tokens} tokens");
    }
    let decode_s = (total_s - prefill_s).max(1e-9);
    Ok(Figures {
        prefill: (batch * prompt_len) as f64 / prefill_s,
        decode: (batch * (new_tokens - 1)) as f64 / decode_s,
    })
}

fn run_transformers(a: &BenchModelArgs, config_file: Option<&tempfile::NamedTempFile>) -> Result<Vec<Figures>> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../model/reference/bench_transformers.py");
    let python = a.python.clone().or_else(|| std::env::var_os("VAGEN_PYTHON").map(PathBuf::from));
    let python = python.unwrap_or_else(|| "python3".into());
    let mut cmd = std::process::Command::new(&python);
    cmd.arg(&script);
    match config_file {
        Some(f) => cmd.arg("--config").arg(f.path()),
        None if a.model.model == "default" => {
            bail!("--transformers needs a folder or --config (the default model has no folder)")
        }
        None => cmd.arg("--model").arg(&a.model.model),
    };
    let batches = a.batch.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    cmd.args([
        "--batch",
        &batches,
        "--prompt-len",
        &a.prompt_len.to_string(),
        "--new-tokens",
        &a.new_tokens.to_string(),
    ]);
    cmd.args(["--dtype", &a.model.dtype, "--device", &a.model.device]);
    let out = cmd.output().with_context(|| format!("starting {} {}", python.display(), script.display()))?;
    if !out.status.success() {
        bail!("bench_transformers.py failed: {}", String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or(""));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<serde_json::Value> =
        text.lines().filter(|l| l.starts_with('{')).map(serde_json::from_str).collect::<Result<_, _>>()?;
    if rows.len() != a.batch.len() {
        bail!("bench_transformers.py printed {} rows for {} batch sizes", rows.len(), a.batch.len());
    }
    Ok(rows
        .iter()
        .map(|r| Figures {
            prefill: r["prefill_tokens_per_s"].as_f64().unwrap_or(f64::NAN),
            decode: r["decode_tokens_per_s"].as_f64().unwrap_or(f64::NAN),
        })
        .collect())
}

fn shape_config(shape: &str) -> Result<Qwen2Config> {
    let text = match shape {
        "qwen2.5-0.5b" => QWEN2_5_0_5B.to_string(),
        path => std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?,
    };
    Qwen2Config::from_json(&text).map_err(|e| anyhow::anyhow!("{shape}: {e}"))
}

fn tempfile_with(text: &str) -> Result<tempfile::NamedTempFile> {
    use std::io::Write;
    let mut f = tempfile::Builder::new().suffix(".json").tempfile()?;
    f.write_all(text.as_bytes())?;
    Ok(f)
}

/// The shape of Qwen/Qwen2.5-0.5B-Instruct's config.json.
const QWEN2_5_0_5B: &str = r#"{
  "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
  "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
  "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
  "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
  "tie_word_embeddings": true, "initializer_range": 0.02, "use_sliding_window": false,
  "bos_token_id": 151643, "eos_token_id": 151645
}"#;
