//! `eval --config` of a harness run (`[env] harness`): its held-out episodes as the run
//! evaluates them (the same seeds, draws and sampling), each run of the harness answered by a
//! local model (`--policy model`, through the run's own endpoint) or by an OpenAI-compatible
//! server (`--policy openai`: the calls forwarded with the run's evaluation sampling in place
//! of the harness's). Prints success (the run's `val/success`), reward and failures.

use super::args::{EvalArgs, PolicyChoice};
use anyhow::{Context, Result, bail};
use serde::Serialize;
use std::collections::BTreeMap;
use vagen_trainer::TrainConfig;

/// What `eval` prints (and writes as `summary.json` with `--out`).
#[derive(Serialize)]
struct HarnessSummary {
    episodes: usize,
    success: f64,
    mean_reward: f64,
    failed: usize,
    failures: BTreeMap<String, usize>,
    mean_calls: f64,
    seconds: f64,
}

pub fn eval_harness(a: &EvalArgs, cfg: &TrainConfig) -> Result<()> {
    super::args::check_args(a)?;
    if a.resume {
        bail!("--resume: a harness evaluation is played whole (it keeps no results.jsonl to resume from)");
    }
    let harness = cfg.env.harness.clone().expect("a harness config");
    let samples = a.samples.unwrap_or(cfg.env.val_samples);
    let (tasks, sampling) = vagen_trainer::held_out_harness(cfg, samples, a.temperature)?;
    let need_reward = cfg.rewards.is_empty();
    let started = std::time::Instant::now();
    let runs = match a.policy {
        PolicyChoice::Model => {
            let mut cfg = cfg.clone();
            let text = a.model.clone().expect("clap requires --model with --policy model");
            cfg.model.path = text.parse().with_context(|| format!("--model {text:?}"))?;
            (cfg.model.device, cfg.model.dtype) = (a.device, a.dtype);
            let mut model = vagen_trainer::load_model(&cfg, None)?;
            if let Some(dir) = &a.adapter {
                model.load_adapter(dir).with_context(|| format!("loading the adapter {}", dir.display()))?;
            }
            vagen_serve::host_episodes(&model, &harness, tasks, sampling, 0, need_reward)?
        }
        PolicyChoice::Openai => {
            let url = a.base_url.clone().expect("clap requires --base-url with --policy openai");
            let forward = vagen_serve::Forward {
                api_key: super::api_key(a, &url)?,
                base_url: url.trim_end_matches('/').to_string(),
                model: a.model.clone().expect("clap requires --model with --policy openai"),
                timeout_s: a.timeout_s.max(1.0) as u64,
            };
            vagen_serve::forward_episodes(forward, &harness, tasks, sampling, need_reward)?
        }
        PolicyChoice::Random | PolicyChoice::Oracle => {
            bail!("--policy: a harness is evaluated with a model (`model` or `openai`): it has no oracle or actions")
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    let (trajs, _) = vagen_trainer::harness_trajectories(runs, samples, 0);
    let n = trajs.len().max(1) as f64;
    let totals = vagen_rollout::RolloutTotals::of(&trajs);
    let summary = HarnessSummary {
        episodes: trajs.len(),
        // As the run's `val/success` and `train/reward` count them.
        success: totals.successes as f64 / n,
        mean_reward: totals.reward / n,
        failed: totals.episodes - totals.ok,
        failures: totals.failures.clone(),
        mean_calls: totals.turns as f64 / n,
        seconds,
    };
    if let Some(out) = &a.out {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let lines: Vec<String> = trajs.iter().map(serde_json::to_string).collect::<Result<_, _>>()?;
        super::write_whole(&out.join("results.jsonl"), (lines.join("\n") + "\n").as_bytes())?;
        super::write_whole(&out.join("summary.json"), serde_json::to_string_pretty(&summary)?.as_bytes())?;
    }
    if a.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        let s = &summary;
        println!(
            "{} episodes: success {:.3}, mean reward {:.3}, {:.1} calls each, {} failed {}, {:.1} s",
            s.episodes,
            s.success,
            s.mean_reward,
            s.mean_calls,
            s.failed,
            vagen_rollout::counts_text(&s.failures),
            s.seconds
        );
    }
    let judged = summary.episodes.max(1) as f64;
    if summary.failed as f64 > cfg.env.max_failure_rate * judged {
        bail!("{} of {} harness episodes failed (more than env.max_failure_rate)", summary.failed, summary.episodes);
    }
    Ok(())
}
