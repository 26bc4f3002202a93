//! The ManiSkill worker: a Python process per instance, spoken to over its stdin and stdout
//! in length-prefixed frames (a little-endian `u32`, then that many bytes). A request is one
//! JSON frame; a reply is one JSON frame, followed by one raw RGB frame when it carries an
//! `image`. A process rather than an embedded interpreter: a simulator crash takes down one
//! instance, not the host, and instances do not share one GIL.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

/// The worker's source, carried inside the plugin so the `.so` is the one file to ship.
const SCRIPT: &str = include_str!("../worker/worker.py");

/// Bumped whenever a request or reply changes shape; the worker states its own at start-up.
pub const PROTOCOL: u32 = 1;
/// The versions the worker was written and tested against (`cargo xtask maniskill` pins them).
pub const MANI_SKILL: &str = "3.0.1";
pub const SAPIEN: &str = "3.0.3";

/// A frame larger than this is a broken worker, not an observation (1024² RGB is 3 MiB).
const MAX_FRAME: usize = 64 << 20;
/// How much of the worker's stderr an error quotes.
const STDERR_TAIL: usize = 4096;

/// Idle workers kept for the next instance; more are ended. Each holds about 1 GB (torch,
/// SAPIEN, the scene): eight cover a small CPU run's group without holding a third of a
/// 24 GB machine.
const MAX_IDLE: usize = 8;

/// Workers whose instance was dropped, by how they were started: a trainer creates its
/// instances afresh every step, and a worker takes seconds to start (importing torch and
/// ManiSkill, and with images the renderer's first frame) against milliseconds to reset.
static IDLE: Mutex<Vec<(Launch, Worker)>> = Mutex::new(Vec::new());

/// How to start a worker.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    pub python: PathBuf,
    /// A Vulkan driver manifest (the private lavapipe), or `None` for the machine's own.
    pub vulkan_icd: Option<PathBuf>,
    /// Whether the worker builds a renderer (images) or runs physics alone.
    pub render: bool,
    pub start_timeout: Duration,
}

/// What the worker says first.
#[derive(Deserialize)]
struct Hello {
    protocol: u32,
    mani_skill: String,
    sapien: String,
}

/// Why a call did not get its reply. Each becomes the episode's named failure.
#[derive(Debug)]
pub enum WorkerError {
    /// The process exited (or closed its pipe); what it last wrote to stderr.
    Died(String),
    /// No reply within the deadline; the process has been killed.
    Stalled(Duration),
    /// A reply that is not the protocol: a bug on one side.
    Protocol(String),
    /// The worker answered with an error of its own (a Python exception).
    Refused(String),
}

impl std::fmt::Display for WorkerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkerError::Died(tail) => write!(f, "the ManiSkill worker died: {tail}"),
            WorkerError::Stalled(t) => {
                write!(f, "the ManiSkill worker stalled: no reply within {:.1} s (killed)", t.as_secs_f64())
            }
            WorkerError::Protocol(m) => write!(f, "the ManiSkill worker broke the protocol: {m}"),
            WorkerError::Refused(m) => write!(f, "the ManiSkill worker failed: {m}"),
        }
    }
}

/// A reply: its JSON and the image frame that followed it, if any.
pub struct Reply {
    pub json: Value,
    pub rgb: Option<Vec<u8>>,
}

pub struct Worker {
    child: Child,
    stdin: ChildStdin,
    frames: Receiver<Result<Vec<u8>, String>>,
    stderr: Arc<Mutex<Vec<u8>>>,
}

impl Worker {
    /// An idle worker started like `launch` would, if one is alive; else a new one.
    pub fn take_or_spawn(launch: &Launch) -> Result<Self, String> {
        let mut idle = IDLE.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(i) = idle.iter().position(|(l, _)| l == launch) {
            let (_, mut worker) = idle.swap_remove(i);
            if worker.child.try_wait().is_ok_and(|status| status.is_none()) {
                return Ok(worker);
            }
        }
        drop(idle);
        Self::spawn(launch)
    }

