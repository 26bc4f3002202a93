//! `vagen-host eval`: a policy (a local model, any OpenAI-compatible endpoint, random
//! actions, the env's oracle) on held-out seeds, `-n` samples each, through the rollout path;
//! with `--config`, exactly as a training run evaluates. With `--out DIR`: every episode in
//! `results.jsonl` (written as it ends, so `--resume` finishes a killed run), the figures in
//! `summary.json` (pass@k, intervals, the env's digest, the model's identity) and a
//! `report.html` to read.

mod args;
pub mod compare;
mod harness;
mod play;
mod policy;
mod records;
mod report;
mod summary;

use anyhow::{Context, Result, bail};
pub use args::EvalArgs;
use args::{PolicyChoice, Setup};
pub(crate) use records::write_whole;
use records::{EpisodeRecord, ResultsDir};
use summary::Summary;

pub fn eval(a: EvalArgs) -> Result<()> {
    let cfg = args::read_config(&a)?;
    if let Some(cfg) = cfg.as_ref().filter(|c| c.env.harness.is_some()) {
        return harness::eval_harness(&a, cfg);
    }
    let setup = Setup::from_args(&a, cfg)?;
    // The folder (and a resume's settings) before the model loads: a refusal costs no load.
    let settings = setup.settings(&a, policy::identity(&a)?);
    let mut dir = a.out.as_deref().map(|out| ResultsDir::open(out, &settings, a.resume)).transpose()?;
    let made = policy::make(&a, &setup)?;
    let (mut policy, endpoint) = (made.policy, made.endpoint);
    let kept: Vec<EpisodeRecord> = dir.as_ref().map(|d| d.kept.clone()).unwrap_or_default();
    let todo = play::jobs(&settings, &kept);
    if !kept.is_empty() {
        eprintln!("resuming: {} episodes kept, {} to play", kept.len(), todo.len());
    }
    let started = std::time::Instant::now();
    let images = dir.as_ref().map(ResultsDir::images);
    let played = play::play(&setup, &settings, policy.as_mut(), &todo, images.as_ref(), &mut |records| {
        if let Some(dir) = &mut dir {
            dir.append(records)?;
        }
        Ok(())
    })?;
    let mut all = kept;
    all.extend(played);
    let summary =
        Summary::of(&all, &settings, started.elapsed().as_secs_f64(), endpoint.as_deref().map(|e| e.counts.get()))?;
    if let Some(dir) = &dir {
        dir.finish(&summary, &all)?;
    }
    if a.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        summary.print(a.out.as_deref());
    }
    judge(&summary, setup.max_failure_rate)
}

/// The run's verdict once its files are written: too many env faults fail it (as training's
/// evaluations do); episodes lost to the endpoint only warn, since `--resume` plays them.
fn judge(s: &Summary, max_failure_rate: f64) -> Result<()> {
    if s.lost > 0 {
        eprintln!(
            "warning: {} of {} episodes were lost to the policy's server (not counted as failures); \
             `--resume` plays them again",
            s.lost, s.requested
        );
    }
    let judged = s.requested - s.lost;
    if judged > 0 && s.env_failures as f64 > max_failure_rate * judged as f64 {
        bail!(
            "{} of {judged} episodes failed in the env (more than {:.0}% allowed by --max-failure-rate): {}",
            s.env_failures,
            max_failure_rate * 100.0,
            s.first_failure.as_deref().unwrap_or("")
        );
    }
    Ok(())
}

/// `-n` samples at temperature 0 would all be the same greedy answer.
fn check_sampling(policy: PolicyChoice, samples: usize, temperature: f64) -> Result<()> {
    let samples_differ = matches!(policy, PolicyChoice::Random) || temperature > 0.0;
    if samples > 1 && !samples_differ {
        bail!("-n {samples} at temperature 0 draws {samples} copies of the greedy answer: give --temperature (e.g. 1)");
    }
    Ok(())
}

/// `--api-key-env`'s key, sent to the `--base-url` it was given with; without it, the user
/// file's (`judge.toml`), only to a host that file allows or to this machine.
fn api_key(a: &EvalArgs, url: &str) -> Result<Option<String>> {
    if let Some(name) = &a.api_key_env {
        let key = std::env::var(name).ok().filter(|k| !k.is_empty());
        return key.map(Some).with_context(|| format!("--api-key-env {name}: the variable is not set"));
    }
    let access = vagen_trainer::JudgeAccess::from_user(None, vec![])?;
    Ok(if access.check(url).is_ok() { access.key() } else { None })
}
