//! `vagen-host run`: episodes in parallel over an env pool, a summary, and a JSONL log.

use crate::limits_arg::{limits_from, load};
use crate::policy::{Policy, PolicyKind};
use crate::record::{EpisodeLog, ImageSink, TurnRecord, write_row};
use anyhow::{Context, Result, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;
use vagen_runtime::fuzz::{Reproducer, Verdict, replay as replay_file};
use vagen_runtime::{EnvPool, Environment, Plugin};

#[derive(Args)]
pub struct RunArgs {
    /// The environment plugin (`.wasm` or `.so`).
    #[arg(long, required_unless_present = "replay")]
    pub plugin: Option<PathBuf>,
    /// Play back a reproducer saved by `fuzz` or by a failed run (its plugin unless --plugin).
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
    /// The run fails (exit status 1, with a reproducer) when more than this share of its
    /// episodes failed; judged at the end whatever the count, and from 20 episodes on also
    /// while running, to stop early.
    #[arg(long, default_value_t = 0.25, value_parser = parse_rate)]
    pub max_failure_rate: f64,
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
    /// Go through the full prompt → parse → step path with this reasoning format:
    /// no-think, free-think, grounding, world-modeling, grounding-world-modeling. Implied
    /// (free-think) by `--policy model`. Without it, answers go to the env as they are.
    #[arg(long)]
    pub format: Option<String>,
    /// Episodes per group; members of a group share their seed.
    #[arg(long, default_value_t = 1)]
    pub group_size: usize,
    /// Earlier turns each prompt carries: `all`, or a number (the last N).
    #[arg(long, default_value = "all")]
    pub history: String,
    /// For `--policy model`: a Hugging Face model folder, or `default` (the embedded model).
    #[arg(long, default_value = "default")]
    pub model: String,
    /// For `--policy model`: `auto`, `cpu`, `cuda` or `cuda:N`.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// For `--policy model`: f32, bf16 or f16.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Sampling temperature of `--policy model` (0: greedy).
    #[arg(long, default_value_t = 1.0)]
    pub temperature: f64,
    /// Tokens per response at most, for `--policy model`.
    #[arg(long, default_value_t = 256)]
    pub max_new_tokens: usize,
    /// For `--policy model`, a prompt that leaves too little room to answer in the model's
    /// context window: `end` its episode (truncated for context), or `drop-oldest` whole
    /// turns from the prompt until a full answer fits.
    #[arg(long, default_value = "end", value_parser = parse_overflow)]
    pub context_overflow: vagen_rollout::ContextOverflow,
    /// With `--replay` and no `--plugin`: let the reproducer's plugin path name a native
    /// `.so`, which runs unsandboxed (a shared reproducer alone never can).
    #[arg(long)]
    pub allow_native: bool,
}

fn parse_overflow(s: &str) -> Result<vagen_rollout::ContextOverflow, String> {
    serde_json::from_value(serde_json::Value::String(s.into()))
        .map_err(|_| format!("{s:?}: expected `end` or `drop-oldest`"))
}

struct Episode {
    index: usize,
    seed: u64,
    answers: Vec<String>,
    /// The env call an error came from: 0 `reset`, k the k-th `step`; `None` for errors
    /// from elsewhere (the policy, writing images).
    failed_call: Option<usize>,
    success: bool,
    reward: f64,
    turns: u32,
    steps: u64,
    error: Option<String>,
}

/// Episodes judged before the failure rate can stop a run early (the end always judges).
pub const MIN_EPISODES_FOR_RATE: u64 = 20;

/// A share in [0, 1]; NaN would silently disable the gate, a negative one fail every run.
fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        Ok(r) => Err(format!("{r} is not a share between 0 and 1")),
        Err(e) => Err(format!("{s:?}: {e}")),
    }
}

/// Whether `failed` of `total` episodes exceeds the allowed share.
pub fn too_many_failures(failed: usize, total: usize, max_rate: f64) -> bool {
    failed > 0 && failed as f64 > max_rate * total as f64
}

