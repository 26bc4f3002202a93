//! Environments written in Python, JavaScript and C: each SDK's build command turns its
//! example from source into a component (installing its toolchain on first use, into
//! target/sdk-tools), and `vagen-host` checks it and plays it deterministically.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf()
}

fn ok(o: Output, what: &str) -> String {
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{what} failed ({}):\n{out}\n{err}", o.status);
    out.into_owned()
}

fn host(cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vagen-host"))
        .args(args)
        .env("VAGEN_CACHE_DIR", cache)
        .output()
        .expect("vagen-host runs")
}

/// `sdk/<sdk>/build.sh examples/<example> <out>`, with this build's vagen-host.
fn build(sdk: &str, example: &str, out: &Path) {
    let o = Command::new("bash")
        .arg(root().join("sdk").join(sdk).join("build.sh"))
        .arg(root().join("examples").join(example))
        .arg(out)
        .env("VAGEN_HOST", env!("CARGO_BIN_EXE_vagen-host"))
        .output()
        .expect("bash runs");
    ok(o, &format!("building {example}"));
    assert!(out.is_file());
}

#[test]
fn python_javascript_and_c_envs_build_from_source_check_and_replay_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    for (sdk, example, bad_config, named) in [
        ("python", "maze-keys-py", r#"{"size": 8}"#, "size"),
        ("js", "hanoi-js", r#"{"disk": 3}"#, "disk"),
        ("c", "lights-out-c", r#"{"size": 9}"#, "size"),
    ] {
        let wasm = dir.path().join(format!("{example}.wasm"));
        build(sdk, example, &wasm);
        let w = wasm.to_str().unwrap();
        let checked = ok(host(&cache, &["check", "--plugin", w]), &format!("check {example}"));
        assert!(checked.contains("all 7 checks passed"), "{checked}");
        // One oracle episode and three random ones, each twice: identical logs, oracle wins.
        for (policy, episodes) in [("oracle", "1"), ("random", "3")] {
            let logs: Vec<String> = ["a", "b"]
                .iter()
                .map(|run| {
                    let log = dir.path().join(format!("{example}-{policy}-{run}.jsonl"));
                    let args = ["run", "--plugin", w, "--policy", policy, "--episodes", episodes, "--seed", "11"];
                    let summary =
                        ok(host(&cache, &[&args[..], &["--json", "--out", log.to_str().unwrap()]].concat()), example);
                    if policy == "oracle" {
                        assert!(summary.contains(r#""success_rate":1.0"#), "{example}: {summary}");
                    }
                    std::fs::read_to_string(&log).unwrap()
                })
                .collect();
            assert!(logs[0].lines().count() >= 2, "{example}: {}", logs[0]);
            assert_eq!(logs[0], logs[1], "{example} {policy}: two runs of seed 11 differ");
        }
        let refused = host(&cache, &["run", "--plugin", w, "--env-config", bad_config]);
        let err = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success() && err.contains("bad config") && err.contains(named), "{example}: {err}");
    }
}

/// Per turn: reward, done, success, valid and effective actions, and the observation's
/// last line (the corridor).
fn outcomes(log: &str) -> Vec<String> {
    log.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let picture = v["observation"].as_str().unwrap().lines().last().unwrap_or("").to_string();
            let fields = ["reward", "done", "success", "valid_actions", "effective_actions"].map(|k| v[k].to_string());
            format!("{} {picture}", fields.join(" "))
        })
        .collect()
}

#[test]
fn the_three_templates_build_pass_check_and_play_the_same_seeded_episodes() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let mut plays = Vec::new();
    for sdk in ["python", "js", "c"] {
        let wasm = dir.path().join(format!("corridor-{sdk}.wasm"));
        let o = Command::new("bash")
            .arg(root().join("sdk").join(sdk).join("build.sh"))
            .arg(root().join("sdk").join(sdk).join("template"))
            .arg(&wasm)
            .env("VAGEN_HOST", env!("CARGO_BIN_EXE_vagen-host"))
            .output()
            .expect("bash runs");
        ok(o, &format!("building the {sdk} template"));
        let w = wasm.to_str().unwrap();
        assert!(ok(host(&cache, &["check", "--plugin", w]), sdk).contains("all 7 checks passed"));
        let log = dir.path().join(format!("corridor-{sdk}.jsonl"));
        let args = ["run", "--plugin", w, "--policy", "random", "--episodes", "5", "--seed", "3", "--out"];
        ok(host(&cache, &[&args[..], &[log.to_str().unwrap()]].concat()), sdk);
        plays.push(outcomes(&std::fs::read_to_string(&log).unwrap()));
    }
    // The walk-through in the docs shows these very files.
    let docs = std::fs::read_to_string(root().join("docs/writing-an-environment.md")).unwrap();
    for file in ["sdk/python/template/app.py", "sdk/js/template/app.js", "sdk/c/template/corridor.c"] {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        assert!(docs.contains(text.trim_end()), "docs/writing-an-environment.md does not show {file} as it is");
    }
    // One Rng (SplitMix64) in all three SDKs: the same seeds give the same corridors.
    assert!(plays[0].len() > 5);
    assert_eq!(plays[0], plays[1], "python vs javascript");
    assert_eq!(plays[0], plays[2], "python vs c");
}

#[test]
fn the_python_and_javascript_helpers_pass_their_own_tests() {
    let python = Command::new("python3")
        .args(["-m", "unittest", "discover", "-s"])
        .arg(root().join("sdk/python"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 runs");
    ok(python, "python3 -m unittest (sdk/python)");
    let node =
        Command::new("node").arg("--test").arg(root().join("sdk/js/test_vagen.mjs")).output().expect("node runs");
    ok(node, "node --test sdk/js/test_vagen.mjs");
}
