//! `vagen-host run`: episodes in parallel over an env pool, a summary, and a JSONL log.

use crate::limits_arg::{limits_from, load};
use crate::policy::{Policy, PolicyKind};
use crate::record::{ImageSink, TurnRecord, write_jsonl};
use anyhow::{Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::path::PathBuf;
use std::time::Instant;
use vagen_runtime::{EnvPool, Environment};

#[derive(Args)]
pub struct RunArgs {
    /// The environment plugin (`.wasm`).
    #[arg(long)]
    pub plugin: PathBuf,
    /// Who answers.
    #[arg(long, value_enum, default_value_t = PolicyKind::Random)]
    pub policy: PolicyKind,
    #[arg(long, default_value_t = 10)]
    pub episodes: usize,
    /// Episode i uses seed S + i.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// JSON object overriding the plugin's default config.
    #[arg(long, default_value = "")]
    pub env_config: String,
    /// Turns per episode (default: the plugin's `default-max-turns`).
    #[arg(long)]
    pub max_turns: Option<u32>,
    /// Write every turn as a JSONL row here, images as PNG files in `<FILE>.images/`.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Make the last stdout line a JSON summary.
    #[arg(long)]
    pub json: bool,
    /// Environment instances stepping in parallel (default: one per CPU).
    #[arg(long)]
    pub parallel: Option<usize>,
    /// Sandbox limit override, e.g. `--limit call_timeout_ms=500` (repeatable).
    #[arg(long = "limit", value_name = "KEY=VALUE")]
    pub limits: Vec<String>,
}

struct Episode {
    index: usize,
    success: bool,
    reward: f64,
    turns: u32,
    steps: u64,
    error: Option<String>,
    rows: Vec<TurnRecord>,
}

pub fn run(a: RunArgs) -> Result<()> {
    let plugin = load(&a.plugin, limits_from(&a.limits)?)?;
    let manifest = plugin.manifest().clone();
    let policy = Policy::new(a.policy, &manifest)?;
    let max_turns = a.max_turns.unwrap_or(manifest.default_max_turns);
    let human = policy.kind() == PolicyKind::Human;
    let workers =
        if human { 1 } else { a.parallel.unwrap_or_else(rayon::current_num_threads).clamp(1, a.episodes.max(1)) };
    let envs = (0..workers)
        .map(|_| plugin.create(&a.env_config))
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("creating {} from {}", manifest.name, a.plugin.display()))?;
    let mut pool = EnvPool::new(envs);
    let fallback = human.then(|| std::env::temp_dir().join("vagen-human"));
    let sink = ImageSink::new(a.out.as_deref(), fallback);
    if human {
        println!("{}\n", pool.get_mut(0).system_prompt()?);
    }

    let bar = if human || a.json { ProgressBar::hidden() } else { ProgressBar::new(a.episodes as u64) };
    bar.set_style(ProgressStyle::with_template("{bar:40} {pos}/{len} episodes {per_sec} [{elapsed}<{eta}]")?);
    let started = Instant::now();
    let per_worker = pool.for_each(|w, env| {
        (w..a.episodes)
            .step_by(workers)
            .map(|i| {
                let ep = episode(env, &policy, &sink, i, a.seed.wrapping_add(i as u64), max_turns, human);
                bar.inc(1);
                ep
            })
            .collect::<Vec<_>>()
    });
    let wall = started.elapsed().as_secs_f64();
    bar.finish_and_clear();

    let mut episodes: Vec<Episode> = per_worker.into_iter().flatten().collect();
    episodes.sort_by_key(|e| e.index);
    let summary = Summary::of(&episodes, wall);
    for e in episodes.iter().filter_map(|e| e.error.as_ref().map(|m| (e.index, m))).take(5) {
        eprintln!("episode {} failed: {}", e.0, e.1);
    }
    if let Some(out) = &a.out {
        write_jsonl(out, episodes.into_iter().flat_map(|e| e.rows))?;
    }
    summary.print(&manifest.name, a.out.as_ref());
    if a.json {
        println!("{}", serde_json::to_string(&summary)?);
    }
    Ok(())
}

