//! What the trainer's test files share: the plugins, a tiny run's config, its metrics.
#![allow(dead_code)] // each test file uses its own share of these

use std::path::{Path, PathBuf};
use vagen_trainer::TrainConfig;

pub fn plugin() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/plugins/frozenlake.wasm");
    assert!(p.is_file(), "{} is not built: run `cargo xtask test`", p.display());
    p
}

/// The test suite's misbehaving plugin (`tests/plugins/hostile`), whose `mode` says how.
pub fn hostile() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-plugins/hostile.wasm");
    assert!(p.is_file(), "{} is not built: run `cargo xtask test`", p.display());
    p
}

/// A tiny run: 2 groups × 2, two turns, short prompts, no SFT.
pub fn config(estimator: &str, extra: &str) -> String {
    format!(
        r#"
[env]
plugin = "{}"
groups = 2
group_size = 2
max_turns = 2
val_episodes = 4
[model]
device = "cpu"
[rollout]
format = "no-think"
max_new_tokens = 6
system_prompt = "Walk to G."
[algorithm.advantage]
estimator = "{estimator}"
[optim]
actor_lr = 1e-4
critic_lr = 1e-4
mini_batch = 4
micro_batch = 2
[schedule]
steps = 2
eval_every = 0
save_every = 1
{extra}
"#,
        plugin().display()
    )
}

/// `config` on the hostile plugin in `mode`.
pub fn hostile_config(mode: &str, extra: &str) -> String {
    config("grpo", extra)
        .replace(plugin().to_str().unwrap(), hostile().to_str().unwrap())
        .replace("[model]", &format!("[env.config]\nmode = \"{mode}\"\n[model]"))
}

pub fn parse(text: &str, overrides: &[&str]) -> Result<TrainConfig, String> {
    let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    TrainConfig::parse(text, "test.toml", &overrides).map_err(|e| e.to_string())
}

pub fn metrics(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

pub fn step_line(dir: &Path, step: u64) -> serde_json::Value {
    metrics(dir).into_iter().rfind(|m| m["step"] == step && m.get("train/reward").is_some()).unwrap()
}

/// Two runs' lines of RL step `step` agree: the `equal` figures exactly, the `close` ones
/// within 1e-6.
pub fn assert_same_step(a: &Path, b: &Path, step: u64, equal: &[&str], close: &[&str]) {
    let (a, b) = (step_line(a, step), step_line(b, step));
    for key in equal {
        assert_eq!(a[key], b[key], "{key}");
    }
    for key in close {
        let (x, y) = (a[key].as_f64().unwrap(), b[key].as_f64().unwrap());
        assert!((x - y).abs() < 1e-6, "{key}: {x} vs {y}");
    }
}

/// The run's TensorBoard folder as TensorBoard's own reader sees it
/// (`reference/read_tensorboard.py`): `{"scalars": {tag: [[step, value]]}, "images": {...}}`.
pub fn tensorboard(dir: &Path) -> serde_json::Value {
    reference("read_tensorboard.py", &[dir.join("tensorboard").to_str().unwrap()], "")
}

/// A script of `reference/` run by the tests' Python with `args` and `input` on stdin; the
/// JSON it prints.
pub fn reference(script: &str, args: &[&str], input: &str) -> serde_json::Value {
    use std::io::Write;
    let python = std::env::var("VAGEN_PYTHON").expect(
        "VAGEN_PYTHON is not set: run the tests with `cargo xtask test`, or point it at the project's venv Python",
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("reference").join(script);
    let mut child = std::process::Command::new(python)
        .arg(&script)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}: {}", script.display(), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every number of `metrics.jsonl` (as the run now stands) is in TensorBoard once, at its
/// step (`sft/step` for SFT lines), to f32 precision; returns how many were compared.
pub fn assert_tensorboard_matches_metrics(dir: &Path) -> usize {
    let tb = tensorboard(dir);
    let lines = vagen_trainer::read_metrics(dir).unwrap();
    let mut compared = 0;
    for line in &lines {
        let fields = line.as_object().unwrap();
        let step = fields.get("sft/step").or(fields.get("step")).and_then(|s| s.as_f64()).unwrap() as u64;
        for (tag, value) in fields.iter().filter(|(k, _)| *k != "step") {
            let Some(v) = value.as_f64() else { continue };
            let points = tb["scalars"][tag].as_array().unwrap_or_else(|| panic!("no {tag} in TensorBoard: {tb}"));
            let at: Vec<f64> =
                points.iter().filter(|p| p[0].as_u64() == Some(step)).map(|p| p[1].as_f64().unwrap()).collect();
            assert_eq!(at.len(), 1, "{tag} at step {step}: {at:?}");
            assert!((at[0] - v).abs() <= 1e-6 * v.abs().max(1.0), "{tag} at step {step}: {} vs {v}", at[0]);
            compared += 1;
        }
    }
    compared
}

/// The run `text` describes, for two steps uninterrupted (`.0`), and stopped after step 1,
/// `between` done to its folder, then resumed to step 2 (`.1`).
pub fn whole_and_resumed(text: &str, between: impl FnOnce(&Path)) -> (tempfile::TempDir, tempfile::TempDir) {
    let whole = tempfile::tempdir().unwrap();
    vagen_trainer::Trainer::new(parse(text, &["schedule.steps=2"]).unwrap(), whole.path()).unwrap().run().unwrap();
    let cut = tempfile::tempdir().unwrap();
    vagen_trainer::Trainer::new(parse(text, &["schedule.steps=1"]).unwrap(), cut.path()).unwrap().run().unwrap();
    between(cut.path());
    let mut resumed = vagen_trainer::Trainer::resume(cut.path(), &["schedule.steps=2".into()]).unwrap();
    assert_eq!(resumed.state.step, 1);
    resumed.run().unwrap();
    (whole, cut)
}
