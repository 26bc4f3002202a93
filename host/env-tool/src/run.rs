//! `run`: the command line of the one episode loop (`vagen_rollout::Episodes`):
//! which plugin, policy, format and seeds; the summary and the log are `run_output`'s.

use crate::limits_arg::{limits_from, load};
use crate::policy::{ModelPolicyMaker, PolicyKind};
use crate::run_output::{Log, Shown, print_summary};
use anyhow::{Context, Result, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::time::Instant;
use vagen_rollout::{EpisodeShape, Episodes, FailurePolicy, Format, History, RolloutConfig, TooManyFailures};
use vagen_runtime::Plugin;
use vagen_runtime::fuzz::{Reproducer, Verdict, replay as replay_file};

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
    // The model's settings (`vagen-host` only) are plain fields, not a flattened group:
    // flattening one into RunArgs would break clap's "no subcommand means run".
    /// For `--policy model`: a Hugging Face model folder, or `default` (the embedded model),
    /// or a LoRA adapter folder (PEFT's layout; its base is the one it names).
    #[arg(long, default_value = "default")]
    pub model: String,
    /// For `--policy model`: a LoRA adapter folder (PEFT's layout) over `--model`.
    #[arg(long)]
    pub adapter: Option<PathBuf>,
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

/// A share in [0, 1]; NaN would silently disable the gate, a negative one fail every run.
fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        Ok(r) => Err(format!("{r} is not a share between 0 and 1")),
        Err(e) => Err(format!("{s:?}: {e}")),
    }
}

pub fn run(a: RunArgs, model: &ModelPolicyMaker) -> Result<()> {
    if let Some(file) = &a.replay {
        return replay(file, a.plugin.as_deref(), &a.limits, a.allow_native);
    }
    let path = a.plugin.clone().expect("clap requires --plugin without --replay");
    let plugin = load(&path, limits_from(&a.limits)?)?;
    let config = rollout_config(&a)?;
    let format = config.format;
    let mut policy = crate::policy::make(a.policy, format, plugin.manifest(), &a, model)?;
    let human = a.policy == PolicyKind::Human;
    if human && a.group_size > 1 {
        bail!("--policy human plays one episode at a time: drop --group-size");
    }
    let shape = EpisodeShape::groups_of(a.group_size).with_max_turns(a.max_turns.unwrap_or(0));
    let g = shape.group_size.get();
    // Instances live for one chunk of groups; the failure rate is judged between chunks. A
    // raw run keeps as many instances as step at once (a model's batch gains from more); a
    // person plays one episode at a time.
    let workers = a.parallel.unwrap_or_else(rayon::current_num_threads).max(1);
    let per_chunk = if format == Format::Raw { workers } else { workers * 4 };
    let chunk_groups = if human { 1 } else { per_chunk.div_ceil(g).max(1) };
    let episodes = Episodes {
        plugin: plugin.as_ref(),
        env_config: &a.env_config,
        config: &config,
        shape,
        failures: FailurePolicy::new(a.max_failure_rate),
        chunk_groups,
    };
    let seeds: Vec<u64> = (0..a.episodes.div_ceil(g)).map(|k| a.seed.wrapping_add(k as u64)).collect();
    let bar = if a.json || human { ProgressBar::hidden() } else { ProgressBar::new((seeds.len() * g) as u64) };
    bar.set_style(ProgressStyle::with_template("{bar:40} {pos}/{len} episodes {per_sec} [{elapsed}<{eta}]")?);
    let mut log = a.out.as_deref().map(|out| Log::create(out, format == Format::Raw)).transpose()?;
    let started = Instant::now();
    let outcome = episodes
        .run(&seeds, policy.as_mut(), &mut |chunk| {
            bar.inc(chunk.len() as u64);
            if human {
                chunk.iter().for_each(crate::policy::show_ending);
            }
            // Written as each chunk ends (a killed run keeps them); only the figures the
            // summary needs stay in memory, not the observations.
            if let Some(log) = &mut log {
                log.append(chunk).map_err(|e| vagen_rollout::RolloutError::Output(format!("{e:#}")))?;
            }
            chunk.iter_mut().for_each(slim);
            Ok(())
        })
        .with_context(|| format!("running {}", path.display()))?;
    bar.finish_and_clear();
    let shown = Shown {
        out: a.out.as_deref(),
        json: a.json,
        group_size: g,
        format,
        policy: policy.name(),
        wall_seconds: started.elapsed().as_secs_f64(),
    };
    print_summary(&outcome, plugin.manifest(), &shown)?;
    match outcome.verdict {
        Ok(()) => Ok(()),
        Err(e) => Err(failed_run(plugin.as_ref(), &a, &path, &e)),
    }
}

