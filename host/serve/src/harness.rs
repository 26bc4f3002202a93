//! Harness processes: an agent program in any language, started once per episode with its
//! episode's URL and key in `OPENAI_BASE_URL` / `OPENAI_API_KEY` (what the official `openai`
//! clients read) and its task in `VAGEN_TASK` and on stdin. It ends the episode by exiting,
//! having reported its reward by `POST …/reward` or as the last line of its stdout
//! (`{"reward": …}`). A harness is the user's own code: it runs as the user, unsandboxed,
//! in a process group of its own that is killed whole when the episode ends, so nothing it
//! started outlives it. One that crashes, runs past its deadline, floods its output or never
//! reports is a failed episode, with its stderr's tail.

use crate::episodes::{EpisodeBook, EpisodeRecord, Reported};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// How to run a harness (`[env] harness` of a training config).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HarnessConfig {
    /// The program and its arguments, e.g. `["python", "agent.py"]`.
    pub command: Vec<String>,
    /// Environment variables added to the harness's own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The folder it runs in (a training config's is relative to the config's folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// Seconds an episode may take, from start to exit.
    #[serde(default = "default_timeout_s")]
    pub timeout_s: f64,
    /// Episodes running at once.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// KiB the harness may write to stdout, and again to stderr.
    #[serde(default = "default_max_output_kib")]
    pub max_output_kib: usize,
    /// A JSON Lines file of task records: an episode of seed s is given line s mod lines
    /// (without it, the seed is the task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<PathBuf>,
}

fn default_timeout_s() -> f64 {
    120.0
}
fn default_concurrency() -> usize {
    8
}
fn default_max_output_kib() -> usize {
    1024
}

impl HarnessConfig {
    /// A command, a positive finite deadline, some concurrency and output.
    pub fn check(&self) -> Result<(), String> {
        if self.command.first().is_none_or(|p| p.is_empty()) {
            return Err("command: name the program to run, e.g. [\"python\", \"agent.py\"]".into());
        }
        if !(self.timeout_s.is_finite() && self.timeout_s > 0.0) {
            return Err(format!("timeout_s {}: must be a positive number of seconds", self.timeout_s));
        }
        if self.concurrency == 0 || self.max_output_kib == 0 {
            return Err("concurrency and max_output_kib must be at least 1".into());
        }
        Ok(())
    }

    /// The task records of `tasks`, one JSON value a line (blank lines skipped); none
    /// without a file.
    pub fn read_tasks(&self) -> Result<Vec<serde_json::Value>, String> {
        let Some(path) = &self.tasks else { return Ok(vec![]) };
        let text = std::fs::read_to_string(path).map_err(|e| format!("tasks {}: {e}", path.display()))?;
        let records = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("tasks {} line {}: {e}", path.display(), i + 1)))
            .collect::<Result<Vec<_>, _>>()?;
        if records.is_empty() {
            return Err(format!("tasks {}: no task in the file", path.display()));
        }
        Ok(records)
    }
}

/// One episode to run: its seed, which split it serves (`train` or `eval`) and its task
/// (what the harness is given), and the seed of the model's draws in it.
#[derive(Debug, Clone, Serialize)]
pub struct Task {
    pub seed: u64,
    pub split: &'static str,
    pub task: serde_json::Value,
    /// Not the harness's to see: runs of one task draw their answers apart.
    #[serde(skip)]
    pub draws: u64,
}

impl Task {
    /// Seed `seed`'s task from `records` (line seed mod lines; the seed alone without any),
    /// its answers drawn from `seed` (see [`Self::drawing`]).
    pub fn of(seed: u64, split: &'static str, records: &[serde_json::Value]) -> Task {
        let task = match records.len() {
            0 => serde_json::Value::Null,
            n => records[(seed % n as u64) as usize].clone(),
        };
        Task { seed, split, task, draws: seed }
    }

    /// The task with its answers drawn from `draws`.
    pub fn drawing(self, draws: u64) -> Task {
        Task { draws, ..self }
    }
}

