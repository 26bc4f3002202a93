//! A finding as a file: the episode script that shows it, and a replay that shows it again.

use super::{FindingKind, Script, play};
use crate::{Error, Plugin};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Reproducer {
    pub plugin: PathBuf,
    pub sha256: String,
    pub config: String,
    pub kind: Option<FindingKind>,
    pub seed: u64,
    pub answers: Vec<String>,
    /// Times the episode is played on one instance (memory growth, state leaks).
    pub repeat: u32,
}

impl Reproducer {
    pub(crate) fn new(plugin: &dyn Plugin, config: &str, kind: FindingKind, s: &Script, repeat: u32) -> Self {
        Self {
            plugin: plugin.info().path.clone(),
            sha256: plugin.info().sha256.clone(),
            config: config.to_string(),
            kind: Some(kind),
            seed: s.seed,
            answers: s.answers.clone(),
            repeat: repeat.max(1),
        }
    }

    /// A failed episode seen outside fuzzing (a run or a training step): its seed and the
    /// answers that were played, to replay once.
    pub fn fault(plugin: &dyn Plugin, config: &str, seed: u64, answers: Vec<String>) -> Self {
        Self::new(plugin, config, FindingKind::Fault, &Script { seed, answers }, 1)
    }
}

/// What a replay showed.
#[derive(Debug)]
pub struct Replay {
    /// Each call's outcome, as text, for people.
    pub lines: Vec<String>,
    /// The failure seen again, if it was.
    pub reproduced: Option<String>,
}

/// Plays the reproducer's episode `repeat` times on one instance, then once on a fresh one,
/// and says whether the recorded kind of problem shows.
pub fn replay(plugin: &dyn Plugin, r: &Reproducer) -> Result<Replay, Error> {
    let script = Script { seed: r.seed, answers: r.answers.clone() };
    let mut env = plugin.create(&r.config)?;
    let mut lines = Vec::new();
    let mut reproduced = None;
    let start_mem = env.memory_bytes();
    let mut first = None;
    for round in 0..r.repeat.max(1) {
        let p = play(env.as_mut(), &script);
        if round == 0 {
            lines.extend(p.transcript.iter().enumerate().map(|(i, t)| format!("call {i}: {}", short(t))));
        }
        if let Some(e) = p.fault {
            reproduced = Some(format!("round {round}: {e}"));
            break;
        }
        if p.step_after_done_accepted && r.kind == Some(FindingKind::Protocol) {
            reproduced = Some("a step after `done` was accepted".into());
            break;
        }
        match &first {
            None => first = Some(p.transcript),
            Some(t) if *t != p.transcript && r.kind == Some(FindingKind::Nondeterminism) => {
                reproduced = Some(format!("round {round} differs from round 0 on the same instance"));
                break;
            }
            _ => {}
        }
    }
    if reproduced.is_none() && r.kind == Some(FindingKind::Nondeterminism) {
        let mut fresh = plugin.create(&r.config)?;
        if Some(play(fresh.as_mut(), &script).transcript) != first {
            reproduced = Some("a fresh instance differs from the first".into());
        }
    }
    if let (Some(a), Some(b)) = (start_mem, env.memory_bytes())
        && r.kind == Some(FindingKind::Leak)
        && b > a
    {
        reproduced = Some(format!("memory grew from {} to {} MiB over {} rounds", a >> 20, b >> 20, r.repeat));
    }
    Ok(Replay { lines, reproduced })
}

fn short(t: &str) -> String {
    if t.len() > 300 {
        let cut = (0..=300).rev().find(|&i| t.is_char_boundary(i)).unwrap_or(0);
        format!("{}… ({} bytes)", &t[..cut], t.len())
    } else {
        t.to_string()
    }
}
