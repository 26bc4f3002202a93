//! A finding as a file: the episode script that shows it, and a replay that says whether it
//! shows again, and if not, why not.

use super::{FindingKind, Script, call_name, play};
use crate::{Error, Plugin};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Reproducer {
    pub plugin: PathBuf,
    pub sha256: String,
    /// The plugin's build-inputs digest, when its build records one (the Python SDK's: its
    /// toolchain cannot make two builds byte-identical, so the file's sha256 changes with
    /// every rebuild while this does not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_inputs: Option<String>,
    pub config: String,
    pub kind: Option<FindingKind>,
    pub seed: u64,
    pub answers: Vec<String>,
    /// Times the episode is played on one instance (memory growth, state leaks).
    pub repeat: u32,
    /// The error the episode ended with when it was recorded, as the host printed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The call that failed: 0 is `reset`, k the k-th `step`; absent when the error came
    /// from outside the env's calls (a policy, the host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_call: Option<usize>,
    /// For a slow-call finding: the budget the call exceeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_ms: Option<u64>,
    /// For a leak finding: the growth (bytes) the fuzzer counts as a leak; a replay says
    /// "reproduced" only past it (32 MiB, the fuzzer's default, when not recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leak_bytes: Option<u64>,
}

impl Reproducer {
    pub(crate) fn new(plugin: &dyn Plugin, config: &str, kind: FindingKind, s: &Script, repeat: u32) -> Self {
        Self {
            plugin: plugin.info().path.clone(),
            sha256: plugin.info().sha256.clone(),
            build_inputs: plugin.info().build_inputs.clone(),
            config: config.to_string(),
            kind: Some(kind),
            seed: s.seed,
            answers: s.answers.clone(),
            repeat: repeat.max(1),
            ..Self::default()
        }
    }

    /// Whether `plugin` is not the build this was recorded on: by build-inputs digest when
    /// both have one, else by the file's sha256 (unknown when none was recorded).
    pub fn recorded_on_another_build(&self, plugin: &dyn Plugin) -> bool {
        let info = plugin.info();
        match (&self.build_inputs, &info.build_inputs) {
            (Some(recorded), Some(now)) => recorded != now,
            _ => !self.sha256.is_empty() && self.sha256 != info.sha256,
        }
    }

    pub(crate) fn with_error(mut self, call: usize, error: &str) -> Self {
        (self.failed_call, self.error) = (Some(call), Some(error.to_string()));
        self
    }

    /// A failed episode seen outside fuzzing (a run or a training step): its seed, the
    /// answers that were played (the failing one last), the error, and which call failed
    /// (`None`: not an env call, e.g. the policy's).
    pub fn failure(
        plugin: &dyn Plugin,
        config: &str,
        seed: u64,
        answers: Vec<String>,
        error: &str,
        failed_call: Option<usize>,
    ) -> Self {
        let kind = FindingKind::Fault;
        let mut r = Self::new(plugin, config, kind, &Script { seed, answers }, 1);
        (r.error, r.failed_call) = (Some(error.to_string()), failed_call);
        r
    }
}

/// Whether the recorded outcome showed again.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// It did: what showed.
    Reproduced(String),
    /// It did not: exactly why not.
    NotReproduced(String),
}

/// What a replay showed.
#[derive(Debug)]
pub struct Replay {
    /// Each call's outcome, as text, for people.
    pub lines: Vec<String>,
    pub verdict: Verdict,
}

/// The most rounds a replay plays (a fuzz finding records at most a few).
pub const MAX_REPEAT: u32 = 1000;

/// Plays the reproducer back. A recorded error must recur at the same call with the same
/// message; other findings (nondeterminism, leaks, slow calls, protocol breaches) are
/// judged by playing the episode `repeat` times on one instance, then once on a fresh one.
pub fn replay(plugin: &dyn Plugin, r: &Reproducer) -> Result<Replay, Error> {
    // A reproducer may come from anyone: its loops are bounded before they run.
    let most_answers = plugin.max_turns(None) as usize + 2;
    if r.answers.len() > most_answers {
        return Err(Error::BadReproducer(format!(
            "{} answers, more than an episode of this plugin can take ({most_answers}, from Limits::max_turns)",
            r.answers.len()
        )));
    }
    if r.repeat > MAX_REPEAT {
        return Err(Error::BadReproducer(format!("repeat {} is more than {MAX_REPEAT}", r.repeat)));
    }
    let script = Script { seed: r.seed, answers: r.answers.clone() };
    let mut env = plugin.create(&r.config)?;
    let start_mem = env.memory_bytes();
    let first = play(env.as_mut(), &script, None);
    let lines = first.transcript.iter().enumerate().map(|(i, t)| format!("{}: {}", call_name(i), short(t))).collect();
    let verdict = match &r.error {
        Some(recorded) => judge_error(recorded, r.failed_call, &first, script.answers.len()),
        None => judge_kind(plugin, r, &script, env.as_mut(), first, start_mem)?,
    };
    Ok(Replay { lines, verdict })
}

