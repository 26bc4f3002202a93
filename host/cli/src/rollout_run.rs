//! `vagen-host run --format NAME` / `--policy model`: episodes through the rollout driver
//! (prompt → policy → parse → step), one JSONL row per trajectory.

use crate::model_args::ModelArgs;
use crate::policy::PolicyKind;
use crate::record::ImageSink;
use crate::run::{MIN_EPISODES_FOR_RATE, RunArgs, failed_run, save_answers, too_many_failures};
use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use vagen_model::{GenerateOptions, ModelPolicy};
use vagen_rollout::{Format, History, OraclePolicy, Policy, RandomPolicy, RolloutConfig, Trajectory, metrics, rollout};
use vagen_runtime::Plugin;

pub fn run(a: &RunArgs, plugin: Arc<dyn Plugin>, path: &Path) -> Result<()> {
    let format = match a.format.as_deref() {
        None => Format::FreeThink,
        Some(name) => Format::from_name(name).with_context(|| {
            let names: Vec<&str> = Format::ALL.iter().map(|f| f.name()).collect();
            format!("--format {name:?}: expected one of {}", names.join(", "))
        })?,
    };
    let history = match a.history.as_str() {
        "all" => History::All,
        n => History::Last(n.parse().with_context(|| format!("--history {n:?}: expected `all` or a number"))?),
    };
    let manifest = plugin.manifest().clone();
    let mut policy: Box<dyn Policy> = match a.policy {
        PolicyKind::Random => Box::new(RandomPolicy { format }),
        PolicyKind::Oracle if !manifest.has_oracle => bail!("{} has no oracle", manifest.name),
        PolicyKind::Oracle => Box::new(OraclePolicy { format }),
        PolicyKind::Model => {
            let options = GenerateOptions {
                max_new_tokens: a.max_new_tokens,
                temperature: a.temperature,
                stop: vec!["</answer>".into()],
                seed: a.seed,
                ..Default::default()
            };
            // Flattening ModelArgs into RunArgs would break clap's "no subcommand means run".
            let args = ModelArgs { model: a.model.clone(), device: a.device.clone(), dtype: a.dtype.clone() };
            Box::new(ModelPolicy::new(std::rc::Rc::new(args.load()?), options).with_overflow(a.context_overflow))
        }
        PolicyKind::Human => bail!("the human policy types raw answers: drop --format"),
    };
    let config = RolloutConfig {
        format,
        group_size: a.group_size.max(1),
        max_turns: a.max_turns.unwrap_or(0) as usize,
        history,
        ..Default::default()
    };
    let g = config.group_size;
    let groups = a.episodes.div_ceil(g);
    // Instances live for one chunk of groups; the failure rate is judged between chunks.
    let per_chunk = (a.parallel.unwrap_or_else(rayon::current_num_threads).max(1) * 4).div_ceil(g).max(1);
    let bar = if a.json { ProgressBar::hidden() } else { ProgressBar::new((groups * g) as u64) };
    bar.set_style(ProgressStyle::with_template("{bar:40} {pos}/{len} episodes {per_sec} [{elapsed}<{eta}]")?);
    let mut trajs: Vec<Trajectory> = Vec::new();
    let mut log = a.out.as_deref().map(TrajectoryLog::create).transpose()?;
    for start in (0..groups).step_by(per_chunk) {
        let seeds: Vec<u64> = (start..(start + per_chunk).min(groups)).map(|k| a.seed.wrapping_add(k as u64)).collect();
        let mut chunk = rollout(plugin.as_ref(), &a.env_config, &seeds, &config, policy.as_mut())
            .with_context(|| format!("rollout on {}", path.display()))?;
        for t in &mut chunk {
            t.group += start;
        }
        bar.inc(chunk.len() as u64);
        // Written as each chunk ends (a killed run keeps them); only the figures the summary
        // needs stay in memory, not the observations.
        if let Some(log) = &mut log {
            log.append(&chunk)?;
        }
        for t in &mut chunk {
            for turn in &mut t.turns {
                (turn.user, turn.observation, turn.images) = Default::default();
            }
        }
        trajs.extend(chunk);
        let failed = trajs.iter().filter(|t| t.failure.is_some()).count();
        if trajs.len() as u64 >= MIN_EPISODES_FOR_RATE && too_many_failures(failed, trajs.len(), a.max_failure_rate) {
            break;
        }
    }
    bar.finish_and_clear();
    let m = metrics(&trajs);
    for t in trajs.iter().filter(|t| t.failure.is_some()).take(5) {
        eprintln!("episode (group {}, member {}) failed: {}", t.group, t.member, t.failure.as_deref().unwrap_or(""));
    }
    println!(
        "{} [{} via {}]: {} episodes ({} failed)",
        manifest.name,
        format.name(),
        policy.name(),
        m.episodes,
        m.failed
    );
    if let Some(e) = trajs.iter().find_map(|t| t.failure.as_deref()) {
        println!("  first error     {e}");
    }
    if m.truncated_context > 0 {
        println!("  out of context  {} episodes ended when the prompt outgrew the context window", m.truncated_context);
    }
    println!("  success rate    {:.3}   pass@{g} {:.3}", m.success, m.pass_at_group);
    // Averages over completed episodes: with none, a figure would be a made-up 0.
    if m.failed < m.episodes {
        println!("  mean reward     {:.3}", m.mean_reward);
        println!("  mean turns      {:.2}", m.mean_turns);
    } else {
        println!("  mean reward     n/a (no episode completed)");
        println!("  mean turns      n/a (no episode completed)");
    }
    println!("  actions valid   {:.3}   effective {:.3}", m.valid_action_rate, m.effective_action_rate);
    println!("  format correct  {:.3}", m.format_correct_rate);
    match m.mean_response_tokens {
        Some(t) => println!("  response length {:.1} tokens ({:.0} chars)", t, m.mean_response_chars),
        None => println!("  response length {:.0} chars", m.mean_response_chars),
    }
    if let Some(out) = &a.out {
        println!("  log             {}", out.display());
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string(&serde_json::json!({ "env": manifest.name, "format": format.name(), "metrics": m }))?
        );
    }
    if too_many_failures(m.failed, m.episodes, a.max_failure_rate) {
        let bad = trajs.iter().find(|t| t.failure.is_some()).expect("failures were counted");
        let error = bad.failure.as_deref().unwrap_or("");
        let answers = bad.answers();
        let file = save_answers(plugin.as_ref(), a, bad.seed, &answers, error, Some(answers.len()))?;
        return Err(failed_run(m.failed, m.episodes, path, a.max_failure_rate, error, &file));
    }
    Ok(())
}

