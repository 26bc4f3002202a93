//! Recorded episodes: each harness run gets its own base URL
//! (`/v1/episodes/<id>/…`) and a key only that URL accepts. Its chat calls are sampled with
//! the run's settings and laid out by a [`Recording`] (the exact ids given and sampled, with
//! their log-probs and policy version); its reward arrives by `POST …/reward` or from the
//! harness's output. A finished episode is taken out of the book whole
//! ([`EpisodeBook::close`]), after which its URL answers nothing.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use vagen_model::{FinishReason, Generation};
use vagen_rollout::{ChatTokenizer, Recorded, Recording};

/// How every episode call is sampled, whatever the harness asks: the run's own settings,
/// so the recorded log-probs are the training policy's.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeSampling {
    pub temperature: f64,
    pub top_p: f64,
    pub top_k: usize,
    /// Tokens an answer may take at most (a request's `max_tokens` only lowers it).
    pub max_new_tokens: usize,
    /// Tokens an episode's sequence may reach (prompt and answers together).
    pub context: usize,
}

/// What a harness reports at the end of its episode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reported {
    pub reward: f64,
    /// Whether the task was solved; without it, a reward above 0 counts as success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success: Option<bool>,
    /// A reward per chat call, in order, added to the calls' turns (the episode's reward
    /// goes on the last).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub call_rewards: Vec<f64>,
    /// Figures logged as `harness/<name>` (means over the step's episodes).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, f64>,
}

impl Reported {
    /// Every figure finite, names short and plain.
    pub fn check(&self) -> Result<(), String> {
        if !self.reward.is_finite() {
            return Err(format!("reward {} is not a finite number", self.reward));
        }
        if let Some(r) = self.call_rewards.iter().find(|r| !r.is_finite()) {
            return Err(format!("call_rewards: {r} is not a finite number"));
        }
        for (name, value) in &self.metrics {
            if name.is_empty()
                || name.len() > 64
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
            {
                return Err(format!("metrics: {name:?} is not a name of 1 to 64 letters, digits, '_', '-' or '.'"));
            }
            if !value.is_finite() {
                return Err(format!("metrics.{name}: {value} is not a finite number"));
            }
        }
        Ok(())
    }

    /// Whether the episode counts as solved.
    pub fn solved(&self) -> bool {
        self.success.unwrap_or(self.reward > 0.0)
    }
}

/// One chat call as the episode's transcript keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The last message the harness sent (its user or tool message).
    pub asked: String,
    /// The answer's text as sampled (tool calls included, as the model wrote them).
    pub answer: String,
    pub finish: FinishReason,
}

/// A finished episode: its sequences, its calls and what the harness reported.
#[derive(Debug)]
pub struct EpisodeRecord {
    pub seed: u64,
    pub recorded: Recorded,
    pub calls: Vec<Call>,
    pub reported: Option<Reported>,
}

/// What a harness process is given to reach its episode.
#[derive(Debug, Clone)]
pub struct Ticket {
    pub id: String,
    /// The key its URL accepts (`Authorization: Bearer …`).
    pub key: String,
}

/// A call's prompt as the worker submits it.
pub(crate) struct CallPrompt {
    /// The engine trajectory of the episode: its cache is kept from one call to the next.
    pub key: u64,
    pub ids: Vec<u32>,
    /// Tokens left in the episode's context.
    pub room: usize,
}

struct Open {
    key: String,
    /// The episode's engine trajectory.
    trajectory: u64,
    seed: u64,
    recording: Recording,
    calls: Vec<Call>,
    /// The pending call's last message.
    asked: Option<String>,
    reported: Option<Reported>,
}

/// The open episodes of a run's endpoint.
pub struct EpisodeBook {
    open: Mutex<HashMap<String, Open>>,
    pub sampling: EpisodeSampling,
    next: AtomicU64,
    /// The policy version answers are recorded with.
    version: AtomicU64,
}

/// Why an episode's URL refused a request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Denied {
    /// No such open episode, or not its key: the same answer, so keys cannot probe ids.
    Key,
    /// A reward reported twice.
    Reported,
    Bad(String),
}

/// Engine trajectories of episodes are numbered from here, apart from plain requests'.
const EPISODE_TRAJECTORIES: u64 = 1 << 62;

impl EpisodeBook {
    pub fn new(sampling: EpisodeSampling) -> Self {
        EpisodeBook { open: Mutex::new(HashMap::new()), sampling, next: AtomicU64::new(0), version: AtomicU64::new(0) }
    }

    /// The policy version recorded with the answers sampled from now on.
    pub fn set_version(&self, version: u64) {
        self.version.store(version, Ordering::SeqCst);
    }

