//! The test suite's run: `cargo test`'s binaries (built once, listed by cargo), the doctests,
//! pytest files and the GPU bundle's dry run, as jobs on one or more lanes.
//!
//! Each job's output goes to `target/test-logs/NAME.log`; a line per job says how it ended,
//! with its time, and a failed job's log is printed. Every job runs even when one fails.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Instant;

use crate::Result;
use crate::phases::Phases;

pub struct Job {
    pub name: String,
    pub cmd: Command,
    /// What the command must have written for the job to pass.
    pub expect_files: Vec<PathBuf>,
    /// Jobs started with this one, on its lane (each its own row and log): for jobs that
    /// leave a core idle, whose CPU time is far below their wall time.
    pub beside: Vec<Job>,
}

impl Job {
    pub fn new(name: impl Into<String>, cmd: Command) -> Self {
        Job { name: name.into(), cmd, expect_files: Vec::new(), beside: Vec::new() }
    }
}

/// Runs `jobs` in the order given on `lanes` lanes (so list the long ones first), each a
/// phase of `phases`; the failures, named, as the error.
pub fn run_jobs(jobs: Vec<Job>, lanes: usize, logs: &Path, phases: &Phases) -> Result<()> {
    std::fs::create_dir_all(logs).map_err(|e| format!("creating {}: {e}", logs.display()))?;
    let queue = Mutex::new(jobs.into_iter().collect::<VecDeque<_>>());
    let failed = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..lanes.max(1) {
            s.spawn(|| {
                loop {
                    // Not in the loop's head: a guard there would hold the queue for the job.
                    let next = queue.lock().expect("the queue is never poisoned").pop_front();
                    let Some(mut job) = next else { break };
                    let beside = std::mem::take(&mut job.beside);
                    std::thread::scope(|s| {
                        for job in std::iter::once(job).chain(beside) {
                            s.spawn(|| {
                                let name = job.name.clone();
                                if phases.time_cpu(&format!("  {name}"), || run_one(job, logs)).is_err() {
                                    failed.lock().expect("the failures are never poisoned").push(name);
                                }
                            });
                        }
                    });
                }
            });
        }
    });
    let failed = failed.into_inner().expect("the lanes have ended");
    if failed.is_empty() { Ok(()) } else { Err(format!("failed: {}", failed.join(", "))) }
}

/// Runs one job; the outcome, and the CPU time its processes took.
fn run_one(mut job: Job, logs: &Path) -> (Result<()>, Option<f64>) {
    let log = logs.join(format!("{}.log", job.name.replace(['/', ' '], "-")));
    let start = Instant::now();
    let outcome = std::fs::File::create(&log)
        .and_then(|f| Ok((f.try_clone()?, f)))
        .map_err(|e| format!("creating {}: {e}", log.display()))
        .and_then(|(out, err)| {
            let child = job.cmd.stdin(Stdio::null()).stdout(out).stderr(err).spawn();
            child.map_err(|e| format!("cannot start {:?}: {e}", job.cmd))
        })
        .and_then(|child| wait_with_cpu(child).map_err(|e| format!("waiting for {}: {e}", job.name)));
    let (outcome, cpu) = match outcome {
        Ok((status, cpu)) => (Ok(status), Some(cpu)),
        Err(e) => (Err(e), None),
    };
    (report(&job, outcome, start.elapsed().as_secs_f64(), &log), cpu)
}

/// Waits for `child` as `wait` does, with the CPU time it and its waited-for descendants took.
fn wait_with_cpu(child: std::process::Child) -> std::io::Result<(std::process::ExitStatus, f64)> {
    use std::os::unix::process::ExitStatusExt;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: wait4 writes the status and the struct it is given; the child is ours and
    // nothing else waits for it (`child` is dropped unwaited, which neither waits nor kills).
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        while libc::wait4(pid, &mut status, 0, &mut usage) < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        usage
    };
    drop(child);
    Ok((std::process::ExitStatus::from_raw(status), crate::phases::cpu_seconds(&usage)))
}

