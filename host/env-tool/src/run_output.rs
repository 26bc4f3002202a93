//! What `vagen-host run` shows and writes: the summary, and the `--out` log (a row per
//! reset or step without a format, a row per trajectory with one), images as PNG beside it.

use crate::record::{ImageSink, episode_rows, write_row};
use anyhow::{Context, Result};
use serde::Serialize;
use std::io::Write;
use std::path::Path;
use vagen_rollout::{Format, Outcome, Trajectory, metrics};
use vagen_runtime::Manifest;

/// `--out`, appended chunk by chunk in episode order.
pub struct Log {
    path: std::path::PathBuf,
    w: std::io::BufWriter<std::fs::File>,
    images: ImageSink,
    /// A row per reset or step (raw runs), else per trajectory.
    rows: bool,
    episodes: usize,
}

/// A trajectory row: every turn with what the policy saw and wrote, images as PNG paths.
#[derive(Serialize)]
struct TrajectoryRow<'a> {
    episode: usize,
    #[serde(flatten)]
    trajectory: &'a Trajectory,
    total_reward: f64,
    images: Vec<Vec<String>>,
}

impl Log {
    pub fn create(out: &Path, rows: bool) -> Result<Self> {
        if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        let file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
        let (w, images) = (std::io::BufWriter::new(file), ImageSink::new(Some(out), None));
        Ok(Self { path: out.to_path_buf(), w, images, rows, episodes: 0 })
    }

    pub fn append(&mut self, trajs: &[Trajectory]) -> Result<()> {
        for t in trajs {
            let episode = self.episodes;
            if self.rows {
                for row in episode_rows(episode, t, &self.images)? {
                    write_row(&mut self.w, &row)?;
                }
            } else {
                let images = (t.turns.iter().enumerate())
                    .map(|(k, turn)| self.images.save(episode, k as u32, &turn.images))
                    .collect::<Result<Vec<_>>>()?;
                let row = TrajectoryRow { episode, trajectory: t, total_reward: t.total_reward(), images };
                serde_json::to_writer(&mut self.w, &row)?;
                self.w.write_all(b"\n")?;
            }
            self.episodes += 1;
        }
        self.w.flush().with_context(|| format!("writing {}", self.path.display()))
    }
}

/// How a run is summed up: where its log went, whether the last line is JSON.
pub struct Shown<'a> {
    pub out: Option<&'a Path>,
    pub json: bool,
    pub group_size: usize,
    pub format: Format,
    pub policy: &'a str,
    pub wall_seconds: f64,
}

/// The summary on stdout (the last line JSON with `--json`); failed episodes named first.
pub fn print_summary(o: &Outcome, m: &Manifest, a: &Shown) -> Result<()> {
    let (format, policy, wall) = (a.format, a.policy, a.wall_seconds);
    for t in o.trajectories.iter().filter(|t| t.failure.is_some()).take(5) {
        let f = t.failure.as_ref().expect("failed");
        eprintln!("episode (group {}, member {}) failed: {f}", t.group, t.member);
    }
    if format == Format::Raw {
        let s = RawSummary::of(&o.trajectories, wall, o.requested);
        s.print(&m.name, a.out);
        if a.json {
            println!("{}", serde_json::to_string(&s)?);
        }
        return Ok(());
    }
    let r = metrics(&o.trajectories);
    println!("{} [{} via {policy}]: {} episodes ({} failed)", m.name, format.name(), r.episodes, r.failed);
    if let Some(e) = o.trajectories.iter().find_map(|t| t.failure.as_ref()) {
        println!("  first error     {e}");
    }
    if r.truncated_context > 0 {
        println!("  out of context  {} episodes ended when the prompt outgrew the context window", r.truncated_context);
    }
    println!("  success rate    {:.3}   pass@{} {:.3}", r.success, a.group_size, r.pass_at_group);
    // Averages over completed episodes: with none, a figure would be a made-up 0.
    if r.failed < r.episodes {
        println!("  mean reward     {:.3}", r.mean_reward);
        println!("  mean turns      {:.2}", r.mean_turns);
    } else {
        println!("  mean reward     n/a (no episode completed)");
        println!("  mean turns      n/a (no episode completed)");
    }
    println!("  actions valid   {:.3}   effective {:.3}", r.valid_action_rate, r.effective_action_rate);
    println!("  format correct  {:.3}", r.format_correct_rate);
    match r.mean_response_tokens {
        Some(t) => println!("  response length {:.1} tokens ({:.0} chars)", t, r.mean_response_chars),
        None => println!("  response length {:.0} chars", r.mean_response_chars),
    }
    if let Some(out) = &a.out {
        println!("  log             {}", out.display());
    }
    if a.json {
        let summary = serde_json::json!({ "env": m.name, "format": format.name(), "metrics": r });
        println!("{}", serde_json::to_string(&summary)?);
    }
    Ok(())
}

/// A raw run's figures. Success counts every episode played (a failed one is not a
/// success); reward and turns average the episodes that completed, and are absent when
/// none did, rather than 0.
#[derive(Serialize)]
struct RawSummary {
    episodes: usize,
    /// Episodes asked for; more than `episodes` when the failure rate stopped the run early.
    requested: usize,
    failed_episodes: usize,
    /// Failed episodes by call and error kind.
    failures: std::collections::BTreeMap<String, usize>,
    first_error: Option<String>,
    success_rate: f64,
    mean_reward: Option<f64>,
    mean_turns: Option<f64>,
    env_steps: u64,
    env_steps_per_sec: f64,
    wall_seconds: f64,
}

impl RawSummary {
    fn of(trajs: &[Trajectory], wall: f64, requested: usize) -> Self {
        let done: Vec<&Trajectory> = trajs.iter().filter(|t| t.failure.is_none()).collect();
        let mean = |f: fn(&Trajectory) -> f64| {
            (!done.is_empty()).then(|| done.iter().map(|t| f(t)).sum::<f64>() / done.len() as f64)
        };
        // A failed step was still a call.
        let env_steps: u64 = trajs.iter().map(|t| t.turns.len() as u64 + u64::from(t.failed_answer.is_some())).sum();
        Self {
            episodes: trajs.len(),
            requested,
            failed_episodes: trajs.len() - done.len(),
            failures: vagen_rollout::count_failures(trajs),
            first_error: trajs.iter().find_map(|t| t.failure.as_ref().map(|f| f.to_string())),
            success_rate: trajs.iter().filter(|t| t.success).count() as f64 / trajs.len().max(1) as f64,
            mean_reward: mean(|t| t.turns.iter().map(|x| x.env_reward).sum()),
            mean_turns: mean(|t| t.turns.len() as f64),
            env_steps,
            env_steps_per_sec: if wall > 0.0 { env_steps as f64 / wall } else { 0.0 },
            wall_seconds: wall,
        }
    }

    fn print(&self, name: &str, out: Option<&Path>) {
        let stopped = if self.episodes < self.requested {
            format!(", stopped early of {} asked", self.requested)
        } else {
            String::new()
        };
        println!("{name}: {} episodes ({} failed{stopped})", self.episodes, self.failed_episodes);
        if let Some(e) = &self.first_error {
            println!("  failures        {}", vagen_rollout::counts_text(&self.failures));
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
