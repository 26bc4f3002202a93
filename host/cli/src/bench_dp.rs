//! `vagen-host bench dp`: data-parallel scaling (prints figures).
//!
//! 1. RL steps of a training config at each world size (`train --nproc N`, child processes):
//!    steps/s and where a step's time goes, from the run's own `timing_s/*` metrics.
//! 2. ZeRO-1 on a model shape: N ranks each build AdamW over the shape's parameters, shard it
//!    and take one real step across the ranks; the optimiser state each rank keeps, the step's
//!    time and the peak resident memory.

use crate::bench::{CpuByDefault, TimedConfig};
use crate::bench_model::{Shape, shape_config};
use anyhow::{Context, Result, bail};
use clap::Args;
use std::process::{Command, Stdio};
use std::time::Instant;
use tch::Kind;
use vagen_model::{DType, LoadOptions};
use vagen_trainer::{AdamW, Ranks, Rendezvous};

#[derive(Args, Clone)]
pub struct BenchDpArgs {
    #[command(flatten)]
    runs: TimedConfig,
    /// World sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    nproc: Vec<usize>,
    /// RL steps per world size; the first is a warm-up and not counted.
    #[arg(long, default_value_t = 4)]
    steps: usize,
    /// The shape the optimiser-state table uses (`qwen2.5-0.5b`, `default`, or a
    /// config.json path; random weights). `none` skips the table.
    #[arg(long, default_value = "qwen2.5-0.5b")]
    shape: String,
    // The optimiser-state table's.
    #[command(flatten)]
    run_on: CpuByDefault,
    /// Internal: one rank of the optimiser-state table (rendezvous from the environment).
    #[arg(long, hide = true)]
    opt_rank: bool,
    /// Internal, with --opt-rank: shard the moments.
    #[arg(long, hide = true)]
    shard: bool,
}

pub fn bench_dp(a: BenchDpArgs) -> Result<()> {
    if a.opt_rank {
        return opt_rank(&a);
    }
    let exe = std::env::current_exe().context("finding this executable")?;
    println!("RL steps of {} ({} per world size, the first a warm-up)", a.runs.config.display(), a.steps);
    println!(
        "{:>5} {:>8} {:>8} {:>9} {:>8} {:>9} {:>10} {:>9}",
        "ranks", "steps/s", "step s", "rollout s", "score s", "update s", "tokens/s", "speed-up"
    );
    let mut base = None;
    for &n in &a.nproc {
        let dir = tempfile::tempdir()?;
        let mut sets = a.runs.overrides.clone();
        sets.push(format!("schedule.steps={}", a.steps));
        let lines = timed_run(&exe, &a.runs.config, &dir.path().join("run"), &["--nproc", &n.to_string()], &sets)?;
        let mean = |k: &str| mean_after_warm_up(&lines, k);
        let step = mean("timing_s/step");
        let speed = base.get_or_insert(step);
        println!(
            "{n:>5} {:>8.3} {step:>8.2} {:>9.2} {:>8.2} {:>9.2} {:>10.0} {:>8.2}x",
            1.0 / step,
            mean("timing_s/rollout"),
            mean("timing_s/old_log_prob"),
            mean("timing_s/update"),
            mean("throughput/tokens_per_s"),
            *speed / step
        );
    }
    if a.shape == "none" {
        return Ok(());
    }
    println!("\nAdamW state per rank, {} (f32 weights, random), one step across the ranks", a.shape);
    println!("(* peak resident memory from the optimiser's creation on: weights, gradients, moments, the step)");
    println!(
        "{:>5} {:>7} {:>14} {:>9} {:>8} {:>12}",
        "ranks", "shard", "state MiB/rank", "of whole", "step s", "peak MiB*"
    );
    for &n in &a.nproc {
        for shard in if n > 1 { vec![false, true] } else { vec![false] } {
            let rows = opt_ranks(&a, &exe, n, shard)?;
            let f = |k: &str| rows.iter().filter_map(|r| r[k].as_f64()).fold(0.0, f64::max);
            println!(
                "{n:>5} {:>7} {:>14.0} {:>8.3} {:>8.2} {:>12.0}",
                shard,
                f("state_bytes") / (1 << 20) as f64,
                f("state_bytes") / f("whole_bytes"),
                f("step_seconds"),
                f("peak_rss_bytes") / (1 << 20) as f64
            );
        }
    }
    Ok(())
}