/// A trajectory row: every turn with what the policy saw and wrote, images as PNG paths.
#[derive(Serialize)]
struct Row<'a> {
    episode: usize,
    #[serde(flatten)]
    trajectory: &'a Trajectory,
    total_reward: f64,
    images: Vec<Vec<String>>,
}

/// `--out`: one row per trajectory, appended chunk by chunk, images as PNG beside it.
struct TrajectoryLog {
    path: std::path::PathBuf,
    w: std::io::BufWriter<std::fs::File>,
    sink: ImageSink,
    episodes: usize,
}

impl TrajectoryLog {
    fn create(out: &Path) -> Result<Self> {
        if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        let file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
        let (w, sink) = (std::io::BufWriter::new(file), ImageSink::new(Some(out), None));
        Ok(Self { path: out.to_path_buf(), w, sink, episodes: 0 })
    }

    fn append(&mut self, trajs: &[Trajectory]) -> Result<()> {
        for t in trajs {
            let episode = self.episodes;
            let images = t
                .turns
                .iter()
                .enumerate()
                .map(|(k, turn)| self.sink.save(episode, k as u32, &turn.images))
                .collect::<Result<Vec<_>>>()?;
            serde_json::to_writer(
                &mut self.w,
                &Row { episode, trajectory: t, total_reward: t.total_reward(), images },
            )?;
            self.w.write_all(b"\n")?;
            self.episodes += 1;
        }
        self.w.flush().with_context(|| format!("writing {}", self.path.display()))
    }
}
