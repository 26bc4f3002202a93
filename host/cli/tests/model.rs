//! `vagen-host generate` and `bench model` as a user runs them, and how the binary links
//! libtorch.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf()
}

fn fixture(name: &str) -> String {
    root().join("host/model/tests/fixtures").join(name).display().to_string()
}

fn host(args: &[&str]) -> Output {
    // No LD_LIBRARY_PATH: the binary must find libtorch through its own RUNPATH.
    Command::new(env!("CARGO_BIN_EXE_vagen-host")).args(args).env_remove("LD_LIBRARY_PATH").output().unwrap()
}

fn last_json(o: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(text.lines().last().expect("some output")).unwrap()
}

#[test]
fn generate_json_gives_transformers_greedy_tokens() {
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("host/model/tests/fixtures/expected.json")).unwrap())
            .unwrap();
    let prompt = expected["texts"][0].as_str().unwrap();
    let o =
        host(&["generate", "--model", &fixture("tiny-qwen2"), "--prompt", prompt, "--max-new-tokens", "12", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let line = last_json(&o);
    assert_eq!(line["token_ids"], expected["greedy"]["tiny-qwen2"][0]);
    assert!(line["text"].is_string());
}

#[test]
fn generate_chat_with_the_default_model_is_seeded() {
    let args = [
        "generate",
        "--prompt",
        "Which way?",
        "--chat",
        "--temperature",
        "1",
        "--seed",
        "4",
        "--max-new-tokens",
        "6",
        "--json",
        "--device",
        "cpu",
    ];
    let (a, b) = (host(&args), host(&args));
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert_eq!(last_json(&a), last_json(&b));
    assert_eq!(last_json(&a)["token_ids"].as_array().unwrap().len(), 6);
}

#[test]
fn generate_errors_name_the_problem() {
    let o = host(&["generate", "--model", "/no/such/model", "--prompt", "x"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("/no/such/model") && err.contains("no such model folder"), "{err}");
    let o = host(&["generate", "--prompt", "x", "--dtype", "f8"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("dtype \"f8\""));
    let o = host(&["generate", "--prompt", "x", "--temperature=-1"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("temperature"));
}

#[test]
fn bench_model_prints_a_row_per_batch_size() {
    let o = host(&[
        "bench",
        "model",
        "--model",
        &fixture("tiny-qwen2"),
        "--batch",
        "1,3",
        "--prompt-len",
        "8",
        "--new-tokens",
        "4",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    for b in ["1", "3"] {
        let row = text.lines().find(|l| l.trim_start().starts_with(&format!("{b} |"))).expect("a row per batch");
        let figures: Vec<f64> = row.split_whitespace().filter_map(|w| w.parse().ok()).collect();
        assert!(figures.len() >= 3 && figures[1..3].iter().all(|f| *f > 0.0), "{row}");
    }
}

#[test]
fn bench_rollout_times_three_engines_on_the_same_work() {
    let o = host(&[
        "bench",
        "rollout",
        "--groups",
        "2",
        "--members",
        "2",
        "--turns",
        "2",
        "--new-tokens",
        "4",
        "--transformers",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let row = |name: &str| -> Vec<f64> {
        let line = text.lines().find(|l| l.trim_start().starts_with(&format!("{name} |"))).expect(name);
        line.split_whitespace().filter_map(|w| w.trim_end_matches('x').parse().ok()).collect()
    };
    let (old, new, hf) = (row("static"), row("continuous"), row("transformers"));
    // seconds, tokens/s, prefill tokens, tokens saved, [peak KV MiB], speed-up
    assert!(old[0] > 0.0 && new[0] > 0.0 && hf[0] > 0.0, "{text}");
    assert_eq!(old[2], hf[2], "the static engine and transformers prefill every prompt whole: {text}");
    assert_eq!(new[2] + new[3], old[2], "the continuous engine prefills or reuses each prompt token: {text}");
    assert!(new[3] > 0.0, "{text}");
    let o = host(&["bench", "rollout", "--turns", "0"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--turns"));
}

#[test]
fn generate_with_images_is_seeded_and_checks_its_input() {
    // Two images, then the text, in one user message (the model-side parity with
    // transformers is host/model/tests/vl.rs): same arguments, same tokens.
    let image = root().join("host/model/tests/fixtures/vl-images/a.png").display().to_string();
    let args = [
        "generate",
        "--model",
        &fixture("tiny-qwen2-vl-a"),
        "--image",
        &image,
        "--image",
        &image,
        "--prompt",
        "Where is the goal?",
        "--chat",
        "--max-new-tokens",
        "5",
        "--json",
    ];
    let (a, b) = (host(&args), host(&args));
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert_eq!(last_json(&a), last_json(&b));
    assert_eq!(last_json(&a)["token_ids"].as_array().unwrap().len(), 5);
    let o = host(&["generate", "--model", "default-vl", "--image", &image, "--prompt", "x", "--max-new-tokens", "2"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--image needs --chat"));
    let o = host(&["generate", "--image", &image, "--prompt", "x", "--chat"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("text-only"), "{}", String::from_utf8_lossy(&o.stderr));
    let o = host(&["generate", "--model", "default-vl", "--image", "/no/such.png", "--prompt", "x", "--chat"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("/no/such.png"));
}

#[test]
fn a_vl_model_plays_navigation_from_its_pictures_and_the_log_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nav.jsonl");
    let plugin = root().join("target/plugins/navigation.wasm").display().to_string();
    let run = |out: &Path| {
        let o = host(&[
            "run",
            "--plugin",
            &plugin,
            "--policy",
            "model",
            "--model",
            "default-vl",
            "--device",
            "cpu",
            "--episodes",
            "2",
            "--max-new-tokens",
            "12",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::read_to_string(out).unwrap()
    };
    let log = run(&out);
    let episodes: Vec<serde_json::Value> = log.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(episodes.len(), 2);
    for e in &episodes {
        // Each turn: the model's sampled answer, and the one picture it saw, saved beside
        // the log.
        let (turns, images) = (e["turns"].as_array().unwrap(), e["images"].as_array().unwrap());
        assert!(
            !turns.is_empty() && turns.len() == images.len(),
            "{} turns, {} image lists",
            turns.len(),
            images.len()
        );
        for (turn, shown) in turns.iter().zip(images) {
            assert_eq!(turn["origin"], "model");
            assert!(!turn["token_ids"].as_array().unwrap().is_empty());
            assert_eq!(shown.as_array().unwrap().len(), 1);
            let png = dir.path().join(shown[0].as_str().unwrap());
            assert_eq!(image::image_dimensions(&png).unwrap(), (256, 256), "{}", png.display());
        }
    }
    // Seeded: the same run gives the same log.
    assert_eq!(run(&dir.path().join("again.jsonl")).replace("again.", "nav."), log);
}

#[test]
fn bench_model_times_the_vision_encoder_of_a_vl_model() {
    let o = host(&[
        "bench",
        "model",
        "--model",
        "default-vl",
        "--device",
        "cpu",
        "--batch",
        "2",
        "--prompt-len",
        "8",
        "--new-tokens",
        "3",
        "--images",
        "2",
        "--image-size",
        "56",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("vision img/s") && text.contains("2 image(s) of 56x56"), "{text}");
    let row = text.lines().find(|l| l.trim_start().starts_with("2 |")).expect("a row");
    let figures: Vec<f64> = row.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    assert!(figures.len() >= 4 && figures[1..4].iter().all(|f| *f > 0.0), "{row}");
}

/// The linker must not drop libtorch_cuda (`--as-needed`), or CUDA silently disappears.
#[test]
fn the_binary_links_libtorch_cuda_when_libtorch_has_it() {
    let lib = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    let has_cuda = lib.split(':').any(|d| Path::new(d).join("libtorch_cuda.so").exists());
    let out = Command::new("readelf").arg("-d").arg(env!("CARGO_BIN_EXE_vagen-host")).output().expect("readelf runs");
    let dynamic = String::from_utf8_lossy(&out.stdout);
    assert!(dynamic.contains("[libtorch_cpu.so]"), "{dynamic}");
    assert_eq!(dynamic.contains("[libtorch_cuda.so]"), has_cuda, "{dynamic}");
    assert!(dynamic.contains("RUNPATH"), "{dynamic}");
}

/// `vagen-host train` then `vagen-host eval --config` on the run's own config: the standalone
/// evaluation reproduces the number the run logged for that checkpoint.
#[test]
fn eval_with_a_run_config_reproduces_the_runs_own_evaluation() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tiny.toml");
    let plugin = root().join("target/plugins/frozenlake.wasm");
    assert!(plugin.is_file(), "{} is not built: run `cargo xtask test`", plugin.display());
    std::fs::write(
        &config,
        format!(
            "[env]\nplugin = {:?}\ngroups = 2\ngroup_size = 2\nmax_turns = 3\nval_episodes = 6\n[env.config]\nmax_actions_per_turn = 1\n\
             [model]\ndevice = \"cpu\"\n[rollout]\nformat = \"no-think\"\nmax_new_tokens = 8\nper_turn = true\n\
             system_prompt = \"FrozenLake.\"\ndescribe_state = true\n[schedule]\nsteps = 1\neval_every = 1\nsave_every = 1\n\
             [sft]\nsteps = 3\nepisodes_per_step = 4\n",
            plugin.display().to_string()
        ),
    )
    .unwrap();
    let run = dir.path().join("run");
    let o = host(&["train", "--config", config.to_str().unwrap(), "--run-dir", run.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let logged = std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .rfind(|m| m["step"] == 1 && m.get("val/success").is_some())
        .expect("step 1 was evaluated");
    let actor = run.join("checkpoints/step-000001/actor");
    let run_config = run.join("config.toml");
    let args = ["eval", "--config", run_config.to_str().unwrap(), "--model", actor.to_str().unwrap(), "--json"];
    let o = host(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = last_json(&o);
    // Not a terminal: its progress as lines.
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("episodes 6/6 ("), "{err}");
    assert_eq!(m["judged"], 6);
    assert_eq!(m["success"]["value"], logged["val/success"], "{m}");
    assert_eq!(m["mean_turns"], logged["val/turns"], "{m}");
    assert_eq!(m["format_valid_rate"], logged["val/format_correct_rate"], "{m}");
    assert_eq!(m["settings"]["seeds"], 6);
    // The env build is in every file of the run, and the evaluation names the same one.
    let sha = m["settings"]["env"]["sha256"].as_str().unwrap();
    let built = format!("frozenlake 0.1.0 sha256:{sha}");
    let config_text = std::fs::read_to_string(&run_config).unwrap();
    assert!(config_text.starts_with(&format!("# env: {built}\n")), "{config_text}");
    let state = std::fs::read_to_string(run.join("checkpoints/step-000001/state.json")).unwrap();
    assert_eq!(serde_json::from_str::<serde_json::Value>(&state).unwrap()["env"], built.as_str());
    let first = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap().lines().next().unwrap().to_string();
    assert_eq!(serde_json::from_str::<serde_json::Value>(&first).unwrap()["run"]["env"], built.as_str());
    // A config and a plugin together are refused: the config names the plugin.
    let o = host(&["eval", "--config", run_config.to_str().unwrap(), "--model", "default", "--plugin", "x.wasm"]);
    assert!(!o.status.success());
}

/// Waits (up to two minutes) until `path` exists; false if the run ended first.
fn wait_for(path: &Path, child: &mut std::process::Child) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(120) {
        if path.exists() {
            return true;
        }
        if child.try_wait().unwrap().is_some() {
            return path.exists();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

/// kill -9 during SFT, again during RL, then the newest checkpoint truncated: each time
/// `train --resume` picks the run up, and it ends where an unbroken run ends.
#[test]
fn a_run_killed_during_sft_and_during_rl_with_a_torn_checkpoint_resumes_to_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("long.toml");
    let plugin = root().join("target/plugins/frozenlake.wasm");
    std::fs::write(
        &config,
        format!(
            "[env]\nplugin = {:?}\ngroups = 2\ngroup_size = 2\nmax_turns = 2\nval_episodes = 2\n\
             [model]\ndevice = \"cpu\"\n[rollout]\nformat = \"no-think\"\nmax_new_tokens = 6\nper_turn = true\n\
             system_prompt = \"FrozenLake.\"\n[schedule]\nsteps = 8\neval_every = 0\nsave_every = 1\nkeep_last = 4\n\
             [sft]\nsteps = 40\nepisodes_per_step = 2\nsave_every = 2\n",
            plugin.display().to_string()
        ),
    )
    .unwrap();
    let run = dir.path().join("run");
    let spawn = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_vagen-host"))
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let (config, run_dir) = (config.to_str().unwrap(), run.to_str().unwrap());
    let mut child = spawn(&["train", "--config", config, "--run-dir", run_dir]);
    assert!(wait_for(&run.join("checkpoints/sft-000004"), &mut child), "the run saved during SFT");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(!run.join("checkpoints/sft-000040").exists(), "killed during SFT");
    let mut child = spawn(&["train", "--resume", run_dir]);
    assert!(wait_for(&run.join("checkpoints/step-000002"), &mut child), "the resumed run reached RL");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!run.join("checkpoints/step-000008").exists(), "killed during RL");
    // The newest complete checkpoint torn (as a disk error would leave it).
    let newest = std::fs::read_dir(run.join("checkpoints"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("state.json").is_file() && p.file_name().unwrap().to_string_lossy().starts_with("step-"))
        .max()
        .unwrap();
    let weights = newest.join("actor/model.safetensors");
    std::fs::write(&weights, &std::fs::read(&weights).unwrap()[..100]).unwrap();
    let o = host(&["train", "--resume", run_dir]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("will not load") && err.contains(newest.to_str().unwrap()), "{err}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("held-out success"));
    assert!(run.join("checkpoints/step-000008/state.json").is_file());
    // Every SFT and RL step is in the log (some twice: the redone ones, after a resume mark).
    let log = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = log.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    for s in 1..=40 {
        assert!(lines.iter().any(|m| m["sft/step"] == f64::from(s)), "SFT step {s}");
    }
    for s in 1..=8 {
        assert!(lines.iter().any(|m| m["step"] == s && m.get("train/reward").is_some()), "RL step {s}");
    }
    assert_eq!(lines.iter().filter(|m| m.get("resumed_from").is_some()).count(), 2);
}

/// An adapter of the tiny fixture on every linear layer, with random (non-zero) B.
fn adapter() -> tempfile::TempDir {
    let model = vagen_model::Model::load(Path::new(&fixture("tiny-qwen2")), Default::default()).unwrap();
    let lora = vagen_model::LoraConfig { target_modules: vagen_model::Targets::AllLinear, ..Default::default() };
    common::random_adapter(model, &lora, 1)
}

#[test]
fn an_adapter_generates_over_its_base_and_merge_lora_writes_the_same_model_whole() {
    let adapter = adapter();
    let dir = adapter.path().to_str().unwrap();
    let generate = |model: &str, extra: &[&str]| {
        let mut args = vec!["generate", "--model", model, "--prompt", "the goal is", "--max-new-tokens", "8", "--json"];
        args.extend(extra);
        let o = host(&args);
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        last_json(&o)["token_ids"].clone()
    };
    let base = generate(&fixture("tiny-qwen2"), &[]);
    let adapted = generate(&fixture("tiny-qwen2"), &["--adapter", dir]);
    assert_ne!(adapted, base, "the adapter changes the greedy answer");
    assert_eq!(generate(dir, &[]), adapted, "the adapter folder names its base");

    let out = tempfile::tempdir().unwrap();
    let merged = out.path().join("merged");
    let o =
        host(&["merge-lora", "--base", &fixture("tiny-qwen2"), "--adapter", dir, "--out", merged.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(merged.join("model.safetensors").is_file() && !merged.join("adapter_config.json").exists());
    assert_eq!(generate(merged.to_str().unwrap(), &[]), adapted, "merged, the same greedy answer");
    let o = host(&["merge-lora", "--base", &fixture("tiny-qwen2"), "--adapter", dir, "--out", dir]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("is the adapter folder"));
}

/// A run that cannot learn says why, once: here every answer is cut at a 2-token cap, so
/// none parses and every episode of a group earns the same reward.
#[test]
fn a_run_whose_answers_are_cut_at_the_cap_warns_once_naming_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cut.toml");
    let plugin = root().join("target/plugins/frozenlake.wasm");
    assert!(plugin.is_file(), "{} is not built: run `cargo xtask test`", plugin.display());
    std::fs::write(
        &config,
        format!(
            "[env]\nplugin = {:?}\ngroups = 2\ngroup_size = 2\nmax_turns = 2\nval_episodes = 2\n\
             [model]\ndevice = \"cpu\"\n[rollout]\nformat = \"no-think\"\nmax_new_tokens = 2\nper_turn = true\n\
             [schedule]\nsteps = 4\neval_every = 0\nsave_every = 0\n[sft]\nsteps = 0\n",
            plugin.display().to_string()
        ),
    )
    .unwrap();
    let run = dir.path().join("run");
    let o = host(&["train", "--config", config.to_str().unwrap(), "--run-dir", run.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(err.matches("answers were cut at rollout.max_new_tokens = 2 tokens").count(), 1, "{err}");
    assert_eq!(err.matches("had zero advantage everywhere").count(), 1, "{err}");
    assert!(err.contains("answers cut at rollout.max_new_tokens = 2 all score alike"), "{err}");
}

/// Runs `args` and returns its output and its peak resident memory (MiB), read from the
/// kernel's accounting of that one child (`wait4`).
fn host_measured(args: &[&str]) -> (Output, f64) {
    use std::io::Read;
    // Reaped by wait4 below, which `Child::wait` cannot give the rusage of.
    #[allow(clippy::zombie_processes)]
    let mut child = Command::new(env!("CARGO_BIN_EXE_vagen-host"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        let mut v = vec![];
        out.read_to_end(&mut v).unwrap();
        v
    });
    let mut stderr = vec![];
    err.read_to_end(&mut stderr).unwrap();
    let stdout = reader.join().unwrap();
    let (mut status, mut usage): (libc::c_int, libc::rusage) = (0, unsafe { std::mem::zeroed() });
    // SAFETY: wait4 writes only the status and the struct it is given, for our own child.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as libc::pid_t);
    use std::os::unix::process::ExitStatusExt;
    let output = Output { status: std::process::ExitStatus::from_raw(status), stdout, stderr };
    (output, usage.ru_maxrss as f64 / 1024.0)
}

/// An adapter config whose rank the file's tensors do not have is refused before a byte is
/// allocated for it (issue 61: r = 10⁹ aborted with a backtrace; r = 10⁵ took 1.19 GB first).
#[test]
fn an_adapter_config_with_a_rank_its_tensors_lack_is_refused_before_allocating() {
    let adapter = adapter();
    let dir = adapter.path().to_str().unwrap();
    let (o, baseline) =
        host_measured(&["generate", "--model", &fixture("tiny-qwen2"), "--adapter", dir, "--prompt", "x"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let config_path = adapter.path().join("adapter_config.json");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    for r in [1_000_000_000u64, 100_000] {
        let mut bad = config.clone();
        bad["r"] = r.into();
        std::fs::write(&config_path, bad.to_string()).unwrap();
        let (o, peak) =
            host_measured(&["generate", "--model", &fixture("tiny-qwen2"), "--adapter", dir, "--prompt", "x"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "a clean error, not an abort: {err}");
        assert!(err.contains(&format!("r = {r}, but")) && !err.contains("backtrace"), "{err}");
        assert!(peak < baseline + 100.0, "r = {r}: peak {peak:.0} MiB against {baseline:.0} MiB for a good adapter");
        let o = host(&["serve", "--model", &fixture("tiny-qwen2"), "--lora", &format!("x={dir}"), "--port", "0"]);
        assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    }
    // A training config's rank is bounded by the layers it adapts.
    let mut model = vagen_model::Model::load(Path::new(&fixture("tiny-qwen2")), Default::default()).unwrap();
    let huge = vagen_model::LoraConfig { r: std::num::NonZeroUsize::new(1 << 30).unwrap(), ..Default::default() };
    let e = model.attach_lora(&huge, 0).unwrap_err().to_string();
    assert!(e.contains("larger than any adapted layer"), "{e}");
}

/// `merge-lora --out` never lands on its inputs, however it is spelled, nor over a folder
/// that holds files unless told to (issue 61: a link to the base overwrote its weights).
#[test]
fn merge_lora_refuses_an_out_that_is_or_is_inside_an_input_and_replaces_only_with_force() {
    let adapter = adapter();
    let work = tempfile::tempdir().unwrap();
    let base = work.path().join("base");
    std::fs::create_dir(&base).unwrap();
    for f in std::fs::read_dir(fixture("tiny-qwen2")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, base.join(f.file_name().unwrap())).unwrap();
    }
    let weights_before = std::fs::read(base.join("model-00001-of-00004.safetensors")).unwrap();
    std::os::unix::fs::symlink(&base, work.path().join("link")).unwrap();
    let merge = |out: &Path, extra: &[&str]| {
        let mut args = vec!["merge-lora", "--base", base.to_str().unwrap(), "--adapter"];
        args.extend([adapter.path().to_str().unwrap(), "--out", out.to_str().unwrap()]);
        args.extend(extra);
        host(&args)
    };
    let refused = [
        (work.path().join("link"), "the base folder"),
        (work.path().join("base/../base"), "the base folder"),
        (work.path().join("link/sub/new"), "lies inside the base folder"),
        (adapter.path().join("merged"), "lies inside the adapter folder"),
    ];
    for (out, says) in refused {
        let o = merge(&out, &["--force"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(says), "{}: {err}", out.display());
    }
    assert_eq!(std::fs::read(base.join("model-00001-of-00004.safetensors")).unwrap(), weights_before);
    let busy = work.path().join("busy");
    std::fs::create_dir(&busy).unwrap();
    std::fs::write(busy.join("notes.txt"), "mine").unwrap();
    let o = merge(&busy, &[]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("--force"));
    assert!(busy.join("notes.txt").exists(), "nothing replaced without --force");
    let o = merge(&busy, &["--force"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(busy.join("model.safetensors").is_file() && !busy.join("notes.txt").exists());
    let leftovers: Vec<_> = std::fs::read_dir(work.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(leftovers.iter().all(|n| !n.to_string_lossy().starts_with(".merge-lora-")), "{leftovers:?}");
}

/// A run killed before its first checkpoint (issue 61: the folder "already holds a run",
/// and `--resume` has "no complete checkpoint": the user had to delete it by hand). Both
/// messages now name `--restart`, which moves the old run aside and starts again.
#[test]
fn a_run_killed_before_its_first_checkpoint_is_started_again_with_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    let plugin = root().join("target/plugins/frozenlake.wasm");
    std::fs::write(
        &config,
        format!(
            "[env]\nplugin = {:?}\ngroups = 1\ngroup_size = 2\nmax_turns = 2\nval_episodes = 2\n\
             [model]\ndevice = \"cpu\"\n[rollout]\nformat = \"no-think\"\nmax_new_tokens = 4\nper_turn = true\n\
             [schedule]\nsteps = 1\neval_every = 0\n[sft]\nsteps = 100000\nepisodes_per_step = 1\nsave_every = 0\n",
            plugin.display().to_string()
        ),
    )
    .unwrap();
    let run = dir.path().join("run");
    let (config, run_dir) = (config.to_str().unwrap(), run.to_str().unwrap());
    let mut child = Command::new(env!("CARGO_BIN_EXE_vagen-host"))
        .args(["train", "--config", config, "--run-dir", run_dir])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_for(&run.join("metrics.jsonl"), &mut child), "the run started SFT");
    child.kill().unwrap(); // SIGKILL, during SFT
    child.wait().unwrap();
    let again = host(&["train", "--config", config, "--run-dir", run_dir]);
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        !again.status.success() && err.contains("before its first complete checkpoint") && err.contains("--restart"),
        "{err}"
    );
    let resumed = host(&["train", "--resume", run_dir]);
    let err = String::from_utf8_lossy(&resumed.stderr);
    assert!(!resumed.status.success() && err.contains("--restart"), "{err}");
    let restarted = host(&["train", "--config", config, "--run-dir", run_dir, "--restart", "--set", "sft.steps=1"]);
    let err = String::from_utf8_lossy(&restarted.stderr);
    assert!(restarted.status.success(), "{err}");
    let aside = dir.path().join("run.previous-1");
    assert!(err.contains(aside.to_str().unwrap()), "{err}");
    assert!(aside.join("config.toml").is_file() && aside.join("metrics.jsonl").is_file(), "the old run kept whole");
    assert!(run.join("checkpoints/step-000001/state.json").is_file());
}

/// Whether a command succeeded, and what it said on stderr.
fn outcome(o: std::process::Output) -> (bool, String) {
    (o.status.success(), String::from_utf8_lossy(&o.stderr).to_string())
}

/// `train --seeds 2`: each seed its own run and folder, each seed's figures and their mean ±
/// sd printed and in `seeds.json`; the same command again reads finished seeds back, resumes
/// one stopped after a checkpoint, and starts over one stopped before any.
#[test]
fn train_over_seeds_prints_each_seed_and_the_spread_and_continues_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tiny.toml");
    let plugin = root().join("target/plugins/frozenlake.wasm");
    std::fs::write(
        &config,
        format!(
            "[env]\nplugin = {:?}\ngroups = 2\ngroup_size = 2\nmax_turns = 2\nval_episodes = 4\n\
             [model]\ndevice = \"cpu\"\n[rollout]\nformat = \"no-think\"\nmax_new_tokens = 6\nper_turn = true\n\
             system_prompt = \"FrozenLake.\"\n[schedule]\nseed = 5\nsteps = 2\neval_every = 0\nsave_every = 1\n\
             [sft]\nsteps = 0\n",
            plugin.display().to_string()
        ),
    )
    .unwrap();
    let run = dir.path().join("runs");
    let args = ["train", "--config", config.to_str().unwrap(), "--run-dir", run.to_str().unwrap(), "--seeds", "2"];
    let o = host(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(run.join("seeds.json")).unwrap()).unwrap();
    let seeds = summary["seeds"].as_array().unwrap();
    assert_eq!(seeds.iter().map(|s| s["seed"].as_u64().unwrap()).collect::<Vec<_>>(), [5, 6]);
    for s in seeds {
        let folder = run.join(format!("seed-{}", s["seed"]));
        let written = std::fs::read_to_string(folder.join("config.toml")).unwrap();
        assert!(written.contains(&format!("seed = {}", s["seed"])), "{written}");
        let line =
            format!("{:>6} {:>10.3} {:>9.3}", s["seed"], s["start"].as_f64().unwrap(), s["end"].as_f64().unwrap());
        assert!(out.contains(&line), "{line:?} in\n{out}");
    }
    let ends: Vec<f64> = seeds.iter().map(|s| s["end"].as_f64().unwrap()).collect();
    let mean = (ends[0] + ends[1]) / 2.0;
    assert!((summary["end"]["mean"].as_f64().unwrap() - mean).abs() < 1e-12, "{summary}");
    let sd = (ends[0] - ends[1]).abs() / 2f64.sqrt();
    assert!((summary["end"]["sd"].as_f64().unwrap() - sd).abs() < 1e-12, "{summary}");
    assert!(out.contains("held-out success over 2 seeds (mean ± sd)"), "{out}");
    // Seed 5 finished; seed 6 stopped after its first checkpoint: it resumes there (with its
    // own seed) and its second step is the whole run's. A seed stopped before any
    // checkpoint starts over and makes the same steps again.
    let seed6 = run.join("seed-6");
    let step2 = |dir: &Path| {
        let text = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
        let last =
            text.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).rfind(|m| m["step"] == 2);
        let m = last.expect("step 2 logged");
        ["actor/pg_loss", "actor/grad_norm", "train/reward", "val/success"].map(|k| m[k].clone())
    };
    let whole = step2(&seed6);
    assert!(whole.iter().all(|v| v.is_number()), "{whole:?}");
    std::fs::remove_file(seed6.join("seed-figures.json")).unwrap();
    std::fs::remove_dir_all(seed6.join("checkpoints/step-000002")).unwrap();
    let (ok, err) = outcome(host(&args));
    assert!(ok && err.contains("seed 5: done before") && err.contains("seed 6: resuming"), "{err}");
    assert_eq!(step2(&seed6), whole, "the resumed seed's step 2 is the whole run's");
    let again: serde_json::Value = serde_json::from_slice(&std::fs::read(run.join("seeds.json")).unwrap()).unwrap();
    assert_eq!(again, summary);
    std::fs::remove_file(seed6.join("seed-figures.json")).unwrap();
    std::fs::remove_dir_all(seed6.join("checkpoints")).unwrap();
    let (ok, err) = outcome(host(&args));
    assert!(ok && err.contains("stopped before a checkpoint; set aside"), "{err}");
    assert_eq!(step2(&seed6), whole, "started over, the same steps");
    // A record written before a setting existed (at its default now) names the same config.
    let record = run.join("seed-5.config.toml");
    let text = std::fs::read_to_string(&record).unwrap();
    assert!(text.contains("cuda_graphs = true\n"), "{text}");
    std::fs::write(&record, text.replace("cuda_graphs = true\n", "")).unwrap();
    let (ok, err) = outcome(host(&args));
    assert!(ok && err.contains("seed 5: done before"), "{err}");
    // Refused: no seeds; a folder of another config (its runs are not mixed into one mean).
    let zero =
        host(&["train", "--config", config.to_str().unwrap(), "--run-dir", run.to_str().unwrap(), "--seeds", "0"]);
    assert!(!zero.status.success() && String::from_utf8_lossy(&zero.stderr).contains("--seeds 0"));
    let other = host(&[&args[..], &["--set", "optim.actor_lr=0.5"]].concat());
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(!other.status.success() && err.contains("seed-5") && err.contains("another config"), "{err}");
}