/// One whole episode on one env. Faults end the episode as failed; the run goes on.
fn episode(
    env: &mut dyn Environment,
    policy: &Policy,
    sink: &ImageSink,
    index: usize,
    seed: u64,
    max_turns: u32,
    human: bool,
) -> Episode {
    let mut ep = Episode { index, success: false, reward: 0.0, turns: 0, steps: 0, error: None, rows: Vec::new() };
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xA11CE);
    let result = (|| -> Result<()> {
        let obs = env.reset(seed)?;
        let images = sink.save(index, 0, &obs.images)?;
        if human {
            show(&obs.text, &images);
        }
        ep.rows.push(row(index, seed, 0, None, obs.text, images));
        for turn in 1..=max_turns {
            let Some(answer) = policy.answer(env, &mut rng)? else {
                break;
            };
            let step = env.step(&answer)?;
            ep.steps += 1;
            ep.turns = turn;
            ep.reward += step.reward;
            let images = sink.save(index, turn, &step.observation.images)?;
            if human {
                show(&format!("reward {:+}\n{}", step.reward, step.observation.text), &images);
            }
            let mut r = row(index, seed, turn, Some(answer), step.observation.text, images);
            (r.reward, r.done, r.success) = (step.reward, step.done, step.success);
            (r.valid_actions, r.effective_actions, r.metrics) =
                (step.valid_actions, step.effective_actions, step.metrics);
            ep.rows.push(r);
            if step.done {
                ep.success = step.success;
                break;
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        let msg = format!("{e:#}");
        let mut r = row(index, seed, ep.turns + 1, None, String::new(), Vec::new());
        r.error = Some(msg.clone());
        ep.rows.push(r);
        ep.error = Some(msg);
    }
    ep
}

fn row(
    episode: usize,
    seed: u64,
    turn: u32,
    answer: Option<String>,
    observation: String,
    images: Vec<String>,
) -> TurnRecord {
    TurnRecord {
        episode,
        seed,
        turn,
        answer,
        observation,
        images,
        reward: 0.0,
        done: false,
        success: false,
        valid_actions: 0,
        effective_actions: 0,
        metrics: Vec::new(),
        error: None,
    }
}

fn show(text: &str, images: &[String]) {
    println!("{text}");
    for p in images {
        println!("[image: {p}]");
    }
}

#[derive(serde::Serialize)]
struct Summary {
    episodes: usize,
    failed_episodes: usize,
    success_rate: f64,
    mean_reward: f64,
    mean_turns: f64,
    env_steps: u64,
    env_steps_per_sec: f64,
    wall_seconds: f64,
}

impl Summary {
    fn of(eps: &[Episode], wall: f64) -> Self {
        let n = eps.len().max(1) as f64;
        let env_steps: u64 = eps.iter().map(|e| e.steps).sum();
        Self {
            episodes: eps.len(),
            failed_episodes: eps.iter().filter(|e| e.error.is_some()).count(),
            success_rate: eps.iter().filter(|e| e.success).count() as f64 / n,
            mean_reward: eps.iter().map(|e| e.reward).sum::<f64>() / n,
            mean_turns: eps.iter().map(|e| e.turns as f64).sum::<f64>() / n,
            env_steps,
            env_steps_per_sec: if wall > 0.0 { env_steps as f64 / wall } else { 0.0 },
            wall_seconds: wall,
        }
    }

    fn print(&self, name: &str, out: Option<&PathBuf>) {
        println!("{name}: {} episodes ({} failed)", self.episodes, self.failed_episodes);
        println!("  success rate    {:.3}", self.success_rate);
        println!("  mean reward     {:.3}", self.mean_reward);
        println!("  mean turns      {:.2}", self.mean_turns);
        println!(
            "  env steps       {} in {:.2} s = {:.0} steps/s",
            self.env_steps, self.wall_seconds, self.env_steps_per_sec
        );
        if let Some(out) = out {
            println!("  log             {}", out.display());
        }
    }
}
