//! `vagen-host bench`: what a plugin costs, measured on this machine, printed as figures.

use crate::limits_arg::limits_from;
use crate::policy::{Policy, PolicyKind};
use anyhow::{Result, bail};
use clap::Args;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use vagen_runtime::{Environment, Runtime};

#[derive(Args)]
pub struct BenchArgs {
    /// The plugin file (`.wasm`).
    #[arg(long)]
    plugin: PathBuf,
    /// Step calls to time.
    #[arg(long, default_value_t = 20_000)]
    steps: usize,
    /// Instances to create when timing instantiation.
    #[arg(long, default_value_t = 200)]
    instances: usize,
    /// JSON object overriding the plugin's default config.
    #[arg(long, default_value = "")]
    env_config: String,
    /// Sandbox limit override, e.g. `--limit fuel_millions_per_call=100` (repeatable).
    #[arg(long = "limit", value_name = "KEY=VALUE")]
    limits: Vec<String>,
}

pub fn bench(a: BenchArgs) -> Result<()> {
    let limits = limits_from(&a.limits)?;
    let cache = std::env::temp_dir().join(format!("vagen-bench-cache-{}", std::process::id()));
    let runtime = Runtime::with_cache_dir(limits, Some(cache.clone()))?;
    let t = Instant::now();
    let plugin = runtime.load(&a.plugin)?;
    let cold = t.elapsed();
    let t = Instant::now();
    let plugin_cached = runtime.load(&a.plugin)?;
    let warm = t.elapsed();
    let _ = std::fs::remove_dir_all(&cache);
    if !plugin_cached.info().from_cache {
        eprintln!("note: the second load did not come from the cache");
    }
    let m = plugin.manifest().clone();
    let kind = if !m.action_names.is_empty() {
        PolicyKind::Random
    } else if m.has_oracle {
        PolicyKind::Oracle
    } else {
        bail!("bench needs discrete actions or an oracle to produce answers");
    };
    let policy = Policy::new(kind, &m)?;

    let t = Instant::now();
    for _ in 0..a.instances {
        drop(plugin.create(&a.env_config)?);
    }
    let instantiate = t.elapsed() / a.instances.max(1) as u32;

    let mut env = plugin.create(&a.env_config)?;
    let (mut steps, mut resets, mut answers) = (Vec::new(), Vec::new(), Duration::ZERO);
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let mut seed = 0u64;
    let total = Instant::now();
    'episodes: while steps.len() < a.steps {
        let t = Instant::now();
        env.reset(seed)?;
        resets.push(t.elapsed());
        seed += 1;
        for _ in 0..m.default_max_turns {
            let t = Instant::now();
            let answer = policy.answer(env.as_mut(), &mut rng)?.unwrap_or_default();
            answers += t.elapsed();
            let t = Instant::now();
            let done = env.step(&answer)?.done;
            steps.push(t.elapsed());
            if done || steps.len() >= a.steps {
                continue 'episodes;
            }
        }
    }
    let loop_time = total.elapsed().saturating_sub(answers);
    let describe = time_calls(env.as_mut(), 2_000, |e| e.describe_state().map(drop))?;

    println!(
        "{} ({} bytes, sha256 {})",
        plugin.info().path.display(),
        plugin.info().size_bytes,
        &plugin.info().sha256[..12]
    );
    println!("load, compile      {:>10.2} ms", ms(cold));
    println!("load, from cache   {:>10.2} ms", ms(warm));
    println!("instantiate+create {:>10.1} µs  (mean of {})", us(instantiate), a.instances);
    println!("reset              {}", stats(&mut resets));
    println!("step               {}", stats(&mut steps));
    println!("describe-state     {:>10.2} µs  (mean of 2000; a light call: the boundary cost)", us(describe));
    println!(
        "single instance    {:>10.0} steps/s over {} steps in {} episodes (resets included, policy excluded)",
        steps.len() as f64 / loop_time.as_secs_f64(),
        steps.len(),
        resets.len()
    );
    Ok(())
}

fn time_calls(
    env: &mut dyn Environment,
    n: u32,
    f: impl Fn(&mut dyn Environment) -> Result<(), vagen_runtime::Error>,
) -> Result<Duration> {
    let t = Instant::now();
    for _ in 0..n {
        f(env)?;
    }
    Ok(t.elapsed() / n)
}

fn stats(d: &mut [Duration]) -> String {
    d.sort();
    let pct = |p: f64| d[((d.len() - 1) as f64 * p).round() as usize];
    let mean = d.iter().sum::<Duration>() / d.len().max(1) as u32;
    format!(
        "{:>10.2} µs mean, p50 {:.2}, p99 {:.2}, max {:.2} µs  (n={})",
        us(mean),
        us(pct(0.5)),
        us(pct(0.99)),
        us(pct(1.0)),
        d.len()
    )
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
