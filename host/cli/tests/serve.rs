//! `vagen-host serve` as an OpenAI-compatible endpoint, and the trainer's `openai` judge
//! backend against it and against endpoints that misbehave.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use vagen_policy::EndpointOptions;
use vagen_runtime::reward::{Judge, JudgeMessage, JudgePart, JudgeRequest};
use vagen_trainer::{OpenAiJudge, OpenAiOptions};

/// Requests the judge's endpoint sent again.
fn retries(judge: &OpenAiJudge) -> usize {
    judge.counts().into_iter().find(|c| c.0 == "retries").expect("counted").1
}

struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(extra: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_vagen-host"))
            .args(["serve", "--port", "0", "--device", "cpu"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("first line: {line:?}"));
        Server { child, url: format!("{addr}/v1") }
    }

    fn stats(&self) -> serde_json::Value {
        let url = self.url.replace("/v1", "/stats");
        ureq::get(&url).call().unwrap().body_mut().read_json().unwrap()
    }
}

impl Server {
    /// The server's resident memory, MiB.
    fn rss_mib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() / 1024
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn options(url: &str, cache: Option<std::path::PathBuf>) -> OpenAiOptions {
    let endpoint = EndpointOptions {
        url: url.into(),
        model: "default".into(),
        api_key: Some("test-key".into()),
        concurrency: 8,
        requests_per_minute: 0,
        timeout: Duration::from_secs(20),
        retries: 2,
        backoff: Duration::from_millis(50),
    };
    OpenAiOptions { endpoint, cache }
}

/// `options(url, None)` with one request at a time and `edit` applied to its endpoint.
fn one_at_a_time(url: &str, edit: impl FnOnce(&mut EndpointOptions)) -> OpenAiOptions {
    let mut o = options(url, None);
    o.endpoint.concurrency = 1;
    edit(&mut o.endpoint);
    o
}

fn requests(n: usize) -> Vec<JudgeRequest> {
    (0..n)
        .map(|i| JudgeRequest {
            messages: vec![JudgeMessage {
                role: "user".into(),
                content: vec![JudgePart::Text(format!("Is the goal below the player in map {i}? Answer YES or NO."))],
            }],
            max_tokens: 6,
            temperature: 0.0,
        })
        .collect()
}

#[test]
fn the_openai_judge_batches_through_serve_caches_and_reports_a_dead_server() {
    let server = Server::start(&["--batch-wait-ms", "500"]);
    let cache = tempfile::tempdir().unwrap();
    let judge = OpenAiJudge::new(options(&server.url, Some(cache.path().into()))).unwrap();
    let answers = judge.complete(&requests(5));
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    let stats = server.stats();
    assert_eq!(stats["requests"], 5);
    assert_eq!(stats["rounds"], 1, "concurrent requests share one round of the engine: {stats}");
    assert_eq!(stats["peak_batch"], 5, "{stats}");
    // A resumed run (a new judge, the same cache) pays nothing twice.
    let again = OpenAiJudge::new(options(&server.url, Some(cache.path().into()))).unwrap();
    assert_eq!(again.complete(&requests(5)), answers);
    assert_eq!(again.counts.cache_hits.load(Ordering::SeqCst), 5);
    assert_eq!(server.stats()["requests"], 5);
    // The server killed: each request fails after its retries, naming the endpoint.
    let url = server.url.clone();
    drop(server);
    let judge = OpenAiJudge::new(options(&url, None)).unwrap();
    let started = Instant::now();
    for a in judge.complete(&requests(2)) {
        let e = a.unwrap_err();
        assert!(e.contains(&url), "{e}");
    }
    assert_eq!(retries(&judge), 4);
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// An endpoint that answers each connection with the next of `replies` (`None`: accept and
/// never answer).
fn fake_endpoint(replies: Vec<Option<(u16, &'static str)>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = vec![];
        for reply in replies {
            let Ok((mut conn, _)) = listener.accept() else { return };
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            match reply {
                Some((status, body)) => {
                    let head = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = conn.write_all(head.as_bytes());
                    let _ = conn.write_all(body.as_bytes());
                }
                None => held.push(conn),
            }
        }
        std::thread::sleep(Duration::from_secs(30));
    });
    url
}

const OK: &str = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"YES"},"finish_reason":"stop"}]}"#;

