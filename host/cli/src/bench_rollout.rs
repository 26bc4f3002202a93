//! `vagen-host bench rollout`: a multi-turn rollout workload (groups × members × turns, each
//! turn's prompt the last one plus its answer and a new observation) timed on the static
//! engine, the continuous engine, and transformers' `generate` turn by turn, in one run.
//! Every row generates exactly `--new-tokens` a turn (end-of-sequence ignored), so the
//! three do the same work whatever they sample.

use crate::bench::{JsonOutput, Subject};
use crate::bench_model::{HfSource, subject};
use anyhow::{Context, Result, bail};
use clap::Args;
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use std::num::NonZeroUsize;
use std::time::Instant;
use vagen_model::{DType, DeviceChoice, Engine, EngineOptions, EngineRequest, GenerateOptions, Message, Model};

#[derive(Args)]
pub struct BenchRolloutArgs {
    // Text models only.
    #[command(flatten)]
    subject: Subject,
    #[arg(long, default_value_t = 8)]
    groups: usize,
    /// Members per group: they share their first prompt.
    #[arg(long, default_value_t = 8)]
    members: usize,
    #[arg(long, default_value_t = 5)]
    turns: usize,
    /// Tokens each row generates a turn.
    #[arg(long, default_value_t = 64)]
    new_tokens: usize,
    /// Rows the continuous engine decodes together at most.
    #[arg(long, default_value = "64")]
    max_batch: NonZeroUsize,
    #[command(flatten)]
    reference: crate::bench_model::Transformers,
    // The JSON line: the workload and a row per engine.
    #[command(flatten)]
    out: JsonOutput,
}

/// The prompts: every row's first, and what follows each turn's answer in each row.
#[derive(Clone, serde::Serialize)]
struct Workload {
    first: Vec<Vec<u32>>,
    /// `between[turn][row]`: the end of the answer's turn, the next observation, the
    /// generation prompt.
    between: Vec<Vec<Vec<u32>>>,
    new_tokens: usize,
    turns: usize,
    dtype: DType,
    device: DeviceChoice,
}

struct Figures {
    name: &'static str,
    seconds: f64,
    generated: usize,
    prefilled: usize,
    saved: usize,
    peak_kv_mib: Option<f64>,
    /// CUDA graphs captured during the run (their time is in `seconds`) and those seconds.
    graphs: Option<(usize, f64)>,
    /// Decode steps that attended through varlen flash attention (where graphs ran).
    flash_steps: Option<usize>,
    /// Decode steps launched before the last one was read, and the tokens they computed
    /// for rows that had ended (where graphs ran).
    ahead: Option<(usize, usize)>,
    /// The engine's cache allocations (each one makes the graphs captured again).
    kv_allocations: Option<usize>,
}

pub fn bench_rollout(a: BenchRolloutArgs) -> Result<()> {
    if a.groups == 0 || a.members == 0 || a.turns == 0 || a.new_tokens == 0 {
        bail!("--groups, --members, --turns and --new-tokens must be at least 1");
    }
    let (mut model, source) = subject(&a.subject, a.reference.transformers)?;
    if model.vision.is_some() {
        bail!("bench rollout times text prompts: give a Qwen2 model or shape");
    }
    // Every row generates exactly new_tokens, as on the transformers side.
    model.eos_token_ids.clear();
    let w = workload(&model, &a)?;
    let rows = w.first.len();
    let c = model.config();
    println!(
        "model: hidden {} x {} layers, {:?} on {:?}; {} groups x {} members x {} turns, {} new tokens a turn; \
         first prompt {} tokens, last turn's about {}",
        c.hidden_size,
        c.num_hidden_layers,
        model.dtype,
        model.device(),
        a.groups,
        a.members,
        a.turns,
        a.new_tokens,
        w.first[0].len(),
        w.first[0].len() + (a.turns - 1) * (a.new_tokens + w.between[0][0].len()),
    );
    let warm = Workload { first: w.first[..1].to_vec(), between: vec![], turns: 1, new_tokens: 2, ..w.clone() };
    run_static(&model, &warm)?;
    run_engine(&model, &warm, a.max_batch, true)?;
    let mut figures = vec![run_static(&model, &w)?, run_engine(&model, &w, a.max_batch, true)?];
    if model.device().is_cuda() {
        // The same engine launching every operator: what the graphs save.
        figures.push(run_engine(&model, &w, a.max_batch, false)?);
    }
    drop(model);
    if a.reference.transformers {
        figures.push(run_transformers(&a, &source, &w)?);
    }
    print_figures(&a, &figures);
    if let Some(f) = figures.iter().find(|f| f.generated != rows * a.turns * a.new_tokens) {
        bail!("{} generated {} tokens, not {}", f.name, f.generated, rows * a.turns * a.new_tokens);
    }
    Ok(())
}