fn judge_error(recorded: &str, call: Option<usize>, p: &super::Played, answers: usize) -> Verdict {
    let at = |c: Option<usize>| c.map_or_else(|| "outside the env's calls".to_string(), call_name);
    match &p.error {
        Some((c, e)) if Some(*c) == call && recorded.contains(&e.to_string()) => {
            Verdict::Reproduced(format!("{}: {e}", call_name(*c)))
        }
        Some((c, e)) => Verdict::NotReproduced(format!(
            "the episode failed differently: recorded at {}: {recorded}; now at {}: {e}",
            at(call),
            call_name(*c)
        )),
        None if call.is_none() => Verdict::NotReproduced(format!(
            "the recorded error came from outside the env's calls (the policy or the host), which a replay of the answers does not run; reset and all {answers} steps succeeded. Recorded: {recorded}"
        )),
        None => {
            let end = if p.reached_done { "the episode ended (done) without error within" } else { "reset and" };
            Verdict::NotReproduced(format!(
                "{end} all {answers} recorded answers played without error; recorded at {}: {recorded}",
                at(call)
            ))
        }
    }
}

fn judge_kind(
    plugin: &dyn Plugin,
    r: &Reproducer,
    script: &Script,
    env: &mut dyn crate::Environment,
    first: super::Played,
    start_mem: Option<u64>,
) -> Result<Verdict, Error> {
    if let Some((c, e)) = &first.error {
        return Ok(Verdict::Reproduced(format!("{}: {e}", call_name(*c))));
    }
    let kind = r.kind;
    let verdict =
        |shown: Option<String>, why_not: String| Ok(shown.map_or(Verdict::NotReproduced(why_not), Verdict::Reproduced));
    match kind {
        Some(FindingKind::Protocol) => verdict(
            first.step_after_done_accepted.then(|| "a step after `done` was accepted".to_string()),
            if first.reached_done {
                "the step after `done` was refused".into()
            } else {
                "the episode did not reach `done`, so no step after it was tried".into()
            },
        ),
        Some(FindingKind::SlowCall) => {
            let budget = Duration::from_millis(r.budget_ms.unwrap_or(0));
            let (took, call) = first.slowest;
            verdict(
                (took > budget).then(|| format!("{call} took {took:?} (budget {budget:?})")),
                format!("the slowest call ({call}) took {took:?}, within the budget of {budget:?}"),
            )
        }
        Some(FindingKind::Nondeterminism) => {
            for round in 1..r.repeat.max(2) {
                let p = play(env, script, None);
                if p.transcript != first.transcript {
                    return verdict(
                        Some(format!("round {round} differs from round 0 on the same instance")),
                        String::new(),
                    );
                }
            }
            let mut fresh = plugin.create(&r.config)?;
            let differs = play(fresh.as_mut(), script, None).transcript != first.transcript;
            verdict(
                differs.then(|| "a fresh instance differs from the first".to_string()),
                format!("{} rounds on one instance and one on a fresh instance all played alike", r.repeat.max(2)),
            )
        }
        Some(FindingKind::Leak) => {
            for _ in 1..r.repeat.max(1) {
                play(env, script, None);
            }
            let threshold = r.leak_bytes.unwrap_or(super::FuzzOptions::default().leak_bytes);
            let over = format!("the fuzzer's threshold of {} MiB", threshold >> 20);
            match (start_mem, env.memory_bytes()) {
                (Some(a), Some(b)) if b > a + threshold => verdict(
                    Some(format!(
                        "memory grew from {} to {} MiB over {} rounds, past {over}",
                        a >> 20,
                        b >> 20,
                        r.repeat
                    )),
                    String::new(),
                ),
                (Some(a), Some(b)) => verdict(
                    None,
                    format!("memory went from {} to {} MiB over {} rounds, within {over}", a >> 20, b >> 20, r.repeat),
                ),
                _ => verdict(None, "this plugin's memory cannot be measured (a native plugin)".into()),
            }
        }
        Some(FindingKind::Fault | FindingKind::Error) | None => verdict(
            None,
            format!("reset and all {} answers played without error, and no error was recorded", script.answers.len()),
        ),
    }
}

fn short(t: &str) -> String {
    if t.len() > 300 {
        let cut = (0..=300).rev().find(|&i| t.is_char_boundary(i)).unwrap_or(0);
        format!("{}… ({} bytes)", &t[..cut], t.len())
    } else {
        t.to_string()
    }
}