/// The format (raw without `--format`, free-think for a model) and history.
fn rollout_config(a: &RunArgs) -> Result<RolloutConfig> {
    let format = match (a.format.as_deref(), a.policy) {
        (Some(name), _) => Format::from_name(name).with_context(|| {
            let names: Vec<&str> = Format::ALL.iter().map(|f| f.name()).collect();
            format!("--format {name:?}: expected one of {}", names.join(", "))
        })?,
        (None, PolicyKind::Model) => Format::FreeThink,
        // Without a format, answers go to the env as the policy writes them.
        (None, _) => Format::Raw,
    };
    let history = match a.history.as_str() {
        // Raw answers are written from the current observation alone: no prompt to build.
        _ if format == Format::Raw => History::Last(0),
        "all" => History::All,
        n => History::Last(n.parse().with_context(|| format!("--history {n:?}: expected `all` or a number"))?),
    };
    Ok(RolloutConfig {
        format,
        history,
        // A person answers without a format: the line on what the last answer did is theirs.
        feedback: format != Format::Raw || a.policy == PolicyKind::Human,
        ..Default::default()
    })
}

/// A logged trajectory without its observations: what the summary needs stays.
fn slim(t: &mut vagen_rollout::Trajectory) {
    (t.end_observation, t.end_images) = Default::default();
    for turn in &mut t.turns {
        (turn.user, turn.observation, turn.images) = Default::default();
    }
}

/// The error a run ends with when too many episodes failed: the counts, the first error in
/// full, and where its reproducer went (beside `--out`, or beside the plugin in
/// `NAME-findings/`: never the working folder).
fn failed_run(plugin: &dyn Plugin, a: &RunArgs, path: &Path, e: &TooManyFailures) -> anyhow::Error {
    let dir = match a.out.as_deref().and_then(Path::parent).filter(|p| !p.as_os_str().is_empty()) {
        Some(beside_out) => beside_out.to_path_buf(),
        None => {
            let dir = crate::fuzz::findings_beside(path);
            if let Err(e) = std::fs::create_dir_all(&dir) {
                return anyhow::anyhow!("creating {} for the failed run's reproducer: {e}", dir.display());
            }
            dir
        }
    };
    // The name is the plugin's to choose: never a path.
    let file = dir.join(format!("{}-failure-seed{}.json", vagen_runtime::file_stem(&plugin.manifest().name), e.seed));
    let written = serde_json::to_string_pretty(&e.reproducer(plugin, &a.env_config))
        .map_err(anyhow::Error::from)
        .and_then(|text| std::fs::write(&file, text).with_context(|| format!("writing {}", file.display())));
    if let Err(w) = written {
        return w.context(format!("{} episodes of {} failed: {}", e.failed, path.display(), e.failure));
    }
    anyhow::anyhow!(
        "{} of {} episodes of {} failed (more than {:.0}% allowed by --max-failure-rate); first error: {}; reproducer: {} (replay with `{} run --replay {}`)",
        e.failed,
        e.total,
        path.display(),
        a.max_failure_rate * 100.0,
        e.failure,
        file.display(),
        crate::program(),
        file.display(),
    )
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
