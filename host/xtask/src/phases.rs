//! The time each part of a long task took, printed as a table when it ends (passed or not),
//! so that a slow test run says where its minutes went.

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
}

impl Phases {
    pub fn new() -> Self {
        Phases { start: Instant::now(), rows: Mutex::new(Vec::new()) }
    }

    /// Runs `f` as the phase `name` (phases on other threads may overlap it).
    pub fn time<T>(&self, name: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let from = self.start.elapsed().as_secs_f64();
        let out = f();
        let to = self.start.elapsed().as_secs_f64();
        let row = Row { name: name.to_string(), from, to, ok: out.is_ok() };
        self.rows.lock().expect("no phase panics while holding the table").push(row);
        out
    }

    /// The table, in the order phases began: start and end (minutes from the task's start) and
    /// length, then the whole task's wall time.
    pub fn print(&self) {
        let mut rows = self.rows.lock().expect("no phase panics while holding the table");
        rows.sort_by(|a, b| a.from.total_cmp(&b.from));
        let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(5).max(5);
        eprintln!("\n{:width$}  {:>7}  {:>7}  {:>8}", "phase", "start", "end", "length");
        for r in rows.iter() {
            let failed = if r.ok { "" } else { "  (failed)" };
            eprintln!(
                "{:width$}  {:>7}  {:>7}  {:>8}{failed}",
                r.name,
                clock(r.from),
                clock(r.to),
                clock(r.to - r.from)
            );
        }
        eprintln!("{:width$}  {:>7}  {:>7}  {:>8}", "total", "", "", clock(self.start.elapsed().as_secs_f64()));
    }
}

/// `m:ss`.
fn clock(secs: f64) -> String {
    let s = secs.round() as u64;
    format!("{}:{:02}", s / 60, s % 60)
}
