//! The time each part of a long task took, printed as a table when it ends (passed or not),
//! so that a slow test run says where its minutes went: wall time, and for the test jobs the
//! CPU time of the job's processes (a job at 1.0 cores leaves the other core idle).

use std::sync::Mutex;
use std::time::Instant;

use crate::Result;

pub struct Phases {
    start: Instant,
    rows: Mutex<Vec<Row>>,
}

struct Row {
    name: String,
    /// Seconds from the task's start to this phase's start and end.
    from: f64,
    to: f64,
    ok: bool,
    /// CPU seconds (user + system) of the phase's processes, where they are its own.
    cpu: Option<f64>,
}

impl Phases {
    pub fn new() -> Self {
        Phases { start: Instant::now(), rows: Mutex::new(Vec::new()) }
    }

    /// Runs `f` as the phase `name` (phases on other threads may overlap it).
    pub fn time<T>(&self, name: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        self.time_cpu(name, || (f(), None))
    }

    /// As `time`, for a phase that runs alone (no other phase's processes end meanwhile): its
    /// CPU time is what this process's waited-for children took while it ran.
    pub fn time_alone<T>(&self, name: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        self.time_cpu(name, || {
            let before = children_cpu();
            let out = f();
            (out, Some(children_cpu() - before))
        })
    }

    /// As `time`, for a phase that says how much CPU time its processes took.
    pub fn time_cpu<T>(&self, name: &str, f: impl FnOnce() -> (Result<T>, Option<f64>)) -> Result<T> {
        let from = self.start.elapsed().as_secs_f64();
        let (out, cpu) = f();
        let to = self.start.elapsed().as_secs_f64();
        let row = Row { name: name.to_string(), from, to, ok: out.is_ok(), cpu };
        self.rows.lock().expect("no phase panics while holding the table").push(row);
        out
    }

    /// The table, in the order phases began: start and end (minutes from the task's start),
    /// length, CPU time and cores busy on average where known; then the whole task's wall
    /// time and the CPU time of every process it started.
    pub fn print(&self) {
        let mut rows = self.rows.lock().expect("no phase panics while holding the table");
        rows.sort_by(|a, b| a.from.total_cmp(&b.from));
        let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(5).max(5);
        eprintln!("\n{:width$}  {:>7}  {:>7}  {:>8}  {:>8}  {:>5}", "phase", "start", "end", "length", "cpu", "cores");
        let cores = |cpu: f64, wall: f64| format!("{:.1}", cpu / wall.max(1e-9));
        for r in rows.iter() {
            let failed = if r.ok { "" } else { "  (failed)" };
            let (cpu, busy) = r.cpu.map_or((String::new(), String::new()), |c| (clock(c), cores(c, r.to - r.from)));
            eprintln!(
                "{:width$}  {:>7}  {:>7}  {:>8}  {cpu:>8}  {busy:>5}{failed}",
                r.name,
                clock(r.from),
                clock(r.to),
                clock(r.to - r.from)
            );
        }
        let (wall, cpu) = (self.start.elapsed().as_secs_f64(), children_cpu());
        eprintln!(
            "{:width$}  {:>7}  {:>7}  {:>8}  {:>8}  {:>5}",
            "total",
            "",
            "",
            clock(wall),
            clock(cpu),
            cores(cpu, wall)
        );
    }
}

/// `m:ss`.
fn clock(secs: f64) -> String {
    let s = secs.round() as u64;
    format!("{}:{:02}", s / 60, s % 60)
}

/// CPU seconds (user + system) of every child process this one has waited for, and theirs.
fn children_cpu() -> f64 {
    // SAFETY: getrusage writes the struct it is given and nothing else.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    cpu_seconds(&usage)
}

/// User + system time in a `rusage`.
pub fn cpu_seconds(usage: &libc::rusage) -> f64 {
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}