/// Why a harness episode failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HarnessFailure {
    #[error("could not start {program:?}: {error}")]
    Spawn { program: String, error: String },
    #[error("exited with {0}")]
    Crashed(String),
    #[error("ran past its deadline (timeout_s {0})")]
    TimedOut(f64),
    #[error("wrote more than {0} KiB to stdout or stderr (max_output_kib)")]
    Flooded(usize),
    #[error("ended without reporting a reward (POST …/reward, or {{\"reward\": …}} as the last line of its stdout)")]
    NoReward,
    #[error("reported a reward that is not valid: {0}")]
    BadReward(String),
}

/// A harness episode as it ended.
#[derive(Debug)]
pub struct HarnessRun {
    pub task: Task,
    /// What its endpoint recorded, and its report when it gave one.
    pub record: EpisodeRecord,
    pub failure: Option<HarnessFailure>,
    /// The end of what it wrote to stderr (for a failure's message).
    pub stderr_tail: String,
    pub seconds: f64,
}

/// Bytes of stderr kept for a failure's message.
const TAIL_BYTES: usize = 2048;

/// Runs `tasks` (at most `concurrency` at once), each as a harness process whose episode is
/// open in `book`, reachable under `base_url` (`http://HOST:PORT`). With `need_reward`, an
/// episode that reports none fails; otherwise its reward is left to the caller (a reward
/// function scoring its transcript).
pub fn run_episodes(
    cfg: &HarnessConfig,
    tasks: Vec<Task>,
    book: &EpisodeBook,
    base_url: &str,
    need_reward: bool,
) -> Vec<HarnessRun> {
    let n = tasks.len();
    let next = AtomicUsize::new(0);
    let tasks: Vec<Mutex<Option<Task>>> = tasks.into_iter().map(|t| Mutex::new(Some(t))).collect();
    let runs: Vec<Mutex<Option<HarnessRun>>> = (0..n).map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..cfg.concurrency.min(n) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= n {
                        return;
                    }
                    let task = tasks[i].lock().expect("not poisoned").take().expect("each task taken once");
                    let run = run_one(cfg, task, book, base_url, need_reward);
                    *runs[i].lock().expect("not poisoned") = Some(run);
                }
            });
        }
    });
    runs.into_iter().map(|r| r.into_inner().expect("not poisoned").expect("every task ran")).collect()
}

/// How the process ended.
enum Ending {
    Exited(ExitStatus),
    TimedOut,
    Flooded,
}