/// `vagen-host train` on `config` into `run_dir` with `args`, no SFT, no evaluation or
/// checkpoint before the end, and `sets`; the run's metrics lines.
pub(crate) fn timed_run(
    exe: &std::path::Path,
    config: &std::path::Path,
    run_dir: &std::path::Path,
    args: &[&str],
    sets: &[String],
) -> Result<Vec<serde_json::Value>> {
    let mut cmd = Command::new(exe);
    cmd.args(["train", "--config"]).arg(config).arg("--run-dir").arg(run_dir).args(args);
    let fixed = ["sft.steps=0", "schedule.eval_every=0", "schedule.save_every=0", "env.val_episodes=2"];
    for s in fixed.iter().map(|s| s.to_string()).chain(sets.iter().cloned()) {
        cmd.args(["--set", &s]);
    }
    let out = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).output().context("running train")?;
    if !out.status.success() {
        bail!("train {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    vagen_trainer::read_metrics(run_dir)
}

/// A figure's mean over a run's RL steps but the first (a warm-up).
pub(crate) fn mean_after_warm_up(lines: &[serde_json::Value], key: &str) -> f64 {
    let steps: Vec<f64> =
        lines.iter().filter(|l| l.get("timing_s/step").is_some()).skip(1).filter_map(|l| l[key].as_f64()).collect();
    steps.iter().fold(0.0, |a, b| a + b) / steps.len().max(1) as f64
}

/// `n` ranks of the optimiser-state measurement, as `--nproc` starts them (rank 0 hosts the
/// store); each prints one JSON line.
fn opt_ranks(a: &BenchDpArgs, exe: &std::path::Path, n: usize, shard: bool) -> Result<Vec<serde_json::Value>> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let children: Vec<_> = (0..n)
        .map(|r| {
            let mut c = Command::new(exe);
            c.args(["bench", "dp", "--opt-rank", "--shape", &a.shape, "--device", &a.run_on.device.to_string()]);
            if shard {
                c.arg("--shard");
            }
            c.env("RANK", r.to_string()).env("LOCAL_RANK", r.to_string()).env("WORLD_SIZE", n.to_string());
            c.env("MASTER_ADDR", "127.0.0.1").env("MASTER_PORT", port.to_string());
            c.stdout(Stdio::piped()).spawn().context("starting a bench dp rank")
        })
        .collect::<Result<_>>()?;
    let mut rows = vec![];
    for (r, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        match text.lines().last().and_then(|l| serde_json::from_str(l).ok()) {
            Some(row) if out.status.success() => rows.push(row),
            _ => bail!("bench dp rank {r} of {n} failed ({})", out.status),
        }
    }
    Ok(rows)
}

fn opt_rank(a: &BenchDpArgs) -> Result<()> {
    let device = a.run_on.device.resolve()?;
    let ranks = match Rendezvous::from_env()? {
        Some(r) => Ranks::join(&r, &Default::default(), device)?,
        None => Ranks::single(),
    };
    let options = LoadOptions { device, dtype: DType::F32, ..LoadOptions::default() };
    let model = match shape_config(&a.shape)? {
        Shape::Text(c) => vagen_model::benchmark_model(c, None, 0, options)?,
        Shape::Vl(c) => vagen_model::benchmark_model(c.text.clone(), Some(c), 0, options)?,
    };
    // The peak from here on: the optimiser's, not the random initialisation's temporaries.
    crate::bench_train::reset_peak_rss();
    // Two f32 moments per trainable weight, as an unsharded AdamW holds them.
    let whole_bytes: usize = model.trainable().values().map(|p| 8 * p.numel()).sum();
    let mut opt = match a.shard {
        true => AdamW::new_sharded(model.trainable(), 0.0, &ranks),
        false => AdamW::new(model.trainable(), 0.0),
    };
    // Gradients of 1 on every weight: the step's work does not depend on their values.
    let total: tch::Tensor = model.trainable().values().map(|p| p.sum(Kind::Float)).sum();
    total.backward();
    let started = Instant::now();
    opt.step_across(&ranks, 1e-5, 1.0)?;
    let step_seconds = started.elapsed().as_secs_f64();
    ranks.finish();
    let peak = crate::bench_train::peak_rss();
    println!(
        "{}",
        serde_json::json!({
            "rank": ranks.rank(),
            "state_bytes": opt.state_bytes(),
            "whole_bytes": whole_bytes,
            "step_seconds": step_seconds,
            "peak_rss_bytes": peak,
        })
    );
    Ok(())
}
