//! Shaking a plugin hard before a run: many episodes of adversarial answers, each checked for
//! faults, nondeterminism, memory growth, slow calls and protocol breaches; every finding
//! shrunk to a small reproducer that [`replay`] plays back. Behind `vagen-host fuzz`.

mod answers;
mod reproducer;

pub use reproducer::{Replay, Reproducer, Verdict, replay};

use crate::{Environment, Error, Observation, Plugin, StepResult};
use answers::AnswerGen;
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct FuzzOptions {
    pub config: String,
    /// Seeds the fuzzer's own choices (episode seeds, answers).
    pub seed: u64,
    /// Stop after this long...
    pub duration: Option<Duration>,
    /// ...or after this many episodes, whichever comes first.
    pub iterations: Option<u64>,
    /// A call slower than this is a finding.
    pub max_call: Duration,
    /// Memory growth across episodes beyond this many bytes is a leak.
    pub leak_bytes: u64,
    /// Replay every n-th episode on a fresh instance to check determinism.
    pub replay_every: u64,
    /// End the campaign at the first finding (tests, quick checks).
    pub stop_on_finding: bool,
}

impl Default for FuzzOptions {
    fn default() -> Self {
        Self {
            config: String::new(),
            seed: 0,
            duration: Some(Duration::from_secs(60)),
            iterations: None,
            max_call: Duration::from_millis(250),
            leak_bytes: 32 << 20,
            replay_every: 4,
            stop_on_finding: false,
        }
    }
}

/// What kind of problem was found; one reproducer is kept per kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// A trap, timeout, out-of-memory, out-of-fuel or malformed result.
    Fault,
    /// `reset` or a `step` before `done` returned an error (`failed`, `invalid-state`,
    /// `bad-config`): the env could not carry out a call it had to.
    Error,
    Nondeterminism,
    Leak,
    SlowCall,
    /// `step` after `done` was accepted.
    Protocol,
}
#[derive(Clone, Debug)]
pub struct Finding {
    pub kind: FindingKind,
    pub message: String,
    pub reproducer: Reproducer,
    /// How many episodes showed this kind.
    pub count: u64,
}

#[derive(Clone, Debug, Default)]
pub struct FuzzReport {
    pub episodes: u64,
    pub steps: u64,
    pub elapsed: Duration,
    /// Steps by the kind of answer outcome: ok, invalid-state, bad-config, fault...
    pub outcomes: BTreeMap<&'static str, u64>,
    pub findings: Vec<Finding>,
}

