//! The `vagen-host` binary as a user runs it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf()
}

fn plugin(dir: &str, name: &str) -> PathBuf {
    let p = root().join("target").join(dir).join(format!("{name}.wasm"));
    assert!(p.is_file(), "{} is not built: run `cargo xtask plugins` first", p.display());
    p
}

fn host(args: &[&str]) -> Output {
    let cache = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_vagen-host"))
        .args(args)
        .env("VAGEN_CACHE_DIR", cache.path())
        .output()
        .expect("vagen-host runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn last_json(o: &Output) -> serde_json::Value {
    let text = stdout(o);
    let line = text.lines().last().expect("some output");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {line}"))
}

#[test]
fn run_reports_a_json_summary_and_writes_turns_and_images() {
    let fl = plugin("plugins", "frozenlake");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("log.jsonl");
    let o = host(&[
        "run",
        "--plugin",
        fl.to_str().unwrap(),
        "--policy",
        "oracle",
        "--episodes",
        "20",
        "--seed",
        "100",
        "--env-config",
        r#"{"observation": "text-and-image", "image_size": 64}"#,
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = last_json(&o);
    assert_eq!(s["episodes"], 20);
    assert_eq!(s["success_rate"], 1.0);
    assert_eq!(s["mean_reward"], 10.0);
    assert!(s["env_steps_per_sec"].as_f64().unwrap() > 0.0);

    let rows: Vec<serde_json::Value> =
        std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.iter().filter(|r| r["turn"] == 0).count(), 20, "one reset row per episode");
    assert_eq!(rows[0]["seed"], 100);
    for r in &rows {
        let images = r["images"].as_array().unwrap();
        assert_eq!(images.len(), 1);
        let png = dir.path().join(images[0].as_str().unwrap());
        let img = image_size(&png);
        assert_eq!(img, (64, 64), "{}", png.display());
    }
    assert!(rows.iter().filter(|r| r["done"] == true).all(|r| r["success"] == true));
}

/// Width and height from a PNG's IHDR chunk.
fn image_size(png: &Path) -> (u32, u32) {
    let b = std::fs::read(png).unwrap();
    assert_eq!(&b[1..4], b"PNG");
    let be = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().unwrap());
    (be(16), be(20))
}

#[test]
fn no_subcommand_means_run_and_random_is_worse_than_oracle() {
    let fl = plugin("plugins", "frozenlake");
    let o = host(&["--plugin", fl.to_str().unwrap(), "--episodes", "200", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = last_json(&o);
    assert_eq!(s["episodes"], 200);
    assert!(s["success_rate"].as_f64().unwrap() < 0.6, "{s}");
    assert!(stdout(&o).contains("steps/s"));
}

#[test]
fn the_same_seed_gives_the_same_log() {
    let fl = plugin("plugins", "frozenlake");
    let dir = tempfile::tempdir().unwrap();
    let logs: Vec<String> = ["a", "b"]
        .iter()
        .zip(["1", "2"])
        .map(|(name, parallel)| {
            let out = dir.path().join(format!("{name}.jsonl"));
            let o = host(&[
                "run",
                "--plugin",
                fl.to_str().unwrap(),
                "--episodes",
                "30",
                "--seed",
                "9",
                "--parallel",
                parallel,
                "--out",
                out.to_str().unwrap(),
            ]);
            assert!(o.status.success());
            std::fs::read_to_string(out).unwrap()
        })
        .collect();
    assert_eq!(logs[0], logs[1], "parallelism must not change the episodes");
}

#[test]
fn inspect_shows_the_manifest_and_hash() {
    let fl = plugin("plugins", "frozenlake");
    let o = host(&["inspect", "--plugin", fl.to_str().unwrap(), "--json"]);
    assert!(o.status.success());
    let v = last_json(&o);
    assert_eq!(v["manifest"]["name"], "frozenlake");
    assert_eq!(v["plugin"]["wit_version"], "0.2.0");
    assert_eq!(v["plugin"]["sha256"].as_str().unwrap().len(), 64);
    let text = stdout(&host(&["inspect", "--plugin", fl.to_str().unwrap()]));
    assert!(text.contains("Left, Down, Right, Up"), "{text}");
}

#[test]
fn errors_are_one_line_and_name_the_problem() {
    let fl = plugin("plugins", "frozenlake");
    let other = plugin("test-plugins", "not-an-env");
    let dir = tempfile::tempdir().unwrap();
    let text_file = dir.path().join("notes.wasm");
    std::fs::write(&text_file, "hello world").unwrap();
    let text_so = dir.path().join("notes.so");
    std::fs::write(&text_so, "hello world").unwrap();
    for (args, needle) in [
        // The loader's own reason after libloading's "dlopen failed".
        (vec!["run", "--plugin", text_so.to_str().unwrap(), "--allow-native"], "dlopen failed: "),
        (vec!["run", "--plugin", text_file.to_str().unwrap()], "is not a WebAssembly file"),
        (vec!["run", "--plugin", other.to_str().unwrap()], "is not a vagen plugin"),
        (vec!["run", "--plugin", fl.to_str().unwrap(), "--env-config", "{oops"], "bad config: not valid JSON"),
        (vec!["run", "--plugin", "/no/such/file.wasm"], "cannot read /no/such/file.wasm"),
        (vec!["run", "--plugin", fl.to_str().unwrap(), "--limit", "memroy_mib=5"], "no such limit"),
    ] {
        let o = host(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        // The cause once (an error chain printed a cause kept as a `source` twice).
        assert!(err.matches("os error").count() <= 1, "{args:?}: {err}");
    }
}

#[test]
fn a_crashing_env_fails_its_episodes_the_run_goes_on_and_then_exits_non_zero() {
    let hostile = plugin("test-plugins", "hostile");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("log.jsonl");
    let o = host(&[
        "run",
        "--plugin",
        hostile.to_str().unwrap(),
        "--policy",
        "oracle",
        "--episodes",
        "3",
        "--env-config",
        r#"{"mode": "panic"}"#,
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    // Every episode ran and is in the summary; with all of them failed the run did not pass.
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    let s = last_json(&o);
    assert_eq!((s["episodes"].as_u64(), s["failed_episodes"].as_u64()), (Some(3), Some(3)));
    assert!(s["mean_turns"].is_null(), "{s}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("panics on purpose"));
}

#[test]
fn check_exits_zero_on_a_good_plugin_and_one_naming_the_problem_on_a_bad_one() {
    let fl = plugin("plugins", "frozenlake");
    let o = host(&["check", "--plugin", fl.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stdout(&o));
    assert!(stdout(&o).contains("all 7 checks passed"), "{}", stdout(&o));
    let hostile = plugin("test-plugins", "hostile");
    let o = host(&["check", "--plugin", hostile.to_str().unwrap(), "--env-config", r#"{"mode": "nondeterministic"}"#]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    let fails: Vec<&str> = out.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert_eq!(fails.len(), 1, "{out}");
    assert!(fails[0].contains("determinism") && fails[0].contains("state leaks between episodes"), "{out}");
}

#[test]
fn bench_lists_every_benchmark_and_the_old_names_still_parse() {
    let o = host(&["bench", "--help"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let help = stdout(&o);
    // Each benchmark's line: two spaces, its name, its description.
    let listed: Vec<&str> = (help.lines().filter_map(|l| l.strip_prefix("  ")))
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for what in ["model", "rollout", "reward", "train", "dp", "async", "env"] {
        assert!(listed.contains(&what), "`bench --help` does not list {what}:\n{help}");
    }
    // The names before `bench <what>`, hidden for one release: each parses its arguments.
    for old in ["bench-model", "bench-rollout", "bench-reward", "bench-train", "bench-dp", "bench-async"] {
        let o = host(&[old, "--help"]);
        assert!(o.status.success(), "{old} --help: {}", String::from_utf8_lossy(&o.stderr));
    }
    assert!(!stdout(&host(&["--help"])).contains("bench-model"), "the old names are hidden");
    // Flags straight after `bench` are the env bench's (`bench --plugin F`, its old form).
    let o = host(&["bench", "--steps", "3"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--plugin <PLUGIN>"), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The env bench in its form from before `bench env` (`bench --plugin F ...`), kept working.
#[test]
fn bench_compares_wasm_and_native_side_by_side() {
    let (wasm, so) = (plugin("plugins", "sokoban"), root().join("target/plugins/sokoban.so"));
    let o = host(&[
        "bench",
        "--plugin",
        wasm.to_str().unwrap(),
        "--plugin",
        so.to_str().unwrap(),
        "--steps",
        "300",
        "--instances",
        "5",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = stdout(&o);
    let header = out.lines().next().unwrap();
    assert!(header.contains("sokoban.wasm (wasm)") && header.contains("sokoban.so (native)"), "{out}");
    let steps_row = out.lines().find(|l| l.starts_with("steps/s, one instance")).expect("a throughput row");
    let figures: Vec<f64> = steps_row.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    assert_eq!(figures.len(), 2, "{steps_row}");
    assert!(figures.iter().all(|&f| f > 0.0), "{steps_row}");
}

#[test]
fn a_plugin_failing_on_five_percent_of_steps_loses_only_those_episodes() {
    let hostile = plugin("test-plugins", "hostile");
    let o = host(&[
        "run",
        "--plugin",
        hostile.to_str().unwrap(),
        "--policy",
        "oracle",
        "--episodes",
        "200",
        "--env-config",
        r#"{"mode": "flaky"}"#,
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Episode i (seed i) fails at the first step s in 1..=3 with (31·seed + s) mod 20 = 7.
    let expected = (0u64..200).filter(|seed| (1..=3).any(|s| (seed * 31 + s) % 20 == 7)).count();
    let s = last_json(&o);
    assert_eq!(s["episodes"], 200);
    assert_eq!(s["failed_episodes"].as_u64(), Some(expected as u64));
    // Every healthy episode ran to its end and succeeded.
    assert!((s["success_rate"].as_f64().unwrap() - (200 - expected) as f64 / 200.0).abs() < 1e-12, "{s}");
}

#[test]
fn too_many_failures_stop_the_run_with_a_reproducer_that_replays() {
    let hostile = plugin("test-plugins", "hostile");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("log.jsonl");
    let o = host(&[
        "run",
        "--plugin",
        hostile.to_str().unwrap(),
        "--policy",
        "oracle",
        "--episodes",
        "100",
        "--env-config",
        r#"{"mode": "panic"}"#,
        "--out",
        out.to_str().unwrap(),
        "--parallel",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    let line = err.lines().find(|l| l.starts_with("error: ")).unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains("hostile.wasm") && line.contains("more than 25%") && line.contains("reproducer:"), "{line}");
    assert!(stdout(&o).contains("stopped early of 100 asked"), "{}", stdout(&o));
    let file = dir.path().join("hostile-failure-seed0.json");
    assert!(file.is_file(), "{line}");
    let o = host(&["run", "--replay", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("reproduced: step 1: step trapped"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn a_short_run_whose_episodes_all_fail_exits_non_zero_and_its_reproducer_replays_exactly() {
    let hostile = plugin("test-plugins", "hostile");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("log.jsonl");
    let (p, o) = (hostile.to_str().unwrap(), out.to_str().unwrap());
    let args = ["run", "--plugin", p, "--episodes", "4", "--env-config", r#"{"mode": "step-fails"}"#, "--out", o];
    let run = host(&args);
    assert_eq!(run.status.code(), Some(1), "{}", stdout(&run));
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("4 of 4 episodes")
            && err.contains("first error: turn 0: environment failed in step: step always fails"),
        "{err}"
    );
    // No average over episodes that never completed.
    let text = stdout(&run);
    assert!(text.contains("mean turns      n/a (no episode completed)"), "{text}");
    assert!(text.contains("mean reward     n/a (no episode completed)"), "{text}");
    assert!(text.contains("first error     turn 0: environment failed in step: step always fails"), "{text}");
    assert!(text.contains("failures        4 step:failed"), "counted by call and kind: {text}");
    let file = dir.path().join("hostile-failure-seed0.json");
    let replay = host(&["run", "--replay", file.to_str().unwrap()]);
    assert_eq!(replay.status.code(), Some(1));
    let said = String::from_utf8_lossy(&replay.stderr);
    assert!(said.contains("reproduced: step 1: environment failed in step: step always fails"), "{said}");

    // Played against an env that no longer fails, the verdict says so, and why, non-zero.
    let mut r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    r["config"] = r#"{"mode": "healthy"}"#.into();
    std::fs::write(&file, r.to_string()).unwrap();
    let replay = host(&["run", "--replay", file.to_str().unwrap()]);
    assert_eq!(replay.status.code(), Some(3));
    let said = String::from_utf8_lossy(&replay.stderr);
    assert!(said.contains("not reproduced:") && said.contains("played without error; recorded at step 1"), "{said}");

    // Within the allowed share, the same failures do not fail the run.
    let lenient = host(&[&args[..], &["--max-failure-rate", "1"]].concat());
    assert!(lenient.status.success(), "{}", String::from_utf8_lossy(&lenient.stderr));
    for bad in ["-1", "NaN", "1.5"] {
        let flag = format!("--max-failure-rate={bad}");
        let o = host(&[&args[..], &[flag.as_str()]].concat());
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", String::from_utf8_lossy(&o.stderr));
    }
}

#[test]
fn fuzz_reports_no_finding_on_a_reference_plugin_and_saves_a_reproducer_for_a_broken_one() {
    let fl = plugin("plugins", "frozenlake");
    let o = host(&["fuzz", "--plugin", fl.to_str().unwrap(), "--seconds", "2"]);
    assert!(o.status.success(), "{}{}", stdout(&o), String::from_utf8_lossy(&o.stderr));
    assert!(stdout(&o).contains("no findings"));

    // Without --out, beside the plugin (in its own folder here), never the working folder.
    let dir = tempfile::tempdir().unwrap();
    let hostile = dir.path().join("hostile.wasm");
    std::fs::copy(plugin("test-plugins", "hostile"), &hostile).unwrap();
    let o = host(&[
        "fuzz",
        "--plugin",
        hostile.to_str().unwrap(),
        "--env-config",
        r#"{"mode": "rare-trap"}"#,
        "--seconds",
        "60",
        "--stop-on-finding",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let file = dir.path().join("hostile-findings/hostile-fault.json");
    assert!(!std::env::current_dir().unwrap().join("fuzz-findings").exists());
    assert!(file.is_file(), "{}", stdout(&o));
    let o = host(&["run", "--replay", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("reproduced: step 2")
            && String::from_utf8_lossy(&o.stderr).contains("rare sequence"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn run_with_a_format_goes_through_prompt_parse_step_and_logs_trajectories() {
    let fl = plugin("plugins", "frozenlake");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("traj.jsonl");
    let o = host(&[
        "run",
        "--plugin",
        fl.to_str().unwrap(),
        "--policy",
        "oracle",
        "--format",
        "world-modeling",
        "--episodes",
        "12",
        "--group-size",
        "3",
        "--out",
        out.to_str().unwrap(),
        "--json",
        "--env-config",
        r#"{"observation":"text-and-image"}"#,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary = last_json(&o);
    assert_eq!(summary["format"], "world-modeling");
    assert_eq!(summary["metrics"]["episodes"], 12);
    assert_eq!(summary["metrics"]["success"], 1.0);
    assert_eq!(summary["metrics"]["format_correct_rate"], 1.0);
    let rows: Vec<serde_json::Value> =
        std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 12);
    let first = &rows[0];
    assert!(first["system"].as_str().unwrap().contains("<prediction>"));
    let turn = &first["turns"][0];
    assert_eq!(turn["parsed"]["format_ok"], true);
    assert!(turn["response"].as_str().unwrap().contains("<answer>"));
    let png = dir.path().join(first["images"][0][0].as_str().unwrap());
    assert!(png.is_file(), "{}", png.display());
    assert_eq!(rows[0]["seed"], rows[2]["seed"], "a group shares its seed");
    assert_ne!(rows[0]["seed"], rows[3]["seed"]);
}

#[test]
fn run_with_the_default_model_reports_token_lengths() {
    let fl = plugin("plugins", "frozenlake");
    let o = host(&[
        "run",
        "--plugin",
        fl.to_str().unwrap(),
        "--policy",
        "model",
        "--episodes",
        "2",
        "--max-turns",
        "2",
        "--max-new-tokens",
        "16",
        "--device",
        "cpu",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = &last_json(&o)["metrics"];
    assert_eq!(m["episodes"], 2);
    assert!(m["mean_response_tokens"].as_f64().unwrap() > 0.0);
    let o = host(&["run", "--plugin", fl.to_str().unwrap(), "--format", "free-thinking"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("free-think") && err.contains("free-thinking"), "{err}");
}

#[test]
fn a_rollout_with_too_many_env_failures_stops_with_a_reproducer() {
    let hostile = plugin("test-plugins", "hostile");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("log.jsonl");
    let o = host(&[
        "run",
        "--plugin",
        hostile.to_str().unwrap(),
        "--policy",
        "oracle",
        "--format",
        "no-think",
        "--episodes",
        "40",
        "--env-config",
        r#"{"mode":"panic"}"#,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("episodes of") && err.contains("hostile.wasm") && err.contains("reproducer"), "{err}");
    let file =
        std::fs::read_dir(dir.path()).unwrap().flatten().find(|e| e.file_name().to_string_lossy().contains("failure"));
    let file = file.expect("a reproducer file").path();
    let replay = host(&["run", "--replay", file.to_str().unwrap()]);
    assert!(!replay.status.success());
    assert!(String::from_utf8_lossy(&replay.stderr).contains("reproduced"));
}

#[test]
fn a_plugin_named_like_a_path_writes_inside_the_output_folder_and_a_shared_reproducer_runs_no_native_code() {
    let endless = plugin("test-plugins", "endless");
    let dir = tempfile::tempdir().unwrap();
    let deep = dir.path().join("a/b/c");
    std::fs::create_dir_all(&deep).unwrap();
    let out = deep.join("run.jsonl");
    let args = ["run", "--plugin", endless.to_str().unwrap(), "--env-config", r#"{"fail_at": 2}"#, "--episodes", "2"];
    let o = host(&[&args[..], &["--max-turns", "3", "--out", out.to_str().unwrap()]].concat());
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    // The plugin calls itself `../../../outside/pwned`: its reproducers stay beside the log.
    let written: Vec<String> =
        std::fs::read_dir(&deep).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    let reproducer = written.iter().find(|n| n.starts_with("outside-pwned-failure-seed")).expect("a reproducer");
    assert!(!dir.path().join("outside").exists(), "{written:?}");
    // The same reproducer, edited to name a native library: refused unless the user opts in.
    let file = deep.join(reproducer);
    let mut r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    r["plugin"] = root().join("target/plugins/frozenlake.so").to_str().unwrap().into();
    r["config"] = "".into();
    std::fs::write(&file, r.to_string()).unwrap();
    let o = host(&["run", "--replay", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("native plugin") && err.contains("--allow-native"), "{err}");
    let o = host(&["run", "--replay", file.to_str().unwrap(), "--allow-native"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("--allow-native") && err.contains("not reproduced"), "{err}");
}

#[test]
fn a_killed_run_keeps_the_episodes_it_finished_in_its_log() {
    let endless = plugin("test-plugins", "endless");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("log.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_vagen-host"))
        .args(["run", "--plugin", endless.to_str().unwrap(), "--episodes", "100000", "--max-turns", "5"])
        .args(["--out", out.to_str().unwrap(), "--parallel", "2"])
        .env("VAGEN_CACHE_DIR", dir.path().join("cache"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    // About 16 episodes of ~510 bytes: the log is flushed per batch of episodes, so at 4096
    // bytes a loaded machine had only 8 whole ones (48 rows) and the bound below failed.
    while std::fs::metadata(&out).map_or(0, |m| m.len()) < 8192 && start.elapsed().as_secs() < 60 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Whole episodes, in order, each with its reset row and five steps; at most the last
    // line cut short by the kill.
    let text = std::fs::read_to_string(&out).unwrap();
    let mut rows: Vec<serde_json::Value> = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        match serde_json::from_str(line) {
            Ok(v) => rows.push(v),
            Err(_) => assert_eq!(i, lines.len() - 1, "only the last line may be torn"),
        }
    }
    let complete = rows.len() / 6;
    assert!(complete >= 10, "{} rows", rows.len());
    for (k, r) in rows.iter().take(complete * 6).enumerate() {
        assert_eq!((r["episode"].as_u64(), r["turn"].as_u64()), (Some((k / 6) as u64), Some((k % 6) as u64)), "{r}");
    }
}

#[test]
fn a_person_plays_one_episode_at_a_time_sees_each_reward_and_how_it_ended() {
    use std::io::Write;
    let fl = plugin("plugins", "frozenlake");
    let cache = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_vagen-host"))
        .args(["run", "--plugin", fl.to_str().unwrap(), "--policy", "human", "--episodes", "2", "--seed", "3"])
        .env("VAGEN_CACHE_DIR", cache.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Seed 3 starts beside a hole on the left: the first episode falls in; the second takes
    // one move, then the input ends, and so does that episode.
    child.stdin.take().unwrap().write_all(b"Left\nUp\n").unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = stdout(&o);
    assert_eq!(text.matches("answer> ").count(), 3, "two answers, then end of input: {text}");
    // Each ending shows its last reward; the second episode's move also before its next prompt.
    assert_eq!(text.matches("reward +0").count(), 3, "{text}");
    assert_eq!(text.matches("episode done: no success").count(), 1, "{text}");
    assert_eq!(text.matches("episode ended before the env said done").count(), 1, "{text}");
    assert!(text.contains("2 episodes (0 failed)"), "{text}");
    let refused = host(&["run", "--plugin", fl.to_str().unwrap(), "--policy", "human", "--group-size", "2"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("one episode at a time"));
}

#[test]
fn check_and_fuzz_take_reward_functions() {
    let good = plugin("rewards", "state-match");
    let o = host(&["check", "--reward", "--plugin", good.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && out.contains("all 7 checks passed"), "{out}");
    let hostile = plugin("rewards", "hostile-reward");
    let o = host(&["check", "--reward", "--plugin", hostile.to_str().unwrap(), "--env-config", r#"{"mode": "trap"}"#]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success() && out.contains("FAIL score") && out.contains("trapped"), "{out}");
    let o = host(&["fuzz", "--reward", "--plugin", good.to_str().unwrap(), "--iterations", "30"]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("no findings"));
    let dir = tempfile::tempdir().unwrap();
    let o = host(&[
        "fuzz",
        "--reward",
        "--plugin",
        hostile.to_str().unwrap(),
        "--env-config",
        r#"{"mode": "short"}"#,
        "--iterations",
        "10",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success() && out.contains("FINDING malformed"), "{out}");
    assert!(dir.path().join("reward-malformed.txt").is_file());
}

#[test]
fn inspect_takes_a_reward_function_and_a_reward_given_as_an_env_says_what_it_is() {
    let reward = plugin("rewards", "state-match");
    let r = reward.to_str().unwrap();
    let o = host(&["inspect", "--reward", "--plugin", r]);
    let out = stdout(&o);
    assert!(o.status.success() && out.contains("reward function (vagen:env/reward@0.3.0)"), "{out}");
    assert!(out.contains("name          state-match"), "{out}");
    let json = last_json(&host(&["inspect", "--reward", "--json", "--plugin", r]));
    assert_eq!(json["manifest"]["name"], "state-match");
    assert_eq!(json["plugin"]["sha256"].as_str().unwrap().len(), 64);
    // Without --reward: named for what it is, with the flag that takes it.
    let o = host(&["inspect", "--plugin", r]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("it is a reward function (vagen:env/reward@0.3.0)"), "{err}");
    assert!(err.contains("--reward") && !err.contains("it exports"), "{err}");
}