/// The engines side by side (and, with `--json`, as one JSON line).
fn print_figures(a: &BenchRolloutArgs, figures: &[Figures]) {
    println!(
        "{:>13} | {:>8} {:>11} {:>15} {:>14} {:>12} {:>14}",
        "engine", "seconds", "gen tok/s", "prefill tokens", "tokens saved", "peak KV MiB", "vs static"
    );
    let base = figures[0].seconds;
    for f in figures {
        println!(
            "{:>13} | {:>8.2} {:>11.0} {:>15} {:>14} {:>12} {:>13.2}x",
            f.name,
            f.seconds,
            f.generated as f64 / f.seconds,
            f.prefilled,
            f.saved,
            f.peak_kv_mib.map_or("-".into(), |m| format!("{m:.1}")),
            base / f.seconds
        );
        if let Some((n, seconds)) = f.graphs {
            let allocations = f.kv_allocations.unwrap_or(0);
            println!(
                "{:>13}   {n} CUDA graph(s) captured in {seconds:.2} s (counted in its seconds); the cache \
                 allocated {allocations} time(s)",
                ""
            );
        }
    }
    if a.out.json {
        let engines: Vec<serde_json::Value> = figures
            .iter()
            .map(|f| {
                serde_json::json!({
                    "engine": f.name,
                    "seconds": f.seconds,
                    "gen_tok_s": f.generated as f64 / f.seconds,
                    "prefill_tokens": f.prefilled,
                    "tokens_saved": f.saved,
                    "peak_kv_mib": f.peak_kv_mib,
                    "graph_captures": f.graphs.map(|g| g.0),
                    "graph_capture_s": f.graphs.map(|g| g.1),
                    "flash_steps": f.flash_steps,
                    "steps_ahead": f.ahead.map(|a| a.0),
                    "discarded_tokens": f.ahead.map(|a| a.1),
                    "kv_allocations": f.kv_allocations,
                })
            })
            .collect();
        let workload = serde_json::json!({
            "model": a.subject.name(),
            "dtype": a.subject.model.dtype,
            "device": a.subject.model.device,
            "groups": a.groups,
            "members": a.members,
            "turns": a.turns,
            "new_tokens": a.new_tokens,
        });
        println!("{}", serde_json::json!({ "workload": workload, "engines": engines }));
    }
}

const SYSTEM: &str = "You are a Sokoban solver. The map is a grid: # is a wall, _ is floor, O is a target, \
X is a box, P is you, √ is a box on a target. Push every box onto a target. You can move Up, Down, Left or \
Right; you push a box by walking into it, and cannot pull. Think step by step, then answer in the form \
<think>...</think><answer>Up</answer>.";

/// A 6 × 6 grid drawn from `rng`, as a Sokoban observation reads.
fn grid(rng: &mut ChaCha8Rng) -> String {
    let cells = ['_', '_', '_', '#', 'O', 'X'];
    let mut s = String::new();
    for r in 0..6 {
        for c in 0..6 {
            let wall = r == 0 || r == 5 || c == 0 || c == 5;
            s.push(if wall { '#' } else { cells[(rng.next_u64() % cells.len() as u64) as usize] });
        }
        s.push('\n');
    }
    s
}

fn workload(model: &Model, a: &BenchRolloutArgs) -> Result<Workload> {
    let mut first = vec![];
    let mut between = vec![vec![]; a.turns.saturating_sub(1)];
    for g in 0..a.groups {
        let mut rng = ChaCha8Rng::seed_from_u64(g as u64);
        let user = Message::user(format!("Turn 1. Your map:\n{}Your move?", grid(&mut rng)));
        let prompt = model.encode_chat(&[Message::system(SYSTEM), user], true)?;
        for m in 0..a.members {
            first.push(prompt.clone());
            let mut rng = ChaCha8Rng::seed_from_u64(((g as u64) << 32) | m as u64);
            for (t, b) in between.iter_mut().enumerate() {
                let text = format!(
                    "<|im_end|>\n<|im_start|>user\nYour move changed the map. Turn {}. Your map:\n{}Your move?<|im_end|>\n<|im_start|>assistant\n",
                    t + 2,
                    grid(&mut rng)
                );
                b.push(model.tokenizer.encode(&text)?);
            }
        }
    }
    let dtype = a.subject.model.dtype;
    Ok(Workload { first, between, new_tokens: a.new_tokens, turns: a.turns, dtype, device: a.subject.model.device })
}

