//! `vagen-host bench reward`: what a reward component costs per turn, and how many judgments
//! a second the local judge and an OpenAI-compatible endpoint (`vagen-host serve`, started
//! here with the same model) answer (prints figures).

use crate::model_args::ModelArgs;
use anyhow::{Context, Result, bail};
use clap::Args;
use std::io::BufRead;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vagen_policy::{EndpointOptions, LocalJudge};
use vagen_runtime::reward::conformance::sample_turns;
use vagen_runtime::reward::{Judge, JudgeMessage, JudgePart, JudgeRequest};
use vagen_runtime::{Limits, Runtime};
use vagen_trainer::{OpenAiJudge, OpenAiOptions};

#[derive(Args)]
pub struct BenchRewardArgs {
    /// The reward component whose per-turn cost is measured (a rule-based one measures the
    /// host's part best).
    #[arg(long)]
    plugin: PathBuf,
    /// Its config (JSON).
    #[arg(long, default_value = "")]
    config: String,
    /// Turns per `score` call.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Judge requests per round (one round = one judge call).
    #[arg(long, default_value_t = 32)]
    judgments: usize,
    /// Tokens each judgment may write.
    #[arg(long, default_value_t = 4)]
    judge_tokens: u32,
    /// The judge model, for the local judge and the server alike.
    #[command(flatten)]
    model: ModelArgs,
}

/// `n` grounding questions of the kind a reward function asks, answers up to `tokens`.
fn judgments(n: usize, tokens: u32) -> Vec<JudgeRequest> {
    (0..n)
        .map(|i| JudgeRequest {
            messages: vec![JudgeMessage {
                role: "user".into(),
                content: vec![JudgePart::Text(format!(
                    "True state: the goal is {} rows below you.\nThe agent's observation: the goal is below me.\nDoes it agree? Answer YES or NO.",
                    i % 4
                ))],
            }],
            max_tokens: tokens,
            temperature: 0.0,
        })
        .collect()
}

pub fn bench_reward(a: BenchRewardArgs) -> Result<()> {
    if a.batch == 0 || a.judgments == 0 {
        bail!("--batch and --judgments must be at least 1");
    }
    let plugin = Runtime::new(Limits::default())?.load_reward(&a.plugin)?;
    let mut scorer = plugin.create(&a.config, None)?;
    let turns = sample_turns(a.batch, 7);
    scorer.score(&turns)?; // warm-up: the instance is built, its code paged in
    let rounds = 20;
    let started = Instant::now();
    for _ in 0..rounds {
        scorer.score(&turns)?;
    }
    let per_turn = started.elapsed().as_secs_f64() / (rounds * a.batch) as f64;
    println!(
        "{}: {:.1} µs a turn in batches of {} ({} calls)",
        plugin.manifest().name,
        per_turn * 1e6,
        a.batch,
        rounds
    );

    let requests = judgments(a.judgments, a.judge_tokens);
    let local = LocalJudge::new(a.model.load()?);
    let rate = |judge: &dyn Judge| -> Result<f64> {
        judge.complete(&requests[..1]); // warm-up
        let started = Instant::now();
        let answers = judge.complete(&requests);
        if let Some(Err(e)) = answers.iter().find(|a| a.is_err()) {
            bail!("a judgment failed: {e}");
        }
        Ok(requests.len() as f64 / started.elapsed().as_secs_f64())
    };
    let local_rate = rate(&local)?;
    drop(local);
    let exe = std::env::current_exe()?;
    let mut server = std::process::Command::new(exe)
        .args([
            "serve",
            "--port",
            "0",
            "--model",
            &a.model.model.to_string(),
            "--device",
            &a.model.device.to_string(),
            "--dtype",
            &a.model.dtype.to_string(),
        ])
        .args(["--max-batch", &a.judgments.to_string(), "--batch-wait-ms", "20"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("starting vagen-host serve")?;
    let mut line = String::new();
    std::io::BufReader::new(server.stdout.take().context("the server's stdout")?).read_line(&mut line)?;
    let served = (|| -> Result<f64> {
        let addr = line.trim().strip_prefix("listening on ").context("the server did not start")?;
        let endpoint = EndpointOptions {
            url: format!("{addr}/v1"),
            model: a.model.model.to_string(),
            api_key: None,
            concurrency: a.judgments,
            requests_per_minute: 0,
            timeout: Duration::from_secs(600),
            retries: 0,
            backoff: Duration::from_millis(100),
        };
        let judge = Arc::new(OpenAiJudge::new(OpenAiOptions { endpoint, cache: None })?);
        rate(judge.as_ref())
    })();
    let _ = server.kill();
    let _ = server.wait();
    let served = served?;
    println!(
        "judge ({} judgments of up to {} tokens, model {}): local {:.1} judgments/s, via serve {:.1} judgments/s",
        a.judgments, a.judge_tokens, a.model.model, local_rate, served
    );
    Ok(())
}