/// The error a run ends with when too many episodes failed: counts, the first error in full,
/// and where its reproducer went.
pub fn failed_run(
    failed: usize,
    total: usize,
    plugin: &Path,
    max_rate: f64,
    first: &str,
    file: &Path,
) -> anyhow::Error {
    anyhow::anyhow!(
        "{failed} of {total} episodes of {} failed (more than {:.0}% allowed by --max-failure-rate); first error: {first}; reproducer: {} (replay with `vagen-host run --replay {}`)",
        plugin.display(),
        max_rate * 100.0,
        file.display(),
        file.display(),
    )
}

pub fn run(a: RunArgs) -> Result<()> {
    if let Some(file) = &a.replay {
        return replay(file, a.plugin.as_deref(), &a.limits, a.allow_native);
    }
    let path = a.plugin.clone().expect("clap requires --plugin without --replay");
    let plugin = load(&path, limits_from(&a.limits)?)?;
    if a.format.is_some() || a.policy == PolicyKind::Model {
        return crate::rollout_run::run(&a, plugin, &path);
    }
    let manifest = plugin.manifest().clone();
    let policy = Policy::new(a.policy, &manifest)?;
    let max_turns = plugin.max_turns(a.max_turns);
    let human = policy.kind() == PolicyKind::Human;
    let workers =
        if human { 1 } else { a.parallel.unwrap_or_else(rayon::current_num_threads).clamp(1, a.episodes.max(1)) };
    let envs = (0..workers)
        .map(|_| plugin.create(&a.env_config))
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("creating {} from {}", manifest.name, path.display()))?;
    let mut pool = EnvPool::new(envs);
    let fallback = human.then(|| std::env::temp_dir().join("vagen-human"));
    let sink = ImageSink::new(a.out.as_deref(), fallback);
    let log = a.out.as_deref().map(EpisodeLog::create).transpose()?;
    if human {
        println!("{}\n", pool.get_mut(0).system_prompt()?);
    }

    let bar = if human || a.json { ProgressBar::hidden() } else { ProgressBar::new(a.episodes as u64) };
    bar.set_style(ProgressStyle::with_template("{bar:40} {pos}/{len} episodes {per_sec} [{elapsed}<{eta}]")?);
    let started = Instant::now();
    let (finished, failed, stop) = (AtomicU64::new(0), AtomicU64::new(0), AtomicBool::new(false));
    let per_worker = pool.for_each(|w, env| {
        let mut eps = Vec::new();
        for i in (w..a.episodes).step_by(workers) {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let ep = episode(env, &policy, &sink, log.as_ref(), i, a.seed.wrapping_add(i as u64), max_turns, human);
            let n = finished.fetch_add(1, Ordering::Relaxed) + 1;
            let f = failed.fetch_add(u64::from(ep.error.is_some()), Ordering::Relaxed) + u64::from(ep.error.is_some());
            if n >= MIN_EPISODES_FOR_RATE && too_many_failures(f as usize, n as usize, a.max_failure_rate) {
                stop.store(true, Ordering::Relaxed);
            }
            bar.inc(1);
            eps.push(ep);
        }
        eps
    });
    let wall = started.elapsed().as_secs_f64();
    bar.finish_and_clear();

    let mut episodes: Vec<Episode> = per_worker.into_iter().flatten().collect();
    episodes.sort_by_key(|e| e.index);
    let summary = Summary::of(&episodes, wall, a.episodes);
    for e in episodes.iter().filter_map(|e| e.error.as_ref().map(|m| (e.index, m))).take(5) {
        eprintln!("episode {} failed: {}", e.0, e.1);
    }
    let first_failure = episodes
        .iter()
        .find(|e| e.error.is_some())
        .map(|e| (e.seed, e.answers.clone(), e.error.clone(), e.failed_call));
    if let Some(log) = log {
        log.close()?;
    }
    summary.print(&manifest.name, a.out.as_ref());
    if a.json {
        println!("{}", serde_json::to_string(&summary)?);
    }
    if too_many_failures(summary.failed_episodes, summary.episodes, a.max_failure_rate) {
        let (seed, answers, error, call) = first_failure.expect("failures were counted");
        let error = error.unwrap_or_default();
        let file = save_answers(plugin.as_ref(), &a, seed, &answers, &error, call)?;
        return Err(failed_run(summary.failed_episodes, summary.episodes, &path, a.max_failure_rate, &error, &file));
    }
    Ok(())
}

