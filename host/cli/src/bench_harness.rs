//! `vagen-host bench harness`: what a harness's chat call costs through a training run's
//! recording endpoint (HTTP, JSON, the episode's book and recording), against the same call
//! answered in the process (`Model::chat_request` on the engine, as `ModelPolicy` answers a
//! turn). Prints milliseconds per call for both and the difference.

use crate::model_args::ModelArgs;
use anyhow::{Context, Result, bail};
use clap::Args;
use std::time::Instant;
use vagen_model::{Chat, Engine, EngineOptions, GenerateOptions, Message};
use vagen_serve::EpisodeSampling;
use vagen_serve::harness::{HarnessConfig, Task};

#[derive(Args)]
pub struct BenchHarnessArgs {
    /// Calls per episode (each one the same conversation, answered greedily).
    #[arg(long, default_value_t = 20)]
    calls: usize,
    /// Tokens each answer may take.
    #[arg(long, default_value_t = 8)]
    max_tokens: usize,
    /// The Python that runs the timing client (the standard library only).
    #[arg(long, default_value = "python3")]
    python: String,
    #[command(flatten)]
    model: ModelArgs,
}

/// The client: `calls` calls, each timed from request to parsed answer; its last line the
/// mean milliseconds (as a metric) and the tokens it got.
const CLIENT: &str = r#"
import json, os, sys, time, urllib.request
base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
calls, max_tokens, content = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
body = json.dumps({"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}).encode()
times, tokens = [], 0
for _ in range(calls):
    start = time.perf_counter()
    answer = json.load(urllib.request.urlopen(urllib.request.Request(base + "/chat/completions", body, headers)))
    times.append(time.perf_counter() - start)
    tokens += len(answer["choices"][0]["token_ids"])
print(json.dumps({"reward": 0, "metrics": {"ms": 1000 * sum(times[1:]) / max(1, len(times) - 1), "tokens": tokens / calls}}))
"#;

const CONTENT: &str = "Numbers 7 3. Target 21. Make the target from the two numbers with one of + - *.";

pub fn bench_harness(a: BenchHarnessArgs) -> Result<()> {
    if a.calls < 2 || a.max_tokens == 0 {
        bail!("--calls must be at least 2 (the first is not timed) and --max-tokens at least 1");
    }
    let model = a.model.load()?;
    // In the process: the prompt rendered and tokenised, then generated, on a fresh engine
    // each call (as the endpoint's calls of new conversations are).
    let chat = Chat::new(vec![Message::user(CONTENT)], vec![], a.max_tokens, Some(0));
    let options = GenerateOptions { temperature: 0.0, max_new_tokens: a.max_tokens, ..Default::default() };
    let (mut seconds, mut tokens) = (0.0, 0);
    for call in 0..a.calls {
        let started = Instant::now();
        let mut engine = Engine::new(EngineOptions::default());
        let answered = model.answer_chats(&mut engine, std::slice::from_ref(&chat), &options);
        let answer = answered.answers.into_iter().next().expect("one chat").map_err(|e| anyhow::anyhow!("{e}"))?;
        if call > 0 {
            seconds += started.elapsed().as_secs_f64();
            tokens += answer.generation.token_ids.len();
        }
    }
    let in_process = 1000.0 * seconds / (a.calls - 1) as f64;
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("client.py"), CLIENT)?;
    let harness = HarnessConfig {
        command: vec![
            a.python.clone(),
            "client.py".into(),
            a.calls.to_string(),
            a.max_tokens.to_string(),
            CONTENT.into(),
        ],
        env: Default::default(),
        dir: Some(dir.path().to_path_buf()),
        timeout_s: 600.0,
        concurrency: 1,
        max_output_kib: 64,
        tasks: None,
    };
    let sampling = EpisodeSampling {
        temperature: 0.0,
        top_p: 1.0,
        top_k: 0,
        max_new_tokens: a.max_tokens,
        context: model.config().max_position_embeddings,
    };
    let runs = vagen_serve::host_episodes(&model, &harness, vec![Task::of(0, "train", &[])], sampling, 0, true)?;
    let run = &runs[0];
    if let Some(f) = &run.failure {
        bail!("the timing client failed: {f}; {}", run.stderr_tail);
    }
    let metrics = &run.record.reported.as_ref().context("the client reports its times")?.metrics;
    let endpoint = metrics["ms"];
    println!("calls {} (the first not timed), answers of up to {} tokens, greedy", a.calls, a.max_tokens);
    println!(
        "in the process (chat_request + engine): {in_process:.2} ms a call, {:.1} tokens",
        tokens as f64 / (a.calls - 1) as f64
    );
    println!(
        "through the episode endpoint (HTTP client in {}): {endpoint:.2} ms a call, {:.1} tokens",
        a.python, metrics["tokens"]
    );
    println!(
        "overhead of the endpoint: {:.2} ms a call ({:+.0} %)",
        endpoint - in_process,
        100.0 * (endpoint / in_process - 1.0)
    );
    Ok(())
}