fn sampling(w: &Workload, turn: usize) -> GenerateOptions {
    GenerateOptions { max_new_tokens: w.new_tokens, temperature: 1.0, seed: turn as u64, ..Default::default() }
}

/// The engine before the continuous one: one left-padded batch per turn, every prompt
/// prefilled whole.
fn run_static(model: &Model, w: &Workload) -> Result<Figures> {
    let c = model.config();
    let per_position = vagen_model::KvCache::bytes_per_position(c, model.lm.model.kind());
    let mut prompts = w.first.clone();
    let (mut prefilled, mut peak) = (0, 0);
    let started = Instant::now();
    for turn in 0..w.turns {
        let out = model.generate(&prompts, &sampling(w, turn))?;
        let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
        prefilled += prompts.iter().map(Vec::len).sum::<usize>();
        peak = peak.max(prompts.len() * (longest + w.new_tokens) * per_position);
        extend(&mut prompts, &out, w, turn);
    }
    let seconds = started.elapsed().as_secs_f64();
    let generated = w.first.len() * w.turns * w.new_tokens;
    Ok(Figures {
        name: "static",
        seconds,
        generated,
        prefilled,
        saved: 0,
        peak_kv_mib: Some(mib(peak)),
        graphs: None,
        flash_steps: None,
        ahead: None,
        kv_allocations: None,
    })
}

fn run_engine(model: &Model, w: &Workload, max_batch: NonZeroUsize, cuda_graphs: bool) -> Result<Figures> {
    let mut engine = Engine::new(EngineOptions { max_batch, cuda_graphs, ..Default::default() });
    let mut prompts = w.first.clone();
    let started = Instant::now();
    for turn in 0..w.turns {
        let requests: Vec<EngineRequest> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| EngineRequest {
                key: i as u64,
                ids: p.clone(),
                images: vec![],
                max_new_tokens: w.new_tokens,
                seed: (turn * prompts.len() + i) as u64,
                adapter: 0,
            })
            .collect();
        let out = model.generate_with(&mut engine, &requests, &sampling(w, turn))?;
        extend(&mut prompts, &out, w, turn);
    }
    let seconds = started.elapsed().as_secs_f64();
    let s = engine.stats();
    let graphed = cuda_graphs && model.device().is_cuda();
    Ok(Figures {
        name: if cuda_graphs || !model.device().is_cuda() { "continuous" } else { "continuous, eager" },
        seconds,
        generated: s.generated_tokens,
        prefilled: s.prefilled_tokens,
        saved: s.saved_tokens(),
        peak_kv_mib: Some(mib(s.peak_kv_bytes)),
        graphs: graphed.then_some((s.graph_captures, s.graph_capture_seconds)),
        flash_steps: graphed.then_some(s.flash_steps),
        ahead: graphed.then_some((s.steps_ahead, s.discarded_tokens)),
        kv_allocations: Some(s.kv_allocations),
    })
}

fn extend(prompts: &mut [Vec<u32>], out: &[vagen_model::Generation], w: &Workload, turn: usize) {
    if let Some(next) = w.between.get(turn) {
        for ((p, g), b) in prompts.iter_mut().zip(out).zip(next) {
            p.extend(&g.token_ids);
            p.extend(b);
        }
    }
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

fn run_transformers(a: &BenchRolloutArgs, source: &HfSource, w: &Workload) -> Result<Figures> {
    let script = crate::bench_model::reference_script("bench_rollout_transformers.py");
    let mut spec = tempfile::Builder::new().suffix(".json").tempfile()?;
    serde_json::to_writer(&mut spec, w)?;
    let python = a.reference.python();
    let out = std::process::Command::new(&python)
        .arg(&script)
        .args(source.args())
        .arg("--workload")
        .arg(spec.path())
        .output()
        .with_context(|| format!("starting {} {}", python.display(), script.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        bail!("bench_rollout_transformers.py failed: {}", err.lines().last().unwrap_or(""));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line =
        text.lines().rfind(|l| l.starts_with('{')).context("bench_rollout_transformers.py printed no figures")?;
    let r: serde_json::Value = serde_json::from_str(line)?;
    let number = |k: &str| r[k].as_f64().with_context(|| format!("bench_rollout_transformers.py: no {k}"));
    Ok(Figures {
        name: "transformers",
        seconds: number("seconds")?,
        generated: number("generated_tokens")? as usize,
        prefilled: number("prefill_tokens")? as usize,
        saved: 0,
        peak_kv_mib: None,
        graphs: None,
        flash_steps: None,
        ahead: None,
        kv_allocations: None,
    })
}