/// One whole episode on one env, its rows going to `log` as they happen. Faults end the
/// episode as failed; the run goes on.
#[allow(clippy::too_many_arguments)]
fn episode(
    env: &mut dyn Environment,
    policy: &Policy,
    sink: &ImageSink,
    log: Option<&EpisodeLog>,
    index: usize,
    seed: u64,
    max_turns: u32,
    human: bool,
) -> Episode {
    let mut ep = Episode {
        index,
        seed,
        answers: Vec::new(),
        failed_call: None,
        success: false,
        reward: 0.0,
        turns: 0,
        steps: 0,
        error: None,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xA11CE);
    let mut part = log.map(|l| l.episode(index)).transpose();
    let mut record = |r: TurnRecord| -> Result<()> {
        match &mut part {
            Ok(Some(w)) => write_row(w, &r),
            Ok(None) => Ok(()),
            Err(e) => Err(anyhow::anyhow!("{e:#}")),
        }
    };
    let reset_done = std::cell::Cell::new(false);
    let result = (|| -> Result<()> {
        let obs = env.reset(seed)?;
        reset_done.set(true);
        let images = sink.save(index, 0, &obs.images)?;
        if human {
            show(&obs.text, &images);
        }
        record(row(index, seed, 0, None, obs.text, images))?;
        for turn in 1..=max_turns {
            let Some(answer) = policy.answer(env, &mut rng)? else {
                break;
            };
            ep.answers.push(answer.clone());
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
            record(r)?;
            if step.done {
                ep.success = step.success;
                break;
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        let msg = format!("{e:#}");
        ep.failed_call = match e.downcast_ref::<vagen_runtime::Error>() {
            // reset failed before anything was shown; a step failed after its answer was kept.
            Some(_) if !reset_done.get() => Some(0),
            Some(_) if ep.answers.len() as u64 > ep.steps => Some(ep.answers.len()),
            _ => None,
        };
        let mut r = row(index, seed, ep.turns + 1, None, String::new(), Vec::new());
        r.error = Some(msg.clone());
        if let Err(e) = record(r) {
            ep.error = Some(format!("{msg}; and writing its row: {e:#}"));
        }
        ep.error.get_or_insert(msg);
    }
    if let (Ok(Some(mut w)), Some(log)) = (part, log) {
        let written = std::io::Write::flush(&mut w).map_err(anyhow::Error::from).and_then(|()| log.finish(index));
        if let Err(e) = written {
            ep.error.get_or_insert(format!("writing the episode's rows: {e:#}"));
        }
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

/// Success counts every episode played (a failed one is not a success); reward and turns
/// average the episodes that completed, and are absent when none did, rather than 0.
#[derive(serde::Serialize)]
struct Summary {
    episodes: usize,
    /// Episodes asked for; more than `episodes` when the failure rate stopped the run early.
    requested: usize,
    failed_episodes: usize,
    first_error: Option<String>,
    success_rate: f64,
    mean_reward: Option<f64>,
    mean_turns: Option<f64>,
    env_steps: u64,
    env_steps_per_sec: f64,
    wall_seconds: f64,
}

impl Summary {
    fn of(eps: &[Episode], wall: f64, requested: usize) -> Self {
        let done: Vec<&Episode> = eps.iter().filter(|e| e.error.is_none()).collect();
        let mean = |f: fn(&Episode) -> f64| {
            (!done.is_empty()).then(|| done.iter().map(|e| f(e)).sum::<f64>() / done.len() as f64)
        };
        let env_steps: u64 = eps.iter().map(|e| e.steps).sum();
        Self {
            episodes: eps.len(),
            requested,
            failed_episodes: eps.len() - done.len(),
            first_error: eps.iter().find_map(|e| e.error.clone()),
            success_rate: eps.iter().filter(|e| e.success).count() as f64 / eps.len().max(1) as f64,
            mean_reward: mean(|e| e.reward),
            mean_turns: mean(|e| f64::from(e.turns)),
            env_steps,
            env_steps_per_sec: if wall > 0.0 { env_steps as f64 / wall } else { 0.0 },
            wall_seconds: wall,
        }
    }

    fn print(&self, name: &str, out: Option<&PathBuf>) {
        let stopped = if self.episodes < self.requested {
            format!(", stopped early of {} asked", self.requested)
        } else {
            String::new()
        };
        println!("{name}: {} episodes ({} failed{stopped})", self.episodes, self.failed_episodes);
        if let Some(e) = &self.first_error {
            println!("  first error     {e}");
        }
        let or_none = |x: Option<f64>, digits: usize| {
            x.map_or_else(|| "n/a (no episode completed)".to_string(), |v| format!("{v:.digits$}"))
        };
        println!("  success rate    {:.3}", self.success_rate);
        println!("  mean reward     {}", or_none(self.mean_reward, 3));
        println!("  mean turns      {}", or_none(self.mean_turns, 2));
        println!(
            "  env steps       {} in {:.2} s = {:.0} steps/s",
            self.env_steps, self.wall_seconds, self.env_steps_per_sec
        );
        if let Some(out) = out {
            println!("  log             {}", out.display());
        }
    }
}

/// Writes a failed episode's seed, answers and error where `--out` goes (or the working
/// folder).
pub fn save_answers(
    plugin: &dyn Plugin,
    a: &RunArgs,
    seed: u64,
    answers: &[String],
    error: &str,
    failed_call: Option<usize>,
) -> Result<PathBuf> {
    let r = Reproducer::failure(plugin, &a.env_config, seed, answers.to_vec(), error, failed_call);
    let dir = a.out.as_deref().and_then(Path::parent).filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    // The name is the plugin's to choose: never a path.
    let file = dir.join(format!("{}-failure-seed{}.json", vagen_runtime::file_stem(&plugin.manifest().name), seed));
    std::fs::write(&file, serde_json::to_string_pretty(&r)?).with_context(|| format!("writing {}", file.display()))?;
    Ok(file)
}

/// `run --replay FILE`: plays a reproducer back. Exit status 1 when the recorded failure
/// shows again (the env still fails), [`NOT_REPRODUCED`] when it does not, with the reason.
fn replay(file: &Path, plugin: Option<&Path>, limits: &[String], allow_native: bool) -> Result<()> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let r: Reproducer =
        serde_json::from_str(&text).with_context(|| format!("{} is not a reproducer", file.display()))?;
    // A path given on the command line is the user's; one read from the file is not.
    let runtime = vagen_runtime::Runtime::new(limits_from(limits)?)?;
    let (path, loaded) = match plugin {
        Some(p) => (p.to_path_buf(), runtime.load(p)?),
        None => (r.plugin.clone(), runtime.load_named_in(&r.plugin, file, allow_native)?),
    };
    let changed = r.recorded_on_another_build(loaded.as_ref());
    if changed {
        eprintln!("note: {} is not the build the reproducer was saved with", path.display());
    }
    let out = replay_file(loaded.as_ref(), &r)?;
    for line in &out.lines {
        println!("{line}");
    }
    match out.verdict {
        Verdict::Reproduced(what) => bail!("reproduced: {what}"),
        Verdict::NotReproduced(why) => {
            let changed = if changed { " (the plugin file has changed since it was recorded)" } else { "" };
            Err(crate::Exit { code: NOT_REPRODUCED, message: format!("not reproduced{changed}: {why}") }.into())
        }
    }
}

/// `run --replay`'s exit status when the recorded outcome did not recur.
pub const NOT_REPRODUCED: i32 = 3;
