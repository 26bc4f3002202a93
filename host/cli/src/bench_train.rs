//! `vagen-host bench train`: what an update step costs, full-parameter against LoRA ranks:
//! tokens/s, trainable parameters, optimiser state and peak memory (prints figures).
//!
//! Each cell of the table runs in a child process of its own, so its peak resident memory
//! is its own and not what an earlier cell left in the allocator.

use crate::bench::{CpuByDefault, JsonOutput};
use crate::bench_model::{Shape, shape_config};
use anyhow::{Context, Result};
use clap::Args;
use std::process::Command;
use std::time::Instant;
use tch::{Device, Kind, Tensor};
use vagen_model::{DType, LoadOptions, LoraConfig, Model, Targets, ValueModel};
use vagen_trainer::AdamW;

#[derive(Args, Clone)]
pub struct BenchTrainArgs {
    /// Model shapes, comma-separated: `default`, `default-vl`, `qwen2.5-0.5b`,
    /// `qwen2.5-vl-3b` or a config.json path (random weights).
    #[arg(long, value_delimiter = ',', default_value = "default,qwen2.5-0.5b")]
    shapes: Vec<String>,
    /// What trains, comma-separated: `full`, or a LoRA rank (adapters on every linear layer,
    /// alpha = 2 r).
    #[arg(long, value_delimiter = ',', default_value = "full,8,16,64")]
    variants: Vec<String>,
    /// Also each variant with a critic (its forward, backward and optimiser step after the
    /// actor's, as a PPO step with GAE does).
    #[arg(long)]
    critic: bool,
    /// Rows per update.
    #[arg(long, default_value_t = 2)]
    batch: usize,
    /// Tokens per row.
    #[arg(long, default_value_t = 128)]
    seq: usize,
    /// Measured steps (after one warm-up step).
    #[arg(long, default_value_t = 2)]
    steps: usize,
    #[command(flatten)]
    run_on: CpuByDefault,
    /// Parameter precision: f32, bf16 or f16.
    #[arg(long, default_value = "f32")]
    dtype: DType,
    // The JSON line: every cell.
    #[command(flatten)]
    out: JsonOutput,
    /// Internal: measure one cell (`SHAPE VARIANT CRITIC`) and print it as JSON.
    #[arg(long, hide = true, num_args = 3)]
    one: Option<Vec<String>>,
}

pub fn bench_train(a: BenchTrainArgs) -> Result<()> {
    if let Some(cell) = &a.one {
        let row = measure(&a, &cell[0], &cell[1], cell[2] == "critic")?;
        println!("{row}");
        return Ok(());
    }
    println!(
        "update steps: {} rows x {} tokens, {:?} on {:?}, {} measured after a warm-up; LoRA on every linear layer, alpha = 2r",
        a.batch, a.seq, a.dtype, a.run_on.device, a.steps
    );
    println!(
        "{:<14} {:<11} {:>12} {:>10} {:>12} {:>10} {:>10} {:>9}",
        "shape", "variant", "trainable", "of full", "optim MiB", "peak MiB", "step s", "tok/s"
    );
    let mut rows = Vec::new();
    for shape in &a.shapes {
        for variant in &a.variants {
            for critic in if a.critic { vec![false, true] } else { vec![false] } {
                let row = child(&a, shape, variant, critic)?;
                print_row(&row);
                rows.push(row);
            }
        }
    }
    if a.out.json {
        println!("{}", serde_json::json!({ "bench_train": rows }));
    }
    Ok(())
}

/// One cell in a fresh process of this binary.
fn child(a: &BenchTrainArgs, shape: &str, variant: &str, critic: bool) -> Result<serde_json::Value> {
    let exe = std::env::current_exe().context("finding this executable")?;
    let out = Command::new(exe)
        .args(["bench", "train", "--one", shape, variant, if critic { "critic" } else { "actor" }])
        .args(["--batch", &a.batch.to_string(), "--seq", &a.seq.to_string(), "--steps", &a.steps.to_string()])
        .args(["--device", &a.run_on.device.to_string(), "--dtype", &a.dtype.to_string()])
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running a bench train cell")?;
    let text = String::from_utf8_lossy(&out.stdout);
    match text.lines().last().and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok()) {
        Some(row) if out.status.success() => Ok(row),
        _ => Ok(serde_json::json!({
            "shape": shape, "variant": variant, "critic": critic,
            "failed": format!("the cell's process ended with {}", out.status),
        })),
    }
}

fn print_row(r: &serde_json::Value) {
    let name = format!("{}{}", r["variant"].as_str().unwrap_or("?"), if r["critic"] == true { "+critic" } else { "" });
    if let Some(why) = r.get("failed").or(r.get("skipped")).and_then(|v| v.as_str()) {
        println!("{:<14} {:<11} {why}", r["shape"].as_str().unwrap_or("?"), name);
        return;
    }
    let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    println!(
        "{:<14} {:<11} {:>12} {:>9.2}% {:>12.1} {:>10.0} {:>10.2} {:>9.0}",
        r["shape"].as_str().unwrap_or("?"),
        name,
        r["trainable"],
        100.0 * f("trainable") / f("base_parameters"),
        f("optimizer_bytes") / (1 << 20) as f64,
        f("peak_rss_bytes") / (1 << 20) as f64,
        f("step_seconds"),
        f("tokens_per_second"),
    );
}