fn run_one(cfg: &HarnessConfig, task: Task, book: &EpisodeBook, base_url: &str, need_reward: bool) -> HarnessRun {
    let started = Instant::now();
    let ticket = book.open(task.draws);
    let task_json = serde_json::to_string(&task).expect("a task serialises");
    let mut command = Command::new(&cfg.command[0]);
    command
        .args(&cfg.command[1..])
        .envs(&cfg.env)
        .env("OPENAI_BASE_URL", format!("{base_url}/v1/episodes/{}", ticket.id))
        .env("OPENAI_API_KEY", &ticket.key)
        .env("VAGEN_TASK", &task_json)
        .env("VAGEN_SEED", task.seed.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(dir) = &cfg.dir {
        command.current_dir(dir);
    }
    let finish = |failure, stderr_tail, record: Option<EpisodeRecord>| HarnessRun {
        record: record.unwrap_or_else(|| book.close(&ticket.id).expect("the episode is open until closed here")),
        task: task.clone(),
        failure,
        stderr_tail,
        seconds: started.elapsed().as_secs_f64(),
    };
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            let failure = HarnessFailure::Spawn { program: cfg.command[0].clone(), error: e.to_string() };
            return finish(Some(failure), String::new(), None);
        }
    };
    let group = child.id() as i32;
    // Written from a thread: a harness that never reads stdin must not hold us up.
    if let Some(mut stdin) = child.stdin.take() {
        let line = task_json.clone() + "\n";
        std::thread::spawn(move || {
            let _ = stdin.write_all(line.as_bytes());
        });
    }
    let cap = cfg.max_output_kib.saturating_mul(1024);
    let flooded = Arc::new(AtomicBool::new(false));
    let stdout = drain(child.stdout.take().expect("piped"), cap, flooded.clone());
    let stderr = drain(child.stderr.take().expect("piped"), cap, flooded.clone());
    let deadline = started + Duration::from_secs_f64(cfg.timeout_s);
    let ending = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break Ending::Exited(status);
        }
        if flooded.load(Ordering::SeqCst) {
            break Ending::Flooded;
        }
        if Instant::now() >= deadline {
            break Ending::TimedOut;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // The whole group: what the harness started goes with it (ESRCH when nothing is left).
    // SAFETY: killpg only sends a signal.
    unsafe {
        libc::killpg(group, libc::SIGKILL);
    }
    let _ = child.wait();
    let stdout = stdout.recv_timeout(Duration::from_secs(1)).unwrap_or_default();
    let stderr = stderr.recv_timeout(Duration::from_secs(1)).unwrap_or_default();
    let stderr_tail = String::from_utf8_lossy(&stderr[stderr.len().saturating_sub(TAIL_BYTES)..]).into_owned();
    let mut record = book.close(&ticket.id).expect("the episode is open until closed here");
    let failure = match ending {
        Ending::TimedOut => Some(HarnessFailure::TimedOut(cfg.timeout_s)),
        Ending::Flooded => Some(HarnessFailure::Flooded(cfg.max_output_kib)),
        Ending::Exited(status) if !status.success() => Some(HarnessFailure::Crashed(status.to_string())),
        Ending::Exited(_) => settle(&mut record, &stdout, need_reward).err(),
    };
    finish(failure, stderr_tail, Some(record))
}

/// The episode's report: the one it POSTed, or else its stdout's last line when that is a
/// JSON object.
fn settle(record: &mut EpisodeRecord, stdout: &[u8], need_reward: bool) -> Result<(), HarnessFailure> {
    if record.reported.is_none() {
        let text = String::from_utf8_lossy(stdout);
        let last = text.lines().rev().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
        if last.starts_with('{') {
            let reported: Reported =
                serde_json::from_str(last).map_err(|e| HarnessFailure::BadReward(format!("{last:.200}: {e}")))?;
            reported.check().map_err(HarnessFailure::BadReward)?;
            record.reported = Some(reported);
        }
    }
    if need_reward && record.reported.is_none() {
        return Err(HarnessFailure::NoReward);
    }
    Ok(())
}

/// Reads `from` to its end on a thread, keeping the last `cap` bytes; past `cap` bytes in
/// all it sets `flooded` (and reads on, discarding, so the writer never blocks).
fn drain(mut from: impl Read + Send + 'static, cap: usize, flooded: Arc<AtomicBool>) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut kept, mut seen, mut buf) = (Vec::new(), 0usize, [0u8; 8192]);
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen += n;
            if seen > cap {
                flooded.store(true, Ordering::SeqCst);
                continue;
            }
            kept.extend_from_slice(&buf[..n]);
        }
        let _ = tx.send(kept);
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::episodes::EpisodeSampling;

    fn book() -> EpisodeBook {
        let sampling = EpisodeSampling { temperature: 1.0, top_p: 1.0, top_k: 0, max_new_tokens: 8, context: 64 };
        EpisodeBook::new(sampling)
    }

    /// A harness that misbehaves by seed: each failure is its episode's alone, named, and
    /// the well-behaved ones beside it report as usual.
    #[test]
    fn crashes_hangs_floods_and_silence_are_failed_episodes_and_the_rest_go_on() {
        let dir = tempfile::tempdir().unwrap();
        let script = r#"
case $VAGEN_SEED in
  0) echo 'it broke' >&2; exit 3 ;;
  1) sleep 30 ;;
  2) yes ;;
  3) true ;;
  4) echo '{"reward": "high"}' ;;
  5) sleep 1000 & echo $! > escaped.pid; sleep 30 ;;
  *) read task; echo "some output"; echo "{\"reward\": 0.5, \"metrics\": {\"task_bytes\": ${#task}}}" ;;
