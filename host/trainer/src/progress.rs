//! Progress of SFT and RL steps: indicatif's bar on a terminal; elsewhere (a log file, a
//! pipe, a batch job) a line every twentieth of the run, so a run is never silent for
//! minutes. Only rank 0 shows either.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::Instant;

pub struct Progress {
    bar: ProgressBar,
    what: &'static str,
    len: u64,
    /// Lines instead of a bar (stderr is not a terminal).
    lines: bool,
    every: u64,
    message: String,
    started: Instant,
    from: u64,
}

impl Progress {
    /// `len` steps of `what`, `at` of them done (a resumed run).
    pub fn new(len: u64, what: &'static str, visible: bool, at: u64) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let bar = if visible && terminal { ProgressBar::new(len) } else { ProgressBar::hidden() };
        let style = format!("{{bar:30}} {{pos}}/{{len}} {what} [{{elapsed}}<{{eta}}] {{msg}}");
        bar.set_style(ProgressStyle::with_template(&style).expect("valid template"));
        bar.set_position(at);
        let every = (len / 20).max(1);
        Progress {
            bar,
            what,
            len,
            lines: visible && !terminal,
            every,
            message: String::new(),
            started: Instant::now(),
            from: at,
        }
    }

    /// What the bar (or the next line) shows after the count, e.g. the last success.
    pub fn set_message(&mut self, message: String) {
        self.bar.set_message(message.clone());
        self.message = message;
    }

    /// One step done.
    pub fn inc(&mut self) {
        self.bar.inc(1);
        let at = self.bar.position();
        if self.lines && (at.is_multiple_of(self.every) || at == self.len) {
            let done = (at - self.from) as f64;
            let secs = self.started.elapsed().as_secs_f64();
            let eta = if done > 0.0 { secs / done * (self.len - at) as f64 } else { 0.0 };
            eprintln!(
                "{} {at}/{} ({:.2} s/step, {eta:.0} s left) {}",
                self.what,
                self.len,
                secs / done.max(1.0),
                self.message
            );
        }
    }

    /// A line above the bar (or among the progress lines), e.g. a warning.
    pub fn println(&self, line: &str) {
        if self.bar.is_hidden() {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }

    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}
