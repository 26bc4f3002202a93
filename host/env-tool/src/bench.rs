//! `bench`: what plugins cost on this machine, printed as figures. Several
//! `--plugin`s (say the same env as `.wasm` and `.so`) are measured alike and shown side by side.

use crate::limits_arg::limits_from;
use anyhow::{Context, Result, bail};
use clap::Args;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use vagen_runtime::{Environment, Limits, Runtime, random_answer};

#[derive(Args)]
pub struct BenchArgs {
    /// A plugin file (`.wasm` or `.so`); repeat to compare.
    #[arg(long, required = true)]
    plugin: Vec<PathBuf>,
    /// Step calls to time per plugin.
    #[arg(long, default_value_t = 20_000)]
    steps: usize,
    /// Instances to create when timing instantiation.
    #[arg(long, default_value_t = 200)]
    instances: usize,
    /// JSON object overriding the plugins' default config.
    #[arg(long, default_value = "")]
    env_config: String,
    /// Sandbox limit override, e.g. `--limit fuel_millions_per_call=100` (repeatable).
    #[arg(long = "limit", value_name = "KEY=VALUE")]
    limits: Vec<String>,
}

struct Figures {
    label: String,
    load_first_ms: f64,
    load_again_ms: f64,
    instantiate_us: f64,
    reset: Stats,
    step: Stats,
    light_call_us: f64,
    steps_per_sec: f64,
    steps: usize,
    episodes: usize,
}

struct Stats {
    mean: f64,
    p50: f64,
    p99: f64,
}

pub fn bench(a: BenchArgs) -> Result<()> {
    let limits = limits_from(&a.limits)?;
    let figures = a
        .plugin
        .iter()
        .map(|p| measure(p, &a, limits.clone()).with_context(|| format!("benchmarking {}", p.display())))
        .collect::<Result<Vec<_>>>()?;
    print_table(&figures);
    Ok(())
}

fn measure(path: &Path, a: &BenchArgs, limits: Limits) -> Result<Figures> {
    // A private cache: the first load compiles, the second reads what the first wrote.
    let cache = std::env::temp_dir().join(format!("vagen-bench-cache-{}", std::process::id()));
    let runtime = Runtime::with_cache_dir(limits, Some(cache.clone()))?;
    let t = Instant::now();
    let plugin = runtime.load(path)?;
    let load_first = t.elapsed();
    let t = Instant::now();
    drop(runtime.load(path)?);
    let load_again = t.elapsed();
    let _ = std::fs::remove_dir_all(&cache);

    let m = plugin.manifest().clone();
    // Random actions where the env has names for them, else its oracle's answers.
    let random = !m.action_names.is_empty();
    if !random && !m.has_oracle {
        bail!("bench needs discrete actions or an oracle to produce answers");
    }

    let t = Instant::now();
    for _ in 0..a.instances {
        drop(plugin.create(&a.env_config)?);
    }
    let instantiate = t.elapsed() / a.instances.max(1) as u32;

    let mut env = plugin.create(&a.env_config)?;
    let (mut steps, mut resets, mut answering) = (Vec::new(), Vec::new(), Duration::ZERO);
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let total = Instant::now();
    for seed in 0.. {
        if steps.len() >= a.steps {
            break;
        }
        let t = Instant::now();
        env.reset(seed)?;
        resets.push(t.elapsed());
        for _ in 0..plugin.max_turns(None) {
            let t = Instant::now();
            let answer = if random { random_answer(env.action_space(), &mut rng) } else { env.oracle()? };
            let answer = answer.unwrap_or_default();
            answering += t.elapsed();
            let t = Instant::now();
            let done = env.step(&answer)?.done;
            steps.push(t.elapsed());
            if done || steps.len() >= a.steps {
                break;
            }
        }
    }
    let loop_time = total.elapsed().saturating_sub(answering);
    let light = time_calls(env.as_mut(), 2_000)?;
    let kind = plugin.info().kind;
    Ok(Figures {
        label: format!("{} ({kind})", path.file_name().map(|f| f.to_string_lossy()).unwrap_or_default()),
        load_first_ms: ms(load_first),
        load_again_ms: ms(load_again),
        instantiate_us: us(instantiate),
        reset: stats(&mut resets),
        step: stats(&mut steps),
        light_call_us: us(light),
        steps_per_sec: steps.len() as f64 / loop_time.as_secs_f64(),
        steps: steps.len(),
        episodes: resets.len(),
    })
}

/// `describe-state`: little work, so mostly the cost of crossing the boundary.
fn time_calls(env: &mut dyn Environment, n: u32) -> Result<Duration> {
    let t = Instant::now();
    for _ in 0..n {
        env.describe_state()?;
    }
    Ok(t.elapsed() / n)
}

fn print_table(f: &[Figures]) {
    let width = f.iter().map(|x| x.label.len()).max().unwrap_or(0).max(14);
    let row = |name: &str, cell: &dyn Fn(&Figures) -> String| {
        print!("{name:<26}");
        for x in f {
            print!("  {:>width$}", cell(x));
        }
        println!();
    };
    row("", &|x| x.label.clone());
    row("load, first (compile) ms", &|x| format!("{:.2}", x.load_first_ms));
    row("load, again (cache) ms", &|x| format!("{:.2}", x.load_again_ms));
    row("instantiate+create µs", &|x| format!("{:.1}", x.instantiate_us));
    row("reset µs mean", &|x| format!("{:.2}", x.reset.mean));
    row("step µs mean", &|x| format!("{:.2}", x.step.mean));
    row("step µs p50", &|x| format!("{:.2}", x.step.p50));
    row("step µs p99", &|x| format!("{:.2}", x.step.p99));
    row("describe-state µs", &|x| format!("{:.2}", x.light_call_us));
    row("steps/s, one instance", &|x| format!("{:.0}", x.steps_per_sec));
    row("steps / episodes timed", &|x| format!("{} / {}", x.steps, x.episodes));
    println!("(steps/s counts reset and step calls, not the time spent choosing answers)");
}

fn stats(d: &mut [Duration]) -> Stats {
    d.sort();
    let pct = |p: f64| us(d[((d.len().max(1) - 1) as f64 * p).round() as usize]);
    let mean = us(d.iter().sum::<Duration>() / d.len().max(1) as u32);
    Stats { mean, p50: pct(0.5), p99: pct(0.99) }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
