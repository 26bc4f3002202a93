//! A new env author's first hour, as a test: an env unlike the reference ones (Codebreaker,
//! `examples/codebreaker-js`, written from the JavaScript template) builds, passes `check`
//! and `fuzz`, and the embedded model trained on it with `examples/codebreaker-cpu.toml`
//! (nothing tuned to the env's words) beats the random policy on the held-out seeds.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf()
}

fn ok(o: Output, what: &str) -> String {
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{what} failed ({}):\n{out}\n{err}", o.status);
    format!("{out}{err}")
}

fn host(cache: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vagen-host"));
    c.env("VAGEN_CACHE_DIR", cache).current_dir(root());
    c
}

/// The number after `label` in `text`.
fn figure(text: &str, label: &str) -> f64 {
    let at = text.find(label).unwrap_or_else(|| panic!("no {label:?} in:\n{text}")) + label.len();
    let word: String = text[at..].trim_start().chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    word.parse().unwrap_or_else(|_| panic!("no figure after {label:?} in:\n{text}"))
}

#[test]
fn a_new_javascript_env_passes_check_and_fuzz_and_the_embedded_model_learns_it_above_random() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let wasm = dir.path().join("codebreaker-js.wasm");
    let built = Command::new("bash")
        .arg(root().join("sdk/js/build.sh"))
        .arg(root().join("examples/codebreaker-js"))
        .arg(&wasm)
        .output()
        .expect("bash runs");
    ok(built, "building examples/codebreaker-js");
    let w = wasm.to_str().unwrap();
    let checked = ok(host(&cache).args(["check", "--plugin", w]).output().unwrap(), "check");
    assert!(checked.contains("all 7 checks passed"), "{checked}");
    // Fuzzing beside the training run: two processes, two cores.
    let fuzzing = host(&cache)
        // 128 MiB: a JavaScript engine's heap grows to about 100 MiB before its collector
        // holds it (host/env-tool/tests/languages.rs, `leak_mib`).
        .args(["fuzz", "--seconds", "30", "--leak-mib", "128", "--plugin", w, "--out"])
        .arg(dir.path().join("findings"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The held-out seeds a run evaluates on (`env.val_seed_start`'s default, 2^40).
    let random = host(&cache)
        .args(["run", "--plugin", w, "--policy", "random", "--episodes", "256", "--seed", "1099511627776"])
        .output()
        .unwrap();
    let random = figure(&ok(random, "the random policy"), "success rate");
    let run_dir = dir.path().join("run");
    let trained = host(&cache)
        .args(["train", "--config", "examples/codebreaker-cpu.toml", "--set", "schedule.steps=0", "--run-dir"])
        .arg(&run_dir)
        .args(["--set", &format!("env.plugin={w:?}")])
        .output()
        .unwrap();
    let trained = ok(trained, "training");
    let after_sft = figure(&trained, "held-out success before RL:");
    assert!(after_sft > random + 0.1, "{after_sft} after SFT vs {random} for random:\n{trained}");
    // The oracle's longest answer, with margin: not the 128 of a config that says nothing.
    let config = std::fs::read_to_string(run_dir.join("config.toml")).unwrap();
    let cap = figure(&config, "max_new_tokens =");
    assert!((10.0..40.0).contains(&cap), "{config}");
    let fuzzed = ok(fuzzing.wait_with_output().unwrap(), "fuzz");
    assert!(fuzzed.contains("no findings"), "{fuzzed}");
}
