//! Data-parallel training as users start it: `--nproc`, torchrun, and ranks started by
//! hand with torchrun's variables; the maths against one process, resumption across world
//! sizes, and what the other ranks do when one is killed or hangs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf()
}

/// A tiny run: 4 groups × 2 (two ranks get 2 groups each), SFT then RL, StarPO-S keeping half
/// the groups, checkpoints every step.
fn config(dir: &Path, estimator: &str, extra: &str) -> PathBuf {
    let plugin = root().join("target/plugins/frozenlake.wasm");
    assert!(plugin.is_file(), "{} is not built: run `cargo xtask test`", plugin.display());
    let text = format!(
        r#"
[env]
plugin = "{}"
groups = 4
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
[algorithm.filter]
keep_fraction = 0.5
[optim]
actor_lr = 1e-4
critic_lr = 1e-4
mini_batch = 4
micro_batch = 2
[schedule]
steps = 2
eval_every = 2
save_every = 1
[sft]
steps = 2
episodes_per_step = 4
{extra}
"#,
        plugin.display()
    );
    // GiGPO's step groups need one sequence per turn.
    let text = match estimator {
        "gigpo" => text.replace("[rollout]\n", "[rollout]\nper_turn = true\n"),
        _ => text,
    };
    let path = dir.join(format!("{estimator}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn host() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vagen-host"));
    // No rendezvous variables from whatever started the test.
    for v in ["RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "MASTER_ADDR", "MASTER_PORT"] {
        c.env_remove(v);
    }
    c
}