    fn book(&self) -> std::sync::MutexGuard<'_, HashMap<String, Open>> {
        // A panic elsewhere while holding the lock leaves plain data: still usable.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens an episode whose calls draw from `seed`: its id and key.
    pub fn open(&self, seed: u64) -> Ticket {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let id = format!("ep-{n}-{:016x}", crate::fresh_seed());
        let key = format!("vagen-{:016x}{:016x}", crate::fresh_seed(), crate::fresh_seed());
        let open = Open {
            key: key.clone(),
            trajectory: EPISODE_TRAJECTORIES + n,
            seed,
            recording: Recording::new(),
            calls: vec![],
            asked: None,
            reported: None,
        };
        self.book().insert(id.clone(), open);
        Ticket { id, key }
    }

    /// Takes the episode out (its URL answers nothing from now on): its sequences, calls and
    /// report. `None` for an id not open.
    pub fn close(&self, id: &str) -> Option<EpisodeRecord> {
        let open = self.book().remove(id)?;
        Some(EpisodeRecord {
            seed: open.seed,
            recorded: open.recording.finish(),
            calls: open.calls,
            reported: open.reported,
        })
    }

    /// Whether `bearer` is episode `id`'s key (compared in constant time).
    pub(crate) fn authorize(&self, id: &str, bearer: Option<&str>) -> Result<(), Denied> {
        let book = self.book();
        let (Some(open), Some(bearer)) = (book.get(id), bearer) else { return Err(Denied::Key) };
        let (a, b) = (open.key.as_bytes(), bearer.as_bytes());
        let same = a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0;
        if same { Ok(()) } else { Err(Denied::Key) }
    }

    /// Records the harness's report (once).
    pub(crate) fn report(&self, id: &str, reported: Reported) -> Result<(), Denied> {
        reported.check().map_err(Denied::Bad)?;
        let mut book = self.book();
        let open = book.get_mut(id).ok_or(Denied::Key)?;
        if open.reported.is_some() {
            return Err(Denied::Reported);
        }
        open.reported = Some(reported);
        Ok(())
    }

    /// The seed of the episode's next call: its own stream, so a run's draws do not depend
    /// on which episode's call the engine took first.
    pub(crate) fn call_seed(&self, id: &str) -> Option<u64> {
        let book = self.book();
        let open = book.get(id)?;
        let k = open.calls.len() as u64 + u64::from(open.asked.is_some()) + 1;
        Some(open.seed ^ k.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// The ids a call whose rendered prompt is `text` samples on (see [`Recording::prompt`]).
    pub(crate) fn prompt(
        &self,
        id: &str,
        tok: &dyn ChatTokenizer,
        text: &str,
        asked: String,
    ) -> Result<CallPrompt, String> {
        let mut book = self.book();
        let open = book.get_mut(id).ok_or_else(|| format!("episode {id} has ended"))?;
        let ids = open.recording.prompt(tok, text).map_err(|e| e.to_string())?;
        let room = self.sampling.context.saturating_sub(ids.len());
        if room == 0 {
            open.recording.abandon();
            return Err(format!(
                "the episode's conversation takes {} tokens: its context ({}) is full",
                ids.len(),
                self.sampling.context
            ));
        }
        open.asked = Some(asked);
        Ok(CallPrompt { key: open.trajectory, ids, room: room.min(self.sampling.max_new_tokens) })
    }

    /// Records the answer sampled for the episode's pending call.
    pub(crate) fn answer(&self, id: &str, tok: &dyn ChatTokenizer, g: &Generation) -> Result<(), String> {
        let version = self.version.load(Ordering::SeqCst);
        let mut book = self.book();
        let open = book.get_mut(id).ok_or_else(|| format!("episode {id} has ended"))?;
        open.recording.answer(tok, &g.token_ids, &g.logprobs, version).map_err(|e| e.to_string())?;
        let asked = open.asked.take().unwrap_or_default();
        open.calls.push(Call { asked, answer: g.text.clone(), finish: g.finish });
        Ok(())
    }

    /// Notes a call answered elsewhere ([`crate::forward_episodes`]): its transcript only.
    pub(crate) fn forwarded(&self, id: &str, asked: String, answer: String) {
        if let Some(open) = self.book().get_mut(id) {
            open.calls.push(Call { asked, answer, finish: FinishReason::Stop });
        }
    }

    /// Takes back the episode's pending call (it failed or its client left).
    pub(crate) fn abandon(&self, id: &str) {
        if let Some(open) = self.book().get_mut(id) {
            open.recording.abandon();
            open.asked = None;
        }
    }
}