    /// Keeps a healthy worker for the next instance (see `IDLE`).
    pub fn give_back(self, launch: &Launch) {
        let mut idle = IDLE.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push((launch.clone(), self));
        }
    }

    /// Starts a worker and waits for its greeting; refuses one whose protocol or pinned
    /// versions differ from this plugin's.
    pub fn spawn(launch: &Launch) -> Result<Self, String> {
        let mut cmd = Command::new(&launch.python);
        cmd.arg("-u").arg("-c").arg(SCRIPT).arg(if launch.render { "render" } else { "state" });
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        // Torch would start a thread per core in every worker; one instance is one core.
        cmd.env("OMP_NUM_THREADS", "1").env("PYTHONNOUSERSITE", "1");
        if let Some(icd) = &launch.vulkan_icd {
            cmd.env("VK_ICD_FILENAMES", icd);
            // A private driver keeps the libraries it needs (a newer libdrm) beside it.
            if let Some(lib) = icd.parent().map(|d| d.join("lib")).filter(|d| d.is_dir()) {
                let mut path = std::ffi::OsString::from(lib.as_os_str());
                if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
                    path.push(":");
                    path.push(old);
                }
                cmd.env("LD_LIBRARY_PATH", path);
            }
        }
        let mut child = cmd.spawn().map_err(|e| format!("starting {}: {e}", launch.python.display()))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut err = child.stderr.take().expect("piped stderr");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let tail = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = err.read(&mut buf) {
                let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                t.extend_from_slice(&buf[..n]);
                if t.len() > 2 * STDERR_TAIL {
                    let cut = t.len() - STDERR_TAIL;
                    t.drain(..cut);
                }
            }
        });
        let frames = reader(stdout);
        let mut worker = Worker { child, stdin, frames, stderr };
        let greeting = worker.receive(launch.start_timeout).map_err(|e| e.to_string())?;
        let hello: Hello = serde_json::from_value(greeting.json.get("hello").cloned().unwrap_or(Value::Null))
            .map_err(|e| format!("the ManiSkill worker's greeting is not one: {e}"))?;
        if hello.protocol != PROTOCOL {
            return Err(format!("the ManiSkill worker speaks protocol {}, this plugin {PROTOCOL}", hello.protocol));
        }
        if hello.mani_skill != MANI_SKILL || hello.sapien != SAPIEN {
            return Err(format!(
                "{} has mani-skill {} and sapien {}; this plugin needs mani-skill {MANI_SKILL} and sapien {SAPIEN} \
                 (`cargo xtask maniskill` installs them)",
                launch.python.display(),
                hello.mani_skill,
                hello.sapien
            ));
        }
        Ok(worker)
    }

    /// The process id, for tests that kill a worker mid-episode.
    #[cfg(test)]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a request and waits up to `timeout` for its reply. After any error but
    /// `Refused` the worker is unusable: drop it.
    pub fn call(&mut self, request: &Value, timeout: Duration) -> Result<Reply, WorkerError> {
        let bytes = serde_json::to_vec(request).expect("a JSON value serialises");
        let sent = self
            .stdin
            .write_all(&(bytes.len() as u32).to_le_bytes())
            .and_then(|()| self.stdin.write_all(&bytes))
            .and_then(|()| self.stdin.flush());
        if sent.is_err() {
            return Err(self.died());
        }
        let reply = self.receive(timeout)?;
        if let Some(error) = reply.json.get("error") {
            return Err(WorkerError::Refused(error.as_str().unwrap_or_default().to_string()));
        }
        Ok(reply)
    }

    fn receive(&mut self, timeout: Duration) -> Result<Reply, WorkerError> {
        let frame = self.frame(timeout)?;
        let json: Value =
            serde_json::from_slice(&frame).map_err(|e| WorkerError::Protocol(format!("a reply is not JSON: {e}")))?;
        let rgb = match json.get("image") {
            Some(Value::Object(_)) => Some(self.frame(timeout)?),
            _ => None,
        };
        Ok(Reply { json, rgb })
    }

    fn frame(&mut self, timeout: Duration) -> Result<Vec<u8>, WorkerError> {
        match self.frames.recv_timeout(timeout) {
            Ok(Ok(frame)) => Ok(frame),
            Ok(Err(m)) => Err(WorkerError::Protocol(m)),
            Err(RecvTimeoutError::Timeout) => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                Err(WorkerError::Stalled(timeout))
            }
            Err(RecvTimeoutError::Disconnected) => Err(self.died()),
        }
    }

    fn died(&mut self) -> WorkerError {
        // The pipe closed: the process is gone or going; its status says how.
        let status = self.child.wait().map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
        let tail = self.stderr.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let tail = String::from_utf8_lossy(&tail);
        let tail = tail.trim();
        let start = tail.len().saturating_sub(STDERR_TAIL);
        let start = (start..=tail.len()).find(|&i| tail.is_char_boundary(i)).unwrap_or(tail.len());
        let tail = &tail[start..];
        if tail.is_empty() {
            WorkerError::Died(status)
        } else {
            WorkerError::Died(format!("{status}; stderr ends: {tail}"))
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A thread that reads frames off the worker's stdout into a channel, so a call can wait
/// with a deadline; it ends when the pipe closes.
fn reader(mut stdout: ChildStdout) -> Receiver<Result<Vec<u8>, String>> {
    let (tx, rx) = sync_channel(2);
    std::thread::spawn(move || {
        loop {
            let mut len = [0u8; 4];
            if stdout.read_exact(&mut len).is_err() {
                return;
            }
            let len = u32::from_le_bytes(len) as usize;
            if len > MAX_FRAME {
                let _ = tx.send(Err(format!("a frame of {len} bytes (at most {MAX_FRAME})")));
                return;
            }
            let mut frame = vec![0u8; len];
            if stdout.read_exact(&mut frame).is_err() || tx.send(Ok(frame)).is_err() {
                return;
            }
        }
    });
    rx
}