#[test]
fn the_openai_judge_retries_overload_times_out_and_does_not_retry_a_bad_request() {
    let url = fake_endpoint(vec![Some((503, r#"{"error":"busy"}"#)), Some((429, "{}")), Some((200, OK))]);
    let judge = OpenAiJudge::new(one_at_a_time(&url, |_| ())).unwrap();
    assert_eq!(judge.complete(&requests(1)), vec![Ok("YES".to_string())]);
    assert_eq!(retries(&judge), 2);

    let url = fake_endpoint(vec![None, None]);
    let judge =
        OpenAiJudge::new(one_at_a_time(&url, |e| (e.timeout, e.retries) = (Duration::from_millis(300), 1))).unwrap();
    let started = Instant::now();
    let e = judge.complete(&requests(1)).remove(0).unwrap_err();
    assert!(e.to_lowercase().contains("timeout") || e.to_lowercase().contains("timed out"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());

    // A server that dies mid-request: the connection drops without an answer, then nothing
    // listens any more. The request is asked again, then fails naming the endpoint.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let dying = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        if let Ok((mut conn, _)) = listener.accept() {
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf);
        }
        // The listener and the connection drop here: the server is gone.
    });
    let judge = OpenAiJudge::new(one_at_a_time(&dying, |e| e.retries = 2)).unwrap();
    let e = judge.complete(&requests(1)).remove(0).unwrap_err();
    assert!(e.contains(&dying), "{e}");
    assert_eq!(retries(&judge), 2);

    let url = fake_endpoint(vec![Some((400, r#"{"error":{"message":"bad model"}}"#)), Some((200, OK))]);
    let judge = OpenAiJudge::new(one_at_a_time(&url, |_| ())).unwrap();
    let e = judge.complete(&requests(1)).remove(0).unwrap_err();
    assert!(e.contains("HTTP 400") && e.contains("bad model"), "{e}");
    assert_eq!(retries(&judge), 0, "a 400 is not asked again");
}

/// POSTs `body` to the chat endpoint: the status and the JSON answer.
fn post(url: &str, body: &str) -> (u16, serde_json::Value) {
    let mut r = ureq::post(&format!("{url}/chat/completions"))
        .config()
        .http_status_as_error(false)
        .build()
        .header("content-type", "application/json")
        .send(body)
        .unwrap();
    (r.status().as_u16(), r.body_mut().read_json().unwrap())
}

#[test]
fn serve_refuses_bad_requests_with_openai_errors() {
    let server = Server::start(&["--max-body-mib", "1"]);
    let m = r#""messages": [{"role": "user", "content": "x"}]"#;
    let cases = [
        (r#"{"messages": []}"#.to_string(), 400, "messages", "messages is empty"),
        ("not json".into(), 400, "body", "not a chat-completions request"),
        (format!(r#"{{{m}, "n": 0}}"#), 400, "n", "n 0: must be a whole number from 1"),
        (format!(r#"{{{m}, "n": 1.5}}"#), 400, "body", "not a chat-completions request"),
        (format!(r#"{{{m}, "max_tokens": -1}}"#), 400, "max_tokens", "must be at least 1"),
        (format!(r#"{{{m}, "temperature": 3}}"#), 400, "temperature", "[0, 2]"),
        (format!(r#"{{{m}, "tools": [{{"type": "function"}}]}}"#), 400, "tools", "tools[0]: expected"),
        (format!(r#"{{{m}, "functions": [{{"name": "f"}}]}}"#), 400, "functions", "functions: not supported"),
        (format!(r#"{{{m}, "tool_choice": "required"}}"#), 400, "tool_choice", "has no tools"),
        (format!(r#"{{{m}, "response_format": {{"type": "json_object"}}}}"#), 400, "response_format", "not supported"),
        (format!(r#"{{{m}, "top_logprobs": 2}}"#), 400, "top_logprobs", "needs logprobs = true"),
        (format!(r#"{{{m}, "logprobs": true, "top_logprobs": 21}}"#), 400, "top_logprobs", "from 0 to 20"),
        (format!(r#"{{{m}, "frequency_penalty": 0.5}}"#), 400, "frequency_penalty", "only 0"),
        (format!(r#"{{{m}, "colour": "blue"}}"#), 400, "body", "colour: not a chat-completions field"),
        (r#"{"messages": [{"role": "robot", "content": "x"}]}"#.into(), 400, "messages", "role \"robot\""),
        (
            r#"{"messages": [{"role": "user", "content": "x", "tool_calls": []}]}"#.into(),
            400,
            "messages",
            "tool_calls are an assistant's",
        ),
        (
            r#"{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}"#.into(),
            400,
            "messages",
            "no vision tower",
        ),
        (
            r#"{"messages": [{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}"#.into(),
            400,
            "messages",
            "images are accepted in user messages only",
        ),
        (format!(r#"{{{m}, "response_format": {{"type": "xml"}}}}"#), 400, "response_format", "expected"),
        (format!(r#"{{"model": "gpt-9", {m}}}"#), 404, "model", "not served here"),
        (format!(r#"{{{m}, "user": "{}"}}"#, "x".repeat(2 << 20)), 413, "", "larger than 1 MiB"),
        // Counted a piece at a time, refused long before its whole is tokenised.
        (
            format!(r#"{{"messages": [{{"role": "user", "content": "{}"}}]}}"#, "word ".repeat(180_000)),
            400,
            "messages",
            "tokens (the context's) in its first",
        ),
    ];
    for (body, status, param, needle) in cases {
        let (got, v) = post(&server.url, &body);
        let shown = &body[..body.len().min(120)];
        assert_eq!(got, status, "{shown}: {v}");
        let e = &v["error"];
        assert!(e["message"].as_str().unwrap().contains(needle), "{shown}: {v}");
        assert_eq!(e["type"], "invalid_request_error", "{shown}: {v}");
        if !param.is_empty() {
            assert_eq!(e["param"], param, "{shown}: {v}");
        }
    }
    // Harmless fields are accepted; a huge max_tokens is capped at the context's room.
    let (got, v) = post(
        &server.url,
        &format!(r#"{{{m}, "user": "u", "max_tokens": 1000000000, "seed": 1, "response_format": {{"type": "text"}}}}"#),
    );
    assert_eq!(got, 200, "{v}");
}

#[test]
fn serve_refuses_an_image_bomb_before_decoding_and_a_request_past_its_queue_with_503() {
    let server = Server::start(&[
        "--model",
        "default-vl",
        "--max-image-pixels",
        "10000",
        "--max-server-pixels",
        "6000",
        "--max-queue",
        "1",
        "--batch-wait-ms",
        "1500",
    ]);
    let mut png = vec![];
    image::RgbImage::new(200, 200).write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png).unwrap();
    let url =
        format!("data:image/png;base64,{}", base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &png));
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}],
    });
    let (status, v) = post(&server.url, &body.to_string());
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("200x200 image has more than 10000 pixels"), "{v}");
    // Two 64² pictures fit a request but not the server's budget of decoded pixels: 503.
    let two = with_images(&[black_png(64), black_png(64)]);
    let mut r = ureq::post(&format!("{}/chat/completions", server.url))
        .config()
        .http_status_as_error(false)
        .build()
        .header("content-type", "application/json")
        .send(&two)
        .unwrap();
    assert_eq!((r.status().as_u16(), r.headers().get("retry-after").unwrap().to_str().unwrap()), (503, "1"));
    let v: serde_json::Value = r.body_mut().read_json().unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("--max-server-pixels 6000"), "{v}");
    assert_eq!(post(&server.url, &with_images(&[black_png(64)])).0, 200, "one fits, and its share comes back");
    assert_eq!(post(&server.url, &with_images(&[black_png(64)])).0, 200);
    // The first request holds the only place while it waits for company (1.5 s).
    let ask = r#"{"messages": [{"role": "user", "content": "Where?"}], "max_tokens": 2}"#;
    std::thread::scope(|s| {
        let first = s.spawn(|| post(&server.url, ask));
        std::thread::sleep(Duration::from_millis(400));
        let mut r = ureq::post(&format!("{}/chat/completions", server.url))
            .config()
            .http_status_as_error(false)
            .build()
            .header("content-type", "application/json")
            .send(ask)
            .unwrap();
        assert_eq!(r.status().as_u16(), 503);
        assert_eq!(r.headers().get("retry-after").unwrap(), "1");
        let v: serde_json::Value = r.body_mut().read_json().unwrap();
        assert_eq!(v["error"]["code"], "queue_full", "{v}");
        assert_eq!(first.join().unwrap().0, 200);
    });
    assert_eq!(post(&server.url, ask).0, 200, "the place is free again");
}

/// Whether the server closed `stream` (EOF, a reset, or an answer it closes after) within
/// `within`, writing `trickle` every half second meanwhile.
fn closed_within(stream: &mut std::net::TcpStream, trickle: &[u8], within: Duration) -> bool {
    stream.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let started = Instant::now();
    while started.elapsed() < within {
        if !trickle.is_empty() && stream.write_all(trickle).is_err() {
            return true;
        }
        let mut b = [0u8; 256];
        match stream.read(&mut b) {
            Ok(_) => return true,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn serve_drops_slow_header_clients_and_connections_past_its_cap() {
    let server = Server::start(&["--read-timeout-s", "2", "--max-connections", "2"]);
    let addr = server.url.trim_start_matches("http://").trim_end_matches("/v1").to_string();
    // A client sending a header line every half second is cut off at the 2 s timeout.
    let mut slow = std::net::TcpStream::connect(&addr).unwrap();
    slow.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n").unwrap();
    assert!(closed_within(&mut slow, b"X-Slow: 1\r\n", Duration::from_secs(10)), "a trickling client stays connected");
    drop(slow);
    // Two connections fill the cap: a third is closed at once; a slot freed serves again.
    let first = std::net::TcpStream::connect(&addr).unwrap();
    let _second = std::net::TcpStream::connect(&addr).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let mut third = std::net::TcpStream::connect(&addr).unwrap();
    assert!(closed_within(&mut third, b"", Duration::from_secs(1)), "a connection past the cap is kept");
    drop(first);
    let ask = r#"{"messages": [{"role": "user", "content": "Where?"}], "max_tokens": 2}"#;
    let started = Instant::now();
    let served = loop {
        let r = ureq::post(&format!("{}/chat/completions", server.url)).send(ask);
        if r.is_ok() || started.elapsed() > Duration::from_secs(5) {
            break r.is_ok();
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(served, "the freed slot serves a request");
}

#[test]
fn chunks_leave_as_they_are_sampled_and_a_client_that_hangs_up_frees_its_row() {
    let server = Server::start(&["--batch-wait-ms", "0"]);
    // Seed 3 at temperature 2 draws a long answer from the embedded model (~2000 tokens).
    let long =
        r#""messages": [{"role": "user", "content": "Tell me."}], "max_tokens": 100000, "seed": 3, "temperature": 2.0"#;
    let started = Instant::now();
    let (status, whole) = post(&server.url, &format!("{{{long}}}"));
    let whole_s = started.elapsed();
    assert_eq!(status, 200, "{whole}");
    let tokens = whole["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(tokens >= 500, "a long answer to stream: {tokens} tokens");
    // Streamed: its first token arrives long before the whole answer could have.
    let addr = server.url.trim_start_matches("http://").trim_end_matches("/v1").to_string();
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    let body = format!(r#"{{{long}, "stream": true}}"#);
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let started = Instant::now();
    stream.write_all(format!("{head}{body}").as_bytes()).unwrap();
    let mut seen = vec![];
    while !String::from_utf8_lossy(&seen).contains("token_ids") {
        let mut b = [0u8; 4096];
        let n = stream.read(&mut b).unwrap();
        assert!(n > 0, "the stream ended before a token");
        seen.extend_from_slice(&b[..n]);
    }
    let first_s = started.elapsed();
    assert!(first_s * 4 < whole_s, "first token after {first_s:?}, the whole answer took {whole_s:?}");
    // A request arriving while it runs joins the running batch at the next step: it is
    // answered long before the long one ends, its first token within 2 steps of arriving.
    let (status, v) = post(&server.url, r#"{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}"#);
    assert_eq!(status, 200, "{v}");
    let stats = server.stats();
    assert_eq!(stats["rounds"], 2, "the short request joined the long one's round: {stats}");
    assert!(stats["max_steps_to_first_token"].as_u64().unwrap() <= 2, "{stats}");
    assert_eq!(stats["peak_batch"], 2, "{stats}");
    let b = &mut [0u8; 4096];
    let more = stream.read(b).unwrap();
    assert!(more > 0 && !String::from_utf8_lossy(&b[..more]).contains("[DONE]"), "the long answer goes on");
    // Hanging up stops its row: the next request does not wait for the rest of it.
    drop(stream);
    let started = Instant::now();
    let (status, v) = post(&server.url, r#"{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}"#);
    let next_s = started.elapsed();
    assert_eq!(status, 200, "{v}");
    assert!(next_s * 4 < whole_s, "the next request took {next_s:?}: the left answer ran on ({whole_s:?} whole)");
}

/// A data URL of a black `side`² PNG (a few KB for megapixels).
fn black_png(side: u32) -> String {
    let mut png = vec![];
    image::RgbImage::new(side, side).write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png).unwrap();
    format!("data:image/png;base64,{}", base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &png))
}

fn with_images(urls: &[String]) -> String {
    let mut content = vec![serde_json::json!({"type": "text", "text": "What is here?"})];
    content.extend(urls.iter().map(|u| serde_json::json!({"type": "image_url", "image_url": {"url": u}})));
    serde_json::json!({"messages": [{"role": "user", "content": content}], "max_tokens": 2}).to_string()
}

/// Issue 61: one request of 40 black 4096² PNGs (2.5 MiB) took 17 s and 4.49 GB, held
/// afterwards. Pictures are counted and sized from their headers before any is decoded, and
/// the heap a request used goes back after it.
#[test]
fn a_vl_request_is_bounded_in_pictures_before_decoding_and_its_memory_returns() {
    let server = Server::start(&["--model", "default-vl"]);
    let small = with_images(&[black_png(64)]);
    assert_eq!(post(&server.url, &small).0, 200);
    let before = server.rss_mib();
    let huge = black_png(4096);
    let started = Instant::now();
    let (status, v) = post(&server.url, &with_images(&vec![huge.clone(); 40]));
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("40 images: at most 8 per request"), "{v}");
    let (status, v) = post(&server.url, &with_images(&vec![huge; 3]));
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("--max-request-pixels"), "{v}");
    assert!(started.elapsed() < Duration::from_secs(5), "refused in {:?}", started.elapsed());
    assert!(server.rss_mib() <= before + 64, "nothing was decoded: {} MiB after {before}", server.rss_mib());
    // Allowed and large (two 4096² pictures, 100 MB of pixels): answered, and given back.
    let (status, v) = post(&server.url, &with_images(&vec![black_png(4096); 2]));
    assert_eq!(status, 200, "{v}");
    let after = server.rss_mib();
    assert!(after <= before + 256, "resident memory {before} MiB before two 4096² pictures, {after} MiB after");
}

#[test]
fn long_prompts_are_refused_before_their_work_and_memory_returns() {
    let server = Server::start(&[]);
    let short = r#"{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}"#;
    assert_eq!(post(&server.url, short).0, 200);
    let before = server.rss_mib();
    let long = serde_json::json!({ "messages": [{ "role": "user", "content": "word ".repeat(300_000) }] }).to_string();
    for _ in 0..20 {
        let (status, v) = post(&server.url, &long);
        assert_eq!(status, 400, "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("in its first"), "{v}");
    }
    let after = server.rss_mib();
    // The bound docs/architecture.md states: 64 MiB over the level after a short request.
    assert!(after <= before + 64, "resident memory {before} MiB before 20 prompts of 1.5 MB, {after} MiB after");
    assert_eq!(post(&server.url, short).0, 200);
}

/// The chat the sampling tests continue.
const FROZEN_LAKE_MESSAGES: &str =
    r#""messages": [{"role": "system", "content": "FrozenLake."}, {"role": "user", "content": "Where to?"}]"#;

/// Choice `i`'s `token_ids`.
fn token_ids(v: &serde_json::Value, i: usize) -> Vec<u64> {
    v["choices"][i]["token_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

#[test]
fn serve_samples_as_openai_does_seeds_n_logprobs_and_token_ids() {
    let server = Server::start(&[]);
    let messages = FROZEN_LAKE_MESSAGES;
    let ask = |extra: &str| {
        let (status, v) = post(&server.url, &format!(r#"{{{messages}, "max_tokens": 16, "temperature": 1.0{extra}}}"#));
        assert_eq!(status, 200, "{v}");
        v
    };
    // Unseeded: fresh draws every time; seeded: the same ones.
    assert_ne!(token_ids(&ask(""), 0), token_ids(&ask(""), 0), "two unseeded answers at temperature 1");
    assert_eq!(token_ids(&ask(r#", "seed": 7"#), 0), token_ids(&ask(r#", "seed": 7"#), 0));
    // n = 4 seeded s: the four single requests seeded s … s + 3.
    let four = ask(r#", "seed": 7, "n": 4, "logprobs": true"#);
    assert_eq!(four["choices"].as_array().unwrap().len(), 4);
    for i in 0..4 {
        assert_eq!(four["choices"][i]["index"], i);
        assert_eq!(token_ids(&four, i), token_ids(&ask(&format!(r#", "seed": {}"#, 7 + i)), 0), "choice {i}");
    }
    let total: usize = (0..4).map(|i| token_ids(&four, i).len()).sum();
    assert_eq!(four["usage"]["completion_tokens"], total);
    assert_logprobs_are_the_models(&four);
    assert_top_logprobs_are_ranked(&server.url);
    // Streamed: the same ids and text, a token at a time.
    let (streamed_ids, text) =
        streamed(&server.url, &format!(r#"{{{messages}, "max_tokens": 16, "seed": 7, "stream": true}}"#));
    assert_eq!(streamed_ids, token_ids(&four, 0));
    assert_eq!(text, four["choices"][0]["message"]["content"].as_str().unwrap());
}

/// Log-probs: each choice's are the model's own for the returned ids (a whole-sequence
/// forward), to 1e-4.
fn assert_logprobs_are_the_models(answer: &serde_json::Value) {
    let model = vagen_model::default_model(vagen_model::DEFAULT_SEED, vagen_model::LoadOptions::default()).unwrap();
    let chat = [vagen_model::Message::system("FrozenLake."), vagen_model::Message::user("Where to?")];
    let prompt = model.encode_chat(&chat, true).unwrap();
    for i in 0..answer["choices"].as_array().unwrap().len() {
        let sampled: Vec<u32> = token_ids(answer, i).iter().map(|&t| t as u32).collect();
        let seq: Vec<u32> = prompt.iter().chain(&sampled).copied().collect();
        let want = vagen_model::sequence_logprobs(&model.lm, &[seq], 1.0).unwrap().remove(0);
        let got = answer["choices"][i]["logprobs"]["content"].as_array().unwrap();
        assert_eq!(got.len(), sampled.len());
        for (j, entry) in got.iter().enumerate() {
            let (lp, w) = (entry["logprob"].as_f64().unwrap() as f32, want[prompt.len() - 1 + j]);
            assert!((lp - w).abs() <= 1e-4, "choice {i} token {j}: served {lp}, model {w}");
        }
    }
}

/// Alternatives: three per position, most likely first, the sampled token's log-prob among
/// them where it is one of them; greedy, the sampled token is the first.
fn assert_top_logprobs_are_ranked(url: &str) {
    let messages = FROZEN_LAKE_MESSAGES;
    for (extra, greedy) in [(r#", "seed": 7"#, false), (r#", "temperature": 0"#, true)] {
        let body = format!(r#"{{{messages}, "max_tokens": 16, "logprobs": true, "top_logprobs": 3{extra}}}"#);
        let (status, v) = post(url, &body);
        assert_eq!(status, 200, "{v}");
        for (j, entry) in v["choices"][0]["logprobs"]["content"].as_array().unwrap().iter().enumerate() {
            let top: Vec<(String, f64)> = entry["top_logprobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| (t["token"].as_str().unwrap().to_string(), t["logprob"].as_f64().unwrap()))
                .collect();
            assert_eq!(top.len(), 3, "token {j}: {entry}");
            assert!(top.windows(2).all(|w| w[0].1 >= w[1].1), "token {j}: {entry}");
            let lp = entry["logprob"].as_f64().unwrap();
            assert!(lp <= top[0].1 + 1e-6, "token {j}: sampled {lp} above the most likely {}", top[0].1);
            if greedy {
                assert!((lp - top[0].1).abs() <= 1e-6 && top[0].0 == entry["token"], "token {j}: {entry}");
            }
            if let Some((_, l)) = top.iter().find(|(t, _)| *t == entry["token"]) {
                assert!((l - lp).abs() <= 1e-6, "token {j}: {entry}");
            }
        }
    }
}

/// A streamed completion of `body`: its token ids and text, gathered from the chunks.
fn streamed(url: &str, body: &str) -> (Vec<u64>, String) {
    let streamed = {
        let mut r = ureq::post(&format!("{url}/chat/completions")).send(body).unwrap();
        r.body_mut().read_to_string().unwrap()
    };
    let chunks: Vec<serde_json::Value> = streamed
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let ids: Vec<u64> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["token_ids"].as_array())
        .flatten()
        .map(|x| x.as_u64().unwrap())
        .collect();
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    (ids, text)
}

#[test]
fn sixty_four_streams_are_decoded_as_one_batch() {
    let server = Server::start(&["--batch-wait-ms", "5000"]);
    let body = r#"{"messages": [{"role": "user", "content": "Tell me."}], "max_tokens": 24, "seed": 3,
        "temperature": 2.0, "stream": true}"#;
    let started = Instant::now();
    let answers: Vec<(Vec<u64>, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..64).map(|_| s.spawn(|| streamed(&server.url, body))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // The batch starts once 64 completions wait, not after the 5 s of gathering.
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    let stats = server.stats();
    assert_eq!((stats["rounds"].as_u64(), stats["peak_batch"].as_u64()), (Some(1), Some(64)), "{stats}");
    // One seed, one answer, whatever shares the batch.
    assert_eq!(answers[0].0.len(), 24, "{:?}", answers[0]);
    assert!(answers.iter().all(|a| *a == answers[0]));
}

#[test]
fn bench_reward_prints_the_cost_per_turn_and_judge_throughput() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let plugin = root.join("target/rewards/state-match.wasm");
    let o = Command::new(env!("CARGO_BIN_EXE_vagen-host"))
        .args(["bench", "reward", "--plugin", plugin.to_str().unwrap(), "--device", "cpu", "--judgments", "4"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
    let number = |after: &str| -> f64 {
        let rest = &out[out.find(after).unwrap_or_else(|| panic!("{after:?} in {out}")) + after.len()..];
        rest.split_whitespace().next().unwrap().parse().unwrap()
    };
    assert!(number("state-match: ") > 0.0);
    assert!(number("local ") > 0.0 && number("via serve ") > 0.0, "{out}");
}

/// Two adapters of the embedded model with random (non-zero) B, saved in PEFT's layout.
fn two_adapters() -> [tempfile::TempDir; 2] {
    [(3, vec!["q_proj", "v_proj"]), (4, vec!["up_proj", "o_proj"])].map(|(seed, targets)| {
        let model = vagen_model::default_model(0, Default::default()).unwrap();
        let lora = vagen_model::LoraConfig {
            target_modules: vagen_model::Targets::Names(targets.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        };
        common::random_adapter(model, &lora, seed)
    })
}

fn ask(url: &str, model: &str) -> (u16, serde_json::Value) {
    let body = serde_json::json!({
        "model": model,
        "messages": [{ "role": "user", "content": "Where is the goal?" }],
        "max_tokens": 12, "temperature": 1.0, "seed": 5,
    });
    let mut r = ureq::post(&format!("{url}/chat/completions"))
        .config()
        .http_status_as_error(false)
        .build()
        .send_json(&body)
        .unwrap();
    (r.status().as_u16(), r.body_mut().read_json().unwrap())
}

#[test]
fn served_adapters_and_the_base_answer_in_one_batch_as_each_alone() {
    let dirs = two_adapters();
    let (a, b) = (dirs[0].path().to_str().unwrap(), dirs[1].path().to_str().unwrap());
    let server = Server::start(&["--batch-wait-ms", "1000", "--lora", &format!("a={a}"), "--lora", &format!("b={b}")]);
    let listed: serde_json::Value =
        ureq::get(&format!("{}/models", server.url)).call().unwrap().body_mut().read_json().unwrap();
    let ids: Vec<&str> = listed["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["default", "a", "b"]);
    let names = ["default", "a", "b"];
    let together: Vec<(u16, serde_json::Value)> = std::thread::scope(|s| {
        let handles: Vec<_> = names.iter().map(|m| s.spawn(|| ask(&server.url, m))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let stats = server.stats();
    assert_eq!((stats["rounds"].as_u64(), stats["peak_batch"].as_u64()), (Some(1), Some(3)), "one batch: {stats}");
    let text = |v: &serde_json::Value| v["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    for ((status, answer), name) in together.iter().zip(names) {
        assert_eq!(*status, 200, "{answer}");
        assert_eq!(answer["model"], name);
        let alone = match name {
            "default" => Server::start(&[]),
            _ => Server::start(&["--adapter", if name == "a" { a } else { b }]),
        };
        let (_, want) = ask(&alone.url, "default");
        assert_eq!(text(answer), text(&want), "{name}: batched with the others, as alone");
    }
    assert_ne!(text(&together[1].1), text(&together[2].1), "the adapters differ");
    let (status, v) = ask(&server.url, "c");
    assert_eq!(status, 404);
    assert_eq!(v["error"]["code"], "model_not_found", "{v}");
}