/// Says how a job ended (a failed one's log tail too).
fn report(job: &Job, outcome: Result<std::process::ExitStatus>, seconds: f64, log: &Path) -> Result<()> {
    let summary = summary(log);
    let missing = job.expect_files.iter().find(|f| !f.is_file());
    match outcome {
        Ok(status) if status.success() && missing.is_some() => {
            let missing = missing.expect("checked").display();
            eprintln!("FAILED {} ({seconds:.1} s): it wrote no {missing}", job.name);
            Err(format!("no {missing}"))
        }
        Ok(status) if status.success() => {
            eprintln!("ok     {} ({seconds:.1} s){summary}", job.name);
            Ok(())
        }
        Ok(status) => {
            eprintln!("FAILED {} ({seconds:.1} s, {status}){summary}; its log, {}, ends:", job.name, log.display());
            eprintln!("{}", tail(log, 200));
            Err(format!("{status}"))
        }
        Err(e) => {
            eprintln!("FAILED {}: {e}", job.name);
            Err(e)
        }
    }
}

/// libtest's and pytest's own count of what passed, when the log has one.
fn summary(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut counts = text.lines().filter_map(|l| {
        let l = l.trim().trim_matches('=').trim();
        (l.starts_with("test result:") || (l.contains(" passed") && l.contains(" in "))).then(|| l.to_string())
    });
    match counts.next_back() {
        Some(last) => format!(": {last}"),
        None => String::new(),
    }
}

/// The last `n` lines of a log.
fn tail(log: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A test binary cargo built: where its package lives (its working folder, as under `cargo
/// test`), and a name for the log.
pub struct TestBinary {
    pub name: String,
    pub executable: PathBuf,
    pub package_dir: PathBuf,
}

/// The test binaries in `cargo test --no-run --message-format json` output.
pub fn test_binaries(json_lines: &str) -> Result<Vec<TestBinary>> {
    let mut found = Vec::new();
    for line in json_lines.lines().filter(|l| l.starts_with('{')) {
        let msg: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("cargo's message {line}: {e}"))?;
        if msg["reason"] != "compiler-artifact" || msg["profile"]["test"] != true {
            continue;
        }
        let Some(executable) = msg["executable"].as_str() else { continue };
        let manifest = msg["manifest_path"].as_str().ok_or("a compiler-artifact without a manifest_path")?;
        let package = msg["package_id"].as_str().unwrap_or_default();
        let target = msg["target"]["name"].as_str().unwrap_or_default();
        let kinds = msg["target"]["kind"].as_array().map(|k| k.iter().filter_map(|k| k.as_str()).collect::<Vec<_>>());
        let pkg = package_name(package);
        let kind = match kinds.as_deref() {
            Some(["test"]) => "tests",
            Some(["bin"]) => "bin",
            Some(["example"]) => "example",
            Some(["bench"]) => "bench",
            _ => "lib",
        };
        let name = if kind == "lib" { format!("{pkg}/lib") } else { format!("{pkg}/{kind}/{target}") };
        let package_dir = Path::new(manifest).parent().ok_or("a manifest path without a folder")?.to_path_buf();
        found.push(TestBinary { name, executable: PathBuf::from(executable), package_dir });
    }
    Ok(found)
}