impl FuzzReport {
    pub fn episodes_per_sec(&self) -> f64 {
        self.episodes as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// One episode's script: everything needed to play it again.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Script {
    pub seed: u64,
    pub answers: Vec<String>,
}

/// What one episode showed, call by call, for comparisons.
pub(crate) struct Played {
    pub transcript: Vec<String>,
    /// The first error of `reset` or of a `step` before `done`, and its call: 0 is `reset`,
    /// k the k-th `step`. A fault of the step after `done` counts too (a trap where a
    /// refusal was due).
    pub error: Option<(usize, Error)>,
    pub slowest: (Duration, &'static str),
    pub step_after_done_accepted: bool,
    pub reached_done: bool,
    /// The deadline passed before the script ended: nothing can be judged from it.
    pub cut: bool,
}

/// The name of call `k` of an episode.
pub(crate) fn call_name(k: usize) -> String {
    if k == 0 { "reset".into() } else { format!("step {k}") }
}

/// Plays a script: reset, the answers (stopping at done or at the first error), then one
/// step after done, which must be refused. Stops between calls once `deadline` has passed.
pub(crate) fn play(env: &mut dyn Environment, s: &Script, deadline: Option<Instant>) -> Played {
    let mut p = Played {
        transcript: Vec::new(),
        error: None,
        slowest: (Duration::ZERO, "reset"),
        step_after_done_accepted: false,
        reached_done: false,
        cut: false,
    };
    let t = Instant::now();
    let reset = env.reset(s.seed);
    p.slowest = (t.elapsed(), "reset");
    match reset {
        Ok(obs) => p.transcript.push(fingerprint(&obs, None)),
        Err(e) => {
            p.transcript.push(format!("reset error {}", e.kind()));
            p.error = Some((0, e));
            return p;
        }
    }
    for (i, a) in s.answers.iter().enumerate() {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            p.cut = true;
            return p;
        }
        let t = Instant::now();
        let r = env.step(a);
        if t.elapsed() > p.slowest.0 {
            p.slowest = (t.elapsed(), "step");
        }
        match r {
            Ok(step) => {
                let done = step.done;
                p.transcript.push(fingerprint(&step.observation, Some(&step)));
                if done {
                    p.reached_done = true;
                    let after = env.step(s.answers.get(i + 1).map_or("", String::as_str));
                    p.step_after_done_accepted = after.is_ok();
                    if let Err(e) = after
                        && e.is_fault()
                    {
                        p.error = Some((i + 2, e));
                    }
                    return p;
                }
            }
            Err(e) => {
                p.transcript.push(format!("step error {}", e.kind()));
                p.error = Some((i + 1, e));
                return p;
            }
        }
    }
    p
}

/// One transcript entry: the text and outcome as written, each image as its size and a
/// SHA-256 of its pixels. (Debug-printing a 256×256 frame is a megabyte of digits per step,
/// which made image envs fuzz ten times slower than they step.)
fn fingerprint(obs: &Observation, step: Option<&StepResult>) -> String {
    use sha2::{Digest, Sha256};
    let images: Vec<String> = obs
        .images
        .iter()
        .map(|i| format!("{}x{} {}", i.width, i.height, hex::encode(Sha256::digest(&i.rgb))))
        .collect();
    let outcome = step.map(|s| {
        format!(
            " reward {:?} done {} success {} valid {} effective {} metrics {:?}",
            s.reward, s.done, s.success, s.valid_actions, s.effective_actions, s.metrics
        )
    });
    format!("{:?} images {images:?}{}", obs.text, outcome.unwrap_or_default())
}

/// The oracle's first answers from a few seeds (none when the plugin has no oracle or it
/// fails: the campaign finds that failure itself). The instance is reset by the campaign.
fn corpus(env: &mut dyn Environment) -> Vec<String> {
    if !env.manifest().has_oracle {
        return Vec::new();
    }
    (0..8).filter_map(|seed| env.reset(seed).ok().and_then(|_| env.oracle().ok().flatten())).collect()
}

pub fn fuzz(plugin: &dyn Plugin, opts: &FuzzOptions) -> Result<FuzzReport, Error> {
    // A few past the plugin's own limit: steps after it should be refused, not crash.
    let max_turns = plugin.max_turns(None) as usize + 2;
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed);
    let started = Instant::now();
    // Every call checks it, shrinking and replays included, so `--seconds` is kept to within
    // one call (a call is bounded by the sandbox's deadline).
    let deadline = opts.duration.map(|d| started + d);
    let mut env = plugin.create(&opts.config)?;
    // The instance's: the config under test may change the separator or the per-turn limit.
    let corpus = corpus(env.as_mut());
    let a = env.action_space();
    let answers = AnswerGen::new(&a.action_names, &a.action_separator, a.max_actions_per_turn, corpus);
    let mut report = FuzzReport::default();
    let mut found: BTreeMap<FindingKind, Finding> = BTreeMap::new();
    let mut baseline = None::<(u64, u64)>;
    loop {
        let enough = opts.stop_on_finding && !found.is_empty();
        if enough
            || opts.iterations.is_some_and(|n| report.episodes >= n)
            || deadline.is_some_and(|d| Instant::now() >= d)
        {
            break;
        }
        let seed = match report.episodes {
            0 => 0,
            1 => u64::MAX,
            _ => rng.next_u64(),
        };
        // Some episodes stop early: the next reset comes mid-episode.
        let turns = if rng.next_u64() % 5 == 0 { (rng.next_u64() % max_turns as u64) as usize } else { max_turns };
        let script = Script { seed, answers: (0..turns).map(|_| answers.next(&mut rng)).collect() };
        let played = play(env.as_mut(), &script, deadline);
        if played.cut {
            break;
        }
        report.episodes += 1;
        report.steps += played.transcript.len().saturating_sub(1) as u64;
        if let Some((call, e)) = &played.error {
            *report.outcomes.entry(e.kind()).or_default() += 1;
            note_failure(&mut found, plugin, opts, &script, (*call, e), deadline);
            continue; // a faulted instance was re-created; memory and determinism start over
        }
        *report.outcomes.entry("ok").or_default() += 1;
        if played.step_after_done_accepted {
            note(
                &mut found,
                FindingKind::Protocol,
                format!("seed {seed}: a step after `done` was accepted"),
                Reproducer::new(plugin, &opts.config, FindingKind::Protocol, &script, 1),
            );
        }
        if played.slowest.0 > opts.max_call {
            let msg =
                format!("seed {seed}: {} took {:?} (budget {:?})", played.slowest.1, played.slowest.0, opts.max_call);
            let mut r = Reproducer::new(plugin, &opts.config, FindingKind::SlowCall, &script, 1);
            r.budget_ms = Some(opts.max_call.as_millis() as u64);
            note(&mut found, FindingKind::SlowCall, msg, r);
        }
        if report.episodes % opts.replay_every.max(1) == 0 {
            let mut fresh = plugin.create(&opts.config)?;
            let again = play(fresh.as_mut(), &script, deadline);
            if again.cut {
                break;
            }
            if let Some(at) = first_difference(&played.transcript, &again.transcript) {
                let msg = format!("seed {seed}: a fresh instance replaying the episode differs at {}", call_name(at));
                let r = Reproducer::new(plugin, &opts.config, FindingKind::Nondeterminism, &script, 2);
                note(&mut found, FindingKind::Nondeterminism, msg, r);
            }
        }
        if let Some(now) = env.memory_bytes() {
            watch_memory(&mut found, &mut baseline, now, report.episodes, plugin, opts, &script);
        }
    }
    report.elapsed = started.elapsed();
    report.findings = found.into_values().collect();
    Ok(report)
}

