//! A training run's recording endpoint with the embedded model: a harness's calls recorded
//! as the engine sampled them, a rewritten history split and counted, and each episode's
//! URL closed to every key but its own.

use std::num::NonZeroUsize;
use std::sync::Arc;
use vagen_model::{DEFAULT_SEED, LoadOptions, default_model};
use vagen_serve::harness::{HarnessConfig, Task};
use vagen_serve::{EpisodeBook, EpisodeSampling, ServerOptions, accept, host_episodes, server};

fn sampling() -> EpisodeSampling {
    EpisodeSampling { temperature: 1.0, top_p: 1.0, top_k: 0, max_new_tokens: 6, context: 512 }
}

/// Three calls: the second continues the first's conversation, the third starts over (a
/// harness that dropped its history); then a reward with one per call.
const AGENT: &str = r#"
import json, os, urllib.request
base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
def post(path, body):
    headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
    request = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers=headers)
    return json.load(urllib.request.urlopen(request))
def chat(messages):
    choice = post("/chat/completions", {"model": "any", "messages": messages, "max_tokens": 5, "temperature": 0})["choices"][0]
    return choice["message"]["content"] or "", choice["token_ids"]
sampled = []
messages = [{"role": "system", "content": "Count."}, {"role": "user", "content": "one"}]
text, ids = chat(messages); sampled.append(ids)
messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "two"}]
text, ids = chat(messages); sampled.append(ids)
text, ids = chat([{"role": "system", "content": "Count."}, {"role": "user", "content": "three"}]); sampled.append(ids)
open(os.environ["OUT"], "w").write(json.dumps(sampled))
post("/reward", {"reward": 1.0, "call_rewards": [0.25, 0.5, 0.0], "metrics": {"calls": 3}})
"#;

/// The ids under the loss, in order.
fn masked(seq: &vagen_rollout::TrainingSequence) -> Vec<u32> {
    seq.ids.iter().zip(&seq.loss_mask).filter(|(_, m)| **m).map(|(id, _)| *id).collect()
}

#[test]
fn an_episodes_calls_are_recorded_as_sampled_and_a_rewritten_history_starts_a_sequence() {
    let model = default_model(DEFAULT_SEED, LoadOptions::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("agent.py"), AGENT).unwrap();
    let out = dir.path().join("sampled.json");
    let harness = HarnessConfig {
        command: vec!["python3".into(), "agent.py".into()],
        env: [("OUT".to_string(), out.display().to_string())].into(),
        dir: Some(dir.path().to_path_buf()),
        timeout_s: 120.0,
        concurrency: 1,
        max_output_kib: 64,
        tasks: None,
    };
    let runs = host_episodes(&model, &harness, vec![Task::of(7, "train", &[])], sampling(), 3, true).unwrap();
    let run = &runs[0];
    assert_eq!(run.failure, None, "stderr: {}", run.stderr_tail);
    let sampled: Vec<Vec<u32>> = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let recorded = &run.record.recorded;
    assert_eq!(recorded.versions, vec![3, 3, 3], "each answer with the version it was sampled by");
    assert_eq!(recorded.breaks, 1, "the third call dropped the history");
    assert_eq!(recorded.sequences.len(), 2);
    let (first, second) = (&recorded.sequences[0], &recorded.sequences[1]);
    assert_eq!(masked(first), [sampled[0].clone(), sampled[1].clone()].concat());
    assert_eq!(masked(second), sampled[2]);
    assert_eq!((first.turn_ends.len(), second.turn_ends.len()), (2, 1));
    for seq in [first, second] {
        for (&m, &lp) in seq.loss_mask.iter().zip(&seq.logprobs) {
            assert!(
                if m { lp.is_finite() && lp <= 0.0 && lp != 0.0 } else { lp == 0.0 },
                "log-probs on sampled ids only"
            );
        }
    }
    // The harness asked for temperature 0; the run's sampling (1.0) drew its answers, and the
    // calls are transcribed.
    assert_eq!(run.record.calls.len(), 3);
    assert_eq!(run.record.calls[1].asked, "two");
    let reported = run.record.reported.as_ref().unwrap();
    assert_eq!((reported.reward, reported.call_rewards.clone()), (1.0, vec![0.25, 0.5, 0.0]));
}

/// A request to an episode route: its status.
fn status(method: &str, url: &str, key: Option<&str>, body: &str) -> u16 {
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let auth = key.map(|k| format!("Bearer {k}"));
    let response = match method {
        "GET" => {
            let mut r = agent.get(url);
            if let Some(a) = &auth {
                r = r.header("authorization", a);
            }
            r.call()
        }
        _ => {
            let mut r = agent.post(url).header("content-type", "application/json");
            if let Some(a) = &auth {
                r = r.header("authorization", a);
            }
            r.send(body)
        }
    };
    response.unwrap().status().as_u16()
}

#[test]
fn an_episodes_url_takes_its_own_key_only_and_only_while_it_is_open() {
    let model = default_model(DEFAULT_SEED, LoadOptions::default()).unwrap();
    let book = Arc::new(EpisodeBook::new(sampling()));
    let (a, b) = (book.open(1), book.open(2));
    let (app, worker) = server(&model, &ServerOptions::for_episodes(NonZeroUsize::new(2).unwrap()), Some(book.clone()));
    std::thread::spawn(move || worker.run(&model));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let listener = runtime.block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0))).unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    runtime.spawn(accept(listener, app, 16, std::time::Duration::from_secs(5)));
    let url = |ticket: &vagen_serve::Ticket, route: &str| format!("{base}/v1/episodes/{}/{route}", ticket.id);
    let chat = r#"{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}"#;
    let reward = r#"{"reward": 1.0}"#;
    assert_eq!(status("GET", &url(&a, "models"), Some(&a.key), ""), 200);
    assert_eq!(status("GET", &url(&a, "models"), Some(&b.key), ""), 401, "another episode's key");
    assert_eq!(status("GET", &url(&a, "models"), None, ""), 401, "no key");
    assert_eq!(status("POST", &url(&b, "chat/completions"), Some(&a.key), chat), 401);
    assert_eq!(status("POST", &url(&a, "reward"), Some(&b.key), reward), 401, "no writing another's reward");
    assert_eq!(status("POST", &url(&b, "chat/completions"), Some(&b.key), chat), 200);
    assert_eq!(status("POST", &url(&a, "reward"), Some(&a.key), r#"{"reward": "much"}"#), 400);
    assert_eq!(status("POST", &url(&a, "reward"), Some(&a.key), reward), 200);
    assert_eq!(status("POST", &url(&a, "reward"), Some(&a.key), reward), 409, "reported once");
    let unknown = format!("{base}/v1/episodes/ep-0-0000000000000000/models");
    assert_eq!(status("GET", &unknown, Some(&a.key), ""), 401, "ids cannot be probed");
    let closed = book.close(&a.id).unwrap();
    assert_eq!(closed.reported.unwrap().reward, 1.0);
    assert_eq!(status("GET", &url(&a, "models"), Some(&a.key), ""), 401, "closed with its episode");
    let b_record = book.close(&b.id).unwrap();
    assert_eq!(b_record.calls.len(), 1, "b's own call was recorded, a's attempt on it was not");
}