/// The name in a package id: `path+file:///w/host/algo#vagen-algo@0.1.0`, or
/// `path+file:///w/plugins/svg#0.1.0` when the folder bears the package's name.
fn package_name(id: &str) -> &str {
    let (path, fragment) = id.rsplit_once('#').unwrap_or((id, ""));
    match fragment.split_once('@') {
        Some((name, _)) => name,
        None => path.rsplit('/').next().unwrap_or(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_test_binaries_from_cargo_messages() {
        let lines = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/host/algo#vagen-algo@0.1.0","manifest_path":"/w/host/algo/Cargo.toml","target":{"kind":["test"],"name":"properties"},"profile":{"test":true},"executable":"/w/target/release/deps/properties-1"}
{"reason":"compiler-artifact","package_id":"path+file:///w/host/algo#vagen-algo@0.1.0","manifest_path":"/w/host/algo/Cargo.toml","target":{"kind":["lib"],"name":"vagen_algo"},"profile":{"test":false},"executable":null}
{"reason":"compiler-artifact","package_id":"path+file:///w/plugins/svg#0.1.0","manifest_path":"/w/plugins/svg/Cargo.toml","target":{"kind":["cdylib","rlib"],"name":"svg"},"profile":{"test":true},"executable":"/w/target/release/deps/svg-2"}
{"reason":"build-finished","success":true}"#;
        let found = test_binaries(lines).unwrap();
        let names: Vec<&str> = found.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["vagen-algo/tests/properties", "svg/lib"]);
        assert_eq!(found[0].package_dir, Path::new("/w/host/algo"));
        assert_eq!(found[1].executable, Path::new("/w/target/release/deps/svg-2"));
    }

    #[test]
    fn every_job_runs_and_failures_are_named() {
        let logs = std::env::temp_dir().join(format!("xtask-suite-{}", std::process::id()));
        let sh = |script: &str| {
            let mut c = Command::new("sh");
            c.args(["-c", script]);
            c
        };
        let jobs = vec![
            Job::new("fails", sh("echo boom; exit 3")),
            Job::new("passes", sh("echo 'test result: ok. 2 passed'")),
            Job::new("also passes", sh("true")),
        ];
        let phases = Phases::new();
        let err = run_jobs(jobs, 2, &logs, &phases).unwrap_err();
        assert_eq!(err, "failed: fails");
        assert!(std::fs::read_to_string(logs.join("also-passes.log")).is_ok());
        assert_eq!(summary(&logs.join("passes.log")), ": test result: ok. 2 passed");
        let _ = std::fs::remove_dir_all(&logs);
    }

    /// A job's CPU time counts its own processes' (here a shell's busy loop in a grandchild),
    /// not the wall time it waited.
    #[test]
    fn a_jobs_cpu_time_is_its_processes() {
        let mut busy = Command::new("sh");
        busy.args(["-c", "sh -c 'i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done'; sleep 0.3"]);
        let start = Instant::now();
        let (status, cpu) = wait_with_cpu(busy.spawn().unwrap()).unwrap();
        let wall = start.elapsed().as_secs_f64();
        assert!(status.success());
        assert!(cpu > 0.05 && cpu < wall - 0.25, "cpu {cpu} s, wall {wall} s");
    }

    /// A shell that leaves its mark in `dir` and passes once the other's is there too.
    fn waits_for(dir: &Path, mine: &str, theirs: &str) -> Command {
        let mut c = Command::new("sh");
        let script = format!(
            "touch {d}/{mine}; for i in $(seq 100); do [ -f {d}/{theirs} ] && exit 0; sleep 0.05; done; exit 1",
            d = dir.display()
        );
        c.args(["-c", &script]);
        c
    }

    /// A job and the one beside it run at once, on one lane.
    #[test]
    fn a_job_beside_another_runs_with_it() {
        let dir = std::env::temp_dir().join(format!("xtask-beside-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut a = Job::new("a", waits_for(&dir, "a", "b"));
        a.beside.push(Job::new("b", waits_for(&dir, "b", "a")));
        let result = run_jobs(vec![a], 1, &dir.join("logs"), &Phases::new());
        let logged = dir.join("logs/b.log").is_file();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(result, Ok(()));
        assert!(logged, "the job beside has its own log");
    }

    /// Each job waits for the other's mark: they pass only when both lanes run at once.
    #[test]
    fn two_lanes_run_two_jobs_at_once() {
        let dir = std::env::temp_dir().join(format!("xtask-lanes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let jobs = vec![Job::new("a", waits_for(&dir, "a", "b")), Job::new("b", waits_for(&dir, "b", "a"))];
        let result = run_jobs(jobs, 2, &dir.join("logs"), &Phases::new());
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(result, Ok(()));
    }
}