/// The first failure of each kind (fault, error) shrunk to a small reproducer; later ones
/// only counted.
fn note_failure(
    found: &mut BTreeMap<FindingKind, Finding>,
    plugin: &dyn Plugin,
    opts: &FuzzOptions,
    script: &Script,
    (call, e): (usize, &Error),
    deadline: Option<Instant>,
) {
    let kind = if e.is_fault() { FindingKind::Fault } else { FindingKind::Error };
    if found.contains_key(&kind) {
        return note(found, kind, String::new(), Reproducer::default());
    }
    let (small, call, error) = shrink(plugin, &opts.config, script, (call, e), deadline);
    let message =
        format!("{}: {error} (seed {}, {} answers after shrinking)", call_name(call), small.seed, small.answers.len());
    let r = Reproducer::new(plugin, &opts.config, kind, &small, 1).with_error(call, &error);
    note(found, kind, message, r);
}

/// The first call at which two plays of one script differ, if any.
fn first_difference<T: PartialEq>(a: &[T], b: &[T]) -> Option<usize> {
    (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i))
}

/// A leak finding when the instance's memory has grown past `leak_bytes` since the
/// baseline, taken after the first 8 episodes (they let allocators settle).
fn watch_memory(
    found: &mut BTreeMap<FindingKind, Finding>,
    baseline: &mut Option<(u64, u64)>,
    now: u64,
    episodes: u64,
    plugin: &dyn Plugin,
    opts: &FuzzOptions,
    script: &Script,
) {
    match *baseline {
        None if episodes >= 8 => *baseline = Some((now, episodes)),
        Some((base, since)) if now > base + opts.leak_bytes => {
            let n = episodes - since;
            let msg = format!("memory grew from {} to {} MiB over {n} episodes", base >> 20, now >> 20);
            let mut r = Reproducer::new(plugin, &opts.config, FindingKind::Leak, script, n as u32 + 8);
            r.leak_bytes = Some(opts.leak_bytes);
            note(found, FindingKind::Leak, msg, r);
            *baseline = Some((now, episodes));
        }
        _ => {}
    }
}

/// Counts a finding; the first of each kind keeps its message and reproducer.
fn note(found: &mut BTreeMap<FindingKind, Finding>, kind: FindingKind, message: String, reproducer: Reproducer) {
    found.entry(kind).and_modify(|f| f.count += 1).or_insert(Finding { kind, message, reproducer, count: 1 });
}

/// Drops answers (later ones first, then earlier) while the same kind of error still
/// happens on a fresh instance; returns the smallest script with its failing call and error.
/// Past the deadline it keeps what it has.
fn shrink(
    plugin: &dyn Plugin,
    config: &str,
    s: &Script,
    (call, error): (usize, &Error),
    deadline: Option<Instant>,
) -> (Script, usize, String) {
    let kind = error.kind();
    let fails = |cand: &Script| -> Option<(usize, String)> {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return None;
        }
        let mut env = plugin.create(config).ok()?;
        play(env.as_mut(), cand, deadline).error.filter(|(_, e)| e.kind() == kind).map(|(c, e)| (c, e.to_string()))
    };
    let mut best = (s.clone(), call, error.to_string());
    // Everything after the failing call is never played.
    best.0.answers.truncate(call);
    while best.0.answers.len() > 1 {
        let mut shorter = best.0.clone();
        shorter.answers.pop();
        let Some((c, e)) = fails(&shorter) else { break };
        best = (shorter, c, e);
    }
    let mut i = best.0.answers.len();
    while i > 0 {
        i -= 1;
        let mut cand = best.0.clone();
        cand.answers.remove(i);
        if let Some((c, e)) = fails(&cand) {
            best = (cand, c, e);
        }
    }
    best
}