fn train(config: &Path, run_dir: &Path, extra: &[&str]) -> Output {
    let out = host()
        .args(["train", "--config", config.to_str().unwrap(), "--run-dir", run_dir.to_str().unwrap()])
        .args(extra)
        .output()
        .unwrap();
    assert!(out.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

fn metrics(dir: &Path) -> Vec<serde_json::Map<String, serde_json::Value>> {
    std::fs::read_to_string(dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap().as_object().unwrap().clone())
        .collect()
}

/// Figures that depend on how the work was spread, not on the maths: time (and the idle
/// shares of time), and the generation engines' cache counters (each rank's engine shares
/// prefixes only among its own groups).
fn spread_dependent(key: &str) -> bool {
    key.starts_with("timing_s/")
        || key.ends_with("_idle")
        || key == "throughput/tokens_per_s"
        || ["rollout/prefill_tokens", "rollout/kv_", "rollout/rows_freed_early"].iter().any(|p| key.starts_with(p))
}

/// Every line of the two runs has the same keys and values within `rel` (relative).
fn same_metrics(a: &Path, b: &Path, rel: f64) {
    let (ma, mb) = (metrics(a), metrics(b));
    assert_eq!(ma.len(), mb.len(), "{} vs {} lines", a.display(), b.display());
    for (x, y) in ma.iter().zip(&mb) {
        let keys: Vec<&String> = x.keys().filter(|k| !spread_dependent(k)).collect();
        assert_eq!(keys, y.keys().filter(|k| !spread_dependent(k)).collect::<Vec<_>>(), "{x:?}");
        for k in keys {
            match (x[k].as_f64(), y[k].as_f64()) {
                (Some(u), Some(v)) => assert!(
                    (u - v).abs() <= rel * u.abs().max(1.0),
                    "{k} at {:?}: {u} vs {v} ({} vs {})",
                    x.get("step"),
                    a.display(),
                    b.display()
                ),
                _ => assert_eq!(x[k], y[k], "{k}"),
            }
        }
    }
}

/// ‖a − b‖ / ‖a‖ over every tensor of two safetensors files.
fn distance(a: &Path, b: &Path) -> f64 {
    let read = |p: &Path| -> std::collections::BTreeMap<String, tch::Tensor> {
        tch::Tensor::read_safetensors(p).unwrap().into_iter().collect()
    };
    let (ta, tb) = (read(a), read(b));
    assert_eq!(ta.keys().collect::<Vec<_>>(), tb.keys().collect::<Vec<_>>(), "{}", a.display());
    let (mut diff, mut norm) = (0.0, 0.0);
    for (k, x) in &ta {
        let (x, y) = (x.to_kind(tch::Kind::Double), tb[k].to_kind(tch::Kind::Double));
        diff += (&x - &y).square().sum(tch::Kind::Double).double_value(&[]);
        norm += x.square().sum(tch::Kind::Double).double_value(&[]);
    }
    (diff / norm.max(1e-300)).sqrt()
}

/// The checkpoints of two runs hold the same weights and optimiser state within `rel`.
fn same_checkpoints(a: &Path, b: &Path, rel: f64) {
    let mut files = 0;
    for ckpt in std::fs::read_dir(a.join("checkpoints")).unwrap().flatten() {
        let name = ckpt.file_name();
        for sub in [
            "actor/model.safetensors",
            "actor_optim.safetensors",
            "critic/model.safetensors",
            "critic_optim.safetensors",
        ] {
            let fa = ckpt.path().join(sub);
            if !fa.is_file() {
                continue;
            }
            let fb = b.join("checkpoints").join(&name).join(sub);
            let d = distance(&fa, &fb);
            assert!(d <= rel, "{}: {d:e}", fa.display());
            files += 1;
        }
    }
    assert!(files >= 6, "compared {files} checkpoint files");
}

#[test]
fn two_ranks_train_as_one_process_with_every_estimator_and_sharded_moments() {
    let dir = tempfile::tempdir().unwrap();
    for (estimator, extra) in [
        // With a KL penalty: the reference is written by rank 0 and read by both.
        ("gae", "[algorithm.policy_loss.kl]\nkind = \"low-var-kl\"\ncoef = 0.01\n"),
        ("grpo", ""),
        ("gigpo", ""),
        ("bi-level-gae", ""),
    ] {
        let cfg = config(dir.path(), estimator, extra);
        let one = dir.path().join(format!("{estimator}-1"));
        let two = dir.path().join(format!("{estimator}-2"));
        train(&cfg, &one, &[]);
        let out = train(&cfg, &two, &["--nproc", "2"]);
        // Only rank 0 reports.
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(stdout.matches("held-out success:").count(), 1);
        assert!(stdout.contains(" after SFT -> "), "{stdout}");
        // Not a terminal: progress as lines, from rank 0 only.
        let stderr = String::from_utf8_lossy(&out.stderr);
        for line in ["SFT steps 2/2 (", "RL steps 2/2 ("] {
            assert_eq!(stderr.matches(line).count(), 1, "{line}: {stderr}");
        }
        if estimator == "grpo" {
            // Without SFT the first figure is the model as loaded.
            let plain = train(&cfg, &dir.path().join("grpo-no-sft"), &["--set", "sft.steps=0"]);
            let stdout = String::from_utf8_lossy(&plain.stdout);
            assert!(stdout.contains(" before RL -> ") && !stdout.contains("SFT"), "{stdout}");
        }
        same_metrics(&one, &two, 1e-5);
        same_checkpoints(&one, &two, 1e-5);
        if estimator == "gae" {
            // ZeRO-1: the critic's and the actor's moments sharded, the same run.
            let sharded = dir.path().join("gae-2-shard");
            train(&cfg, &sharded, &["--nproc", "2", "--set", "optim.shard=true"]);
            same_metrics(&one, &sharded, 1e-5);
            same_checkpoints(&one, &sharded, 1e-5);
        }
    }
}

#[test]
fn torchrun_starts_the_same_run_as_nproc() {
    let python = std::env::var("VAGEN_PYTHON").expect("VAGEN_PYTHON names the test venv's python");
    let torchrun = Path::new(&python).with_file_name("torchrun");
    assert!(torchrun.is_file(), "{} missing: the test venv has torch", torchrun.display());
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "grpo", "");
    let own = dir.path().join("own");
    train(&cfg, &own, &["--nproc", "2"]);
    let by_torchrun = dir.path().join("torchrun");
    let out = Command::new(&torchrun)
        .args(["--nproc-per-node", "2", "--no-python", env!("CARGO_BIN_EXE_vagen-host"), "train", "--config"])
        .arg(&cfg)
        .arg("--run-dir")
        .arg(&by_torchrun)
        .env("MASTER_PORT", free_port().to_string())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    same_metrics(&own, &by_torchrun, 0.0);
}

#[test]
fn a_two_rank_checkpoint_resumes_in_one_rank() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "grpo", "");
    let straight = dir.path().join("straight");
    train(&cfg, &straight, &[]);
    let resumed = dir.path().join("resumed");
    train(&cfg, &resumed, &["--nproc", "2", "--set", "schedule.steps=1", "--set", "optim.shard=true"]);
    let out = host().args(["train", "--resume"]).arg(&resumed).args(["--set", "schedule.steps=2"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (a, b) = (step_line(&straight, 2), step_line(&resumed, 2));
    for (k, v) in a.iter().filter(|(k, _)| !spread_dependent(k) && !k.starts_with("val/")) {
        let (u, w) = (v.as_f64().unwrap(), b[k].as_f64().unwrap());
        assert!((u - w).abs() <= 1e-5 * u.abs().max(1.0), "{k}: {u} vs {w}");
    }
    let last = |d: &Path| d.join("checkpoints/step-000002/actor/model.safetensors");
    assert!(distance(&last(&straight), &last(&resumed)) < 1e-5);
}

fn step_line(dir: &Path, step: u64) -> serde_json::Map<String, serde_json::Value> {
    metrics(dir).into_iter().rfind(|m| m["step"] == step && m.contains_key("train/reward")).unwrap()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Two ranks started by hand as torchrun would start them (rank 0 hosts the store), on a
/// run long enough to be interrupted; returns them once rank 0 has logged an RL step.
fn two_ranks(dir: &Path) -> (Child, Child, PathBuf) {
    let cfg = config(dir, "grpo", "[distributed]\ntimeout_s = 10\n");
    let text = std::fs::read_to_string(&cfg).unwrap().replace("steps = 2\neval_every", "steps = 500\neval_every");
    std::fs::write(&cfg, text).unwrap();
    let run = dir.join("run");
    let port = free_port().to_string();
    let rank = |r: &str| {
        host()
            .args(["train", "--config", cfg.to_str().unwrap(), "--run-dir", run.to_str().unwrap()])
            .env("RANK", r)
            .env("WORLD_SIZE", "2")
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", &port)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (r0, r1) = (rank("0"), rank("1"));
    let start = Instant::now();
    while !std::fs::read_to_string(run.join("metrics.jsonl")).is_ok_and(|t| t.contains("train/reward")) {
        assert!(start.elapsed() < Duration::from_secs(120), "no RL step logged");
        std::thread::sleep(Duration::from_millis(100));
    }
    (r0, r1, run)
}

/// Waits for `child` to exit; its status, stderr and how long it took.
fn exit_of(mut child: Child, limit: Duration) -> (std::process::ExitStatus, String, Duration) {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            return (status, err, start.elapsed());
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_killed_rank_stops_the_other_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let (r0, mut r1, run) = two_ranks(dir.path());
    r1.kill().unwrap();
    let _ = r1.wait();
    // timeout_s = 10, plus 5.
    let (status, err, took) = exit_of(r0, Duration::from_secs(15));
    assert!(!status.success());
    assert!(err.contains("rank 1"), "{err}");
    assert!(took <= Duration::from_secs(15), "{took:?}");
    // Whatever checkpoints there are, each is whole.
    for ckpt in std::fs::read_dir(run.join("checkpoints")).into_iter().flatten().flatten() {
        if !ckpt.file_name().to_string_lossy().starts_with('.') {
            assert!(ckpt.path().join("actor/model.safetensors").is_file(), "{}", ckpt.path().display());
        }
    }
}

#[test]
fn a_hung_rank_stops_the_other_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let (r0, r1, _) = two_ranks(dir.path());
    let pid = r1.id().to_string();
    assert!(Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    let (status, err, took) = exit_of(r0, Duration::from_secs(15));
    let _ = Command::new("kill").args(["-KILL", &pid]).status();
    assert!(!status.success());
    assert!(err.contains("rank 1") && err.contains("stopped answering"), "{err}");
    assert!(took <= Duration::from_secs(15), "{took:?}");
}

#[test]
fn asynchronous_ranks_train_as_one_asynchronous_process() {
    // Each rank's generator thread plays its block of the groups one update behind.
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "grpo", "[async]\nmax_staleness = 1\n");
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    train(&cfg, &one, &[]);
    train(&cfg, &two, &["--nproc", "2"]);
    same_metrics(&one, &two, 1e-5);
    same_checkpoints(&one, &two, 1e-5);
    assert_eq!(step_line(&two, 2)["async/staleness"], 1.0);
}