esac
"#;
        let cfg = HarnessConfig {
            command: vec!["sh".into(), "-c".into(), script.into()],
            env: BTreeMap::new(),
            dir: Some(dir.path().to_path_buf()),
            timeout_s: 1.0,
            concurrency: 8,
            max_output_kib: 64,
            tasks: None,
        };
        let tasks = (0..8).map(|s| Task::of(s, "train", &[])).collect();
        let started = Instant::now();
        let runs = run_episodes(&cfg, tasks, &book(), "http://127.0.0.1:9", true);
        assert!(started.elapsed() < Duration::from_secs(10), "deadlines held: {:?}", started.elapsed());
        let failures: Vec<Option<HarnessFailure>> = runs.iter().map(|r| r.failure.clone()).collect();
        assert_eq!(failures[0], Some(HarnessFailure::Crashed("exit status: 3".into())));
        assert!(runs[0].stderr_tail.contains("it broke"), "{:?}", runs[0].stderr_tail);
        assert_eq!(failures[1], Some(HarnessFailure::TimedOut(1.0)));
        assert_eq!(failures[2], Some(HarnessFailure::Flooded(64)));
        assert_eq!(failures[3], Some(HarnessFailure::NoReward));
        assert!(matches!(failures[4], Some(HarnessFailure::BadReward(_))), "{:?}", failures[4]);
        assert_eq!(failures[5], Some(HarnessFailure::TimedOut(1.0)));
        for run in &runs[6..] {
            assert_eq!(run.failure, None);
            let reported = run.record.reported.as_ref().expect("reported on its last line");
            assert_eq!(reported.reward, 0.5);
            // The task line it read from stdin, as VAGEN_TASK holds it.
            let task = serde_json::to_string(&run.task).unwrap();
            assert_eq!(reported.metrics["task_bytes"], task.len() as f64);
        }
        // What the harness left running went with its process group.
        let pid: i32 = std::fs::read_to_string(dir.path().join("escaped.pid")).unwrap().trim().parse().unwrap();
        let gone = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(20));
            // SAFETY: signal 0 only asks whether the process exists.
            unsafe { libc::kill(pid, 0) != 0 }
        });
        assert!(gone, "process {pid}, started by the harness, outlived its episode");
    }

    #[test]
    fn a_program_that_is_not_there_fails_its_episode_by_name() {
        let cfg = HarnessConfig {
            command: vec!["/nonexistent/agent".into()],
            env: BTreeMap::new(),
            dir: None,
            timeout_s: 1.0,
            concurrency: 1,
            max_output_kib: 64,
            tasks: None,
        };
        let runs = run_episodes(&cfg, vec![Task::of(0, "train", &[])], &book(), "http://127.0.0.1:9", true);
        let failure = runs[0].failure.as_ref().unwrap().to_string();
        assert!(failure.contains("/nonexistent/agent"), "{failure}");
    }

    #[test]
    fn tasks_are_drawn_by_seed_and_refused_configs_say_why() {
        let records = vec![serde_json::json!({"q": 1}), serde_json::json!({"q": 2})];
        assert_eq!(Task::of(3, "eval", &records).task, records[1]);
        assert_eq!(Task::of(4, "eval", &records).task, records[0]);
        let mut cfg = HarnessConfig {
            command: vec![],
            env: BTreeMap::new(),
            dir: None,
            timeout_s: 1.0,
            concurrency: 1,
            max_output_kib: 1,
            tasks: None,
        };
        assert!(cfg.check().unwrap_err().contains("command"));
        cfg.command = vec!["python".into()];
        cfg.timeout_s = f64::NAN;
        assert!(cfg.check().unwrap_err().contains("timeout_s"));
    }
}