fn lora_config(variant: &str) -> Result<Option<LoraConfig>> {
    if variant == "full" {
        return Ok(None);
    }
    let r: usize = variant.parse().with_context(|| format!("variant {variant:?}: `full` or a rank"))?;
    let r = std::num::NonZeroUsize::new(r).context("a LoRA rank of 0")?;
    Ok(Some(LoraConfig { r, alpha: 2.0 * r.get() as f64, target_modules: Targets::AllLinear, ..Default::default() }))
}

fn load(shape: &str, options: LoadOptions) -> Result<Model> {
    Ok(match shape {
        "default" => vagen_model::default_model(0, options)?,
        "default-vl" => vagen_model::default_vl_model(0, options)?,
        named => match shape_config(named)? {
            Shape::Text(c) => vagen_model::benchmark_model(c, None, 0, options)?,
            Shape::Vl(c) => vagen_model::benchmark_model(c.text.clone(), Some(c), 0, options)?,
        },
    })
}

fn measure(a: &BenchTrainArgs, shape: &str, variant: &str, with_critic: bool) -> Result<serde_json::Value> {
    let options = LoadOptions { device: a.run_on.device.resolve()?, dtype: a.dtype, ..LoadOptions::default() };
    let mut model = load(shape, options)?;
    if let Some(lora) = lora_config(variant)? {
        model.attach_lora(&lora, 0)?;
    }
    let parameters: i64 = model.vs.variables().values().map(|t| t.numel() as i64).sum();
    // The model's own, without adapters: what full-parameter training trains.
    let base_parameters: i64 =
        model.vs.variables().iter().filter(|(n, _)| !n.contains(".lora_")).map(|(_, t)| t.numel() as i64).sum();
    let trainable: i64 = model.trainable().values().map(|t| t.numel() as i64).sum();
    let head = serde_json::json!({ "shape": shape, "variant": variant, "critic": with_critic });
    // What is still to come must fit beside the loaded weights: gradients and two f32
    // moments per trainable parameter, and a full-parameter critic's own weights.
    let elt = a.dtype.kind().elt_size_in_bytes() as u64;
    let critic_weights = if with_critic && model.lora().is_none() { parameters as u64 * elt } else { 0 };
    let need = trainable as u64 * (elt + 8) * (1 + with_critic as u64) + critic_weights;
    if options.device == Device::Cpu
        && let Some(available) = mem_available()
        && need > available
    {
        let skipped = format!("skipped: needs about {} GiB more, {} GiB available", need >> 30, available >> 30);
        return Ok(merge(head, serde_json::json!({ "skipped": skipped })));
    }
    let critic = if with_critic { Some(ValueModel::from_policy(&model)?) } else { None };
    let mut actor_opt = AdamW::new(model.trainable(), 0.0);
    let mut critic_opt = critic.as_ref().map(|c| AdamW::new(c.trainable(), 0.0));
    let optimizer_bytes: i64 =
        8 * (trainable + critic.as_ref().map_or(0, |c| c.trainable().values().map(|t| t.numel() as i64).sum()));
    let (b, t) = (a.batch as i64, a.seq as i64);
    tch::manual_seed(0);
    let vocab = model.config().vocab_size as i64;
    let ids = Tensor::randint(vocab, [b, t], (Kind::Int64, options.device));
    let positions = Tensor::arange(t, (Kind::Int64, options.device)).unsqueeze(0).expand([b, t], false);
    let mut step = || -> Result<()> {
        {
            let logits = model.lm.forward(&ids, &positions, None, None)?;
            let targets = ids.narrow(1, 1, t - 1).reshape([-1]);
            logits.narrow(1, 0, t - 1).reshape([-1, vocab]).cross_entropy_for_logits(&targets).backward();
        }
        actor_opt.step(1e-5, 1.0);
        if let (Some(c), Some(opt)) = (&critic, critic_opt.as_mut()) {
            c.forward(&ids, &positions, None)?.square().mean(Kind::Float).backward();
            opt.step(1e-5, 1.0);
        }
        if let Device::Cuda(i) = options.device {
            tch::Cuda::synchronize(i as i64);
        }
        Ok(())
    };
    step()?; // warm-up: gradients and moments allocated
    reset_peak_rss();
    let started = Instant::now();
    for _ in 0..a.steps {
        step()?;
    }
    let seconds = started.elapsed().as_secs_f64() / a.steps.max(1) as f64;
    Ok(merge(
        head,
        serde_json::json!({
            "parameters": parameters,
            "base_parameters": base_parameters,
            "trainable": trainable,
            "optimizer_bytes": optimizer_bytes,
            "peak_rss_bytes": peak_rss(),
            "step_seconds": seconds,
            "tokens_per_second": (b * t) as f64 / seconds,
        }),
    ))
}

fn merge(mut a: serde_json::Value, b: serde_json::Value) -> serde_json::Value {
    if let (Some(a), serde_json::Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

/// Linux's `VmHWM` (peak resident memory), in bytes.
pub(crate) fn peak_rss() -> Option<u64> {
    proc_bytes("/proc/self/status", "VmHWM:")
}

/// Starts `VmHWM` again from the current resident size (Linux's `clear_refs` 5).
pub(crate) fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn mem_available() -> Option<u64> {
    proc_bytes("/proc/meminfo", "MemAvailable:")
}

/// A `KEY: N kB` line of a Linux `/proc` file, in bytes.
fn proc_bytes(file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|k| k * 1024)
}
