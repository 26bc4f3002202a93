//! Does a plugin honour the contract? The checks behind `vagen-host check`, as a library so
//! tests and other tools can run them.

use crate::{Environment, Error, Plugin, random_answer};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

/// What to check, and how hard.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// JSON config for every instance (`""`: the defaults).
    pub config: String,
    /// Seeds for the determinism checks.
    pub seeds: Vec<u64>,
    /// Seeds the oracle plays.
    pub oracle_episodes: u64,
    /// Fraction of those episodes the oracle must win.
    pub oracle_min_success: f64,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            config: String::new(),
            seeds: vec![0, 1, 12_345, u64::MAX],
            oracle_episodes: 20,
            oracle_min_success: 1.0,
        }
    }
}

/// One line of the report.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    pub check: &'static str,
    pub passed: bool,
    pub detail: String,
}

#[derive(Clone, Debug, Default)]
pub struct Report {
    pub findings: Vec<Finding>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.findings.iter().all(|f| f.passed)
    }

    pub fn failures(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| !f.passed)
    }

    fn record(&mut self, check: &'static str, result: Result<String, String>) {
        let (passed, detail) = match result {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        };
        self.findings.push(Finding { check, passed, detail });
    }
}

/// Runs every check; a check that cannot run (say, the instance will not even be created)
/// is a failure, and the others still run.
pub fn check(plugin: &dyn Plugin, opts: &CheckOptions) -> Report {
    let mut r = Report::default();
    let m = plugin.manifest();
    r.record(
        "manifest",
        // The description too: a plugin that depends on the machine (a simulator's Python,
        // a renderer) says there what it found.
        Ok(format!(
            "{} {}, {} actions, {} max turns: {}",
            m.name,
            m.version,
            m.action_names.len(),
            m.default_max_turns,
            m.description
        )),
    );
    r.record("create", check_create(plugin, opts));
    r.record("step-before-reset", check_step_before_reset(plugin, opts));
    // A call that fails is the env's error, not nondeterminism: it gets its own line, and
    // determinism is judged only on episodes that play.
    let episodes = check_episodes(plugin, opts);
    let played = episodes.is_ok();
    r.record("episodes", episodes);
    if played {
        r.record("determinism", check_determinism(plugin, opts));
    } else {
        r.record("determinism", Err("not judged: episodes fail (see `episodes`)".into()));
    }
    r.record("step-after-done", check_step_after_done(plugin, opts));
    if m.has_oracle {
        r.record("oracle", check_oracle(plugin, opts));
    }
    r
}

fn check_create(plugin: &dyn Plugin, opts: &CheckOptions) -> Result<String, String> {
    let m = plugin.manifest();
    plugin.create(&m.default_config).map_err(|e| format!("the manifest's default config is refused: {e}"))?;
    let mut env = plugin.create(&opts.config).map_err(|e| format!("create: {e}"))?;
    let prompt = env.system_prompt().map_err(|e| e.to_string())?;
    env.describe_state().map_err(|e| e.to_string())?;
    if prompt.trim().is_empty() {
        return Ok("created (note: the system prompt is empty)".into());
    }
    Ok(format!("created; system prompt of {} bytes", prompt.len()))
}

fn check_step_before_reset(plugin: &dyn Plugin, opts: &CheckOptions) -> Result<String, String> {
    let mut env = plugin.create(&opts.config).map_err(|e| format!("create: {e}"))?;
    match env.step(&first_answer(plugin)) {
        Err(Error::InvalidState(_)) => Ok("refused with invalid-state".into()),
        Err(e) => Err(format!("expected an invalid-state error, got: {e}")),
        Ok(_) => Err("a step before any reset was accepted".into()),
    }
}

/// Everything observable about one call, field by field, so that a difference can be named.
#[derive(PartialEq)]
struct Call {
    answer: Option<String>,
    text: String,
    /// Each image's size and pixels.
    images: Vec<(u32, u32, Vec<u8>)>,
    /// reward, done, success, valid actions, effective actions, metrics (absent for reset).
    outcome: Option<(f64, bool, bool, u32, u32, Vec<(String, f64)>)>,
}

impl Call {
    fn new(answer: Option<String>, obs: &crate::Observation, step: Option<&crate::StepResult>) -> Self {
        Self {
            answer,
            text: obs.text.clone(),
            images: obs.images.iter().map(|i| (i.width, i.height, i.rgb.clone())).collect(),
            outcome: step.map(|s| {
                let metrics = s.metrics.iter().map(|m| (m.name.clone(), m.value)).collect();
                (s.reward, s.done, s.success, s.valid_actions, s.effective_actions, metrics)
            }),
        }
    }
}

/// The first field in which two calls differ, in words.
fn difference(a: &Call, b: &Call) -> String {
    if a.answer != b.answer {
        return format!("the answer given (the oracle answered {:?}, then {:?})", a.answer, b.answer);
    }
    if a.text != b.text {
        let at = a.text.chars().zip(b.text.chars()).take_while(|(x, y)| x == y).count();
        return format!(
            "the observation text, from character {at}: {:?} vs {:?}",
            clip(&a.text, at),
            clip(&b.text, at)
        );
    }
    if a.images.len() != b.images.len() {
        return format!("the number of images ({} vs {})", a.images.len(), b.images.len());
    }
    for (k, (x, y)) in a.images.iter().zip(&b.images).enumerate() {
        if (x.0, x.1) != (y.0, y.1) {
            return format!("image {k}'s size ({}x{} vs {}x{})", x.0, x.1, y.0, y.1);
        }
        if let Some(p) = x.2.iter().zip(&y.2).position(|(u, v)| u != v) {
            let n = x.2.iter().zip(&y.2).filter(|(u, v)| u != v).count();
            return format!("image {k}'s pixels ({n} bytes differ, the first at pixel {} of {}x{})", p / 3, x.0, x.1);
        }
    }
    match (&a.outcome, &b.outcome) {
        (Some(x), Some(y)) => {
            let fields: [(&str, String, String); 6] = [
                ("reward", format!("{:?}", x.0), format!("{:?}", y.0)),
                ("done", x.1.to_string(), y.1.to_string()),
                ("success", x.2.to_string(), y.2.to_string()),
                ("valid actions", x.3.to_string(), y.3.to_string()),
                ("effective actions", x.4.to_string(), y.4.to_string()),
                ("metrics", format!("{:?}", x.5), format!("{:?}", y.5)),
            ];
            let (name, u, v) =
                fields.into_iter().find(|(_, u, v)| u != v).unwrap_or(("nothing", String::new(), String::new()));
            format!("{name} ({u} vs {v})")
        }
        _ => "whether the call was a reset or a step".into(),
    }
}

fn clip(t: &str, from: usize) -> String {
    t.chars().skip(from).take(40).collect()
}

/// One episode, one entry per call (0: reset, k: the k-th step), and whether it ended.
/// A call that fails is an `Err` naming the seed, the call and the answer.
fn transcript(env: &mut dyn Environment, plugin: &dyn Plugin, seed: u64) -> Result<(Vec<Call>, bool), String> {
    let obs = env.reset(seed).map_err(|e| format!("seed {seed}, reset: {e}"))?;
    let mut out = vec![Call::new(None, &obs, None)];
    let mut answers = Answers::new(plugin, seed);
    for turn in 1..=plugin.max_turns(None) {
        let answer = answers.next(env).map_err(|e| format!("seed {seed}, oracle before step {turn}: {e}"))?;
        let s = env.step(&answer).map_err(|e| format!("seed {seed}, step {turn} (answer {answer:?}): {e}"))?;
        out.push(Call::new(Some(answer), &s.observation, Some(&s)));
        if s.done {
            return Ok((out, true));
        }
    }
    Ok((out, false))
}

fn call_name(k: usize) -> String {
    if k == 0 { "reset".into() } else { format!("step {k}") }
}

/// Where and how two transcripts of one seed first differ, if they do.
fn divergence(a: &[Call], b: &[Call]) -> Option<String> {
    let k = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i))?;
    Some(match (a.get(k), b.get(k)) {
        (Some(x), Some(y)) => format!("at {}: {}", call_name(k), difference(x, y)),
        (Some(_), None) | (None, Some(_)) => {
            format!("in length: one episode ended after {} calls, the other after {}", a.len(), b.len())
        }
        (None, None) => unreachable!("k is below the longer length"),
    })
}

fn check_episodes(plugin: &dyn Plugin, opts: &CheckOptions) -> Result<String, String> {
    let mut env = plugin.create(&opts.config).map_err(|e| format!("create: {e}"))?;
    let mut finished = 0;
    for &seed in &opts.seeds {
        finished += usize::from(transcript(env.as_mut(), plugin, seed)?.1);
    }
    Ok(format!("{} seeds played without an error ({finished} ended within the turn limit)", opts.seeds.len()))
}

fn check_determinism(plugin: &dyn Plugin, opts: &CheckOptions) -> Result<String, String> {
    let create = || plugin.create(&opts.config).map_err(|e| format!("create: {e}"));
    let (mut a, mut b) = (create()?, create()?);
    for &seed in &opts.seeds {
        let (ta, _) = transcript(a.as_mut(), plugin, seed)?;
        let (tb, _) = transcript(b.as_mut(), plugin, seed)?;
        if let Some(d) = divergence(&ta, &tb) {
            return Err(format!("seed {seed}: two fresh instances differ {d}"));
        }
        // The same instance, after other episodes, must replay the seed exactly.
        transcript(a.as_mut(), plugin, seed.wrapping_add(1))?;
        let (again, _) = transcript(a.as_mut(), plugin, seed)?;
        if let Some(d) = divergence(&ta, &again) {
            return Err(format!(
                "seed {seed}: replaying on the same instance differs {d}; state leaks between episodes"
            ));
        }
    }
    // State that builds up slowly: the first seed again after many more episodes.
    if let Some(&first) = opts.seeds.first() {
        let (fresh, _) = transcript(b.as_mut(), plugin, first)?;
        for k in 0..LATE_REPLAY_AFTER {
            transcript(a.as_mut(), plugin, first.wrapping_add(1_000 + k))?;
        }
        let (late, _) = transcript(a.as_mut(), plugin, first)?;
        if let Some(d) = divergence(&fresh, &late) {
            return Err(format!(
                "seed {first}: replaying it after {} episodes on one instance differs {d}; state leaks between episodes",
                LATE_REPLAY_AFTER + 3 * opts.seeds.len() as u64
            ));
        }
    }
    Ok(format!(
        "{} seeds replay identically on fresh and reused instances, also after {} more episodes",
        opts.seeds.len(),
        LATE_REPLAY_AFTER
    ))
}

/// Episodes one instance plays before its first seed is replayed once more: a plugin whose
/// state drifts only after a dozen resets is caught.
const LATE_REPLAY_AFTER: u64 = 32;

fn check_step_after_done(plugin: &dyn Plugin, opts: &CheckOptions) -> Result<String, String> {
    let mut env = plugin.create(&opts.config).map_err(|e| format!("create: {e}"))?;
    for seed in 0..50u64 {
        let (_, done) = transcript(env.as_mut(), plugin, seed)?;
        if !done {
            continue;
        }
        return match env.step(&first_answer(plugin)) {
            Err(Error::InvalidState(_)) => {
                env.reset(seed).map_err(|e| format!("reset after a finished episode: {e}"))?;
                Ok(format!("refused with invalid-state (seed {seed}); reset afterwards works"))
            }
            Err(e) => Err(format!("expected an invalid-state error after done, got: {e}")),
            Ok(_) => Err(format!("seed {seed}: a step after `done` was accepted")),
        };
    }
    Ok("no episode ended within the turn limit in 50 seeds; not checked".into())
}

fn check_oracle(plugin: &dyn Plugin, opts: &CheckOptions) -> Result<String, String> {
    let mut env = plugin.create(&opts.config).map_err(|e| format!("create: {e}"))?;
    let max_turns = plugin.max_turns(None);
    let mut wins = 0u64;
    for seed in 0..opts.oracle_episodes {
        env.reset(seed).map_err(|e| format!("reset({seed}): {e}"))?;
        for _ in 0..max_turns {
            let answer = env
                .oracle()
                .map_err(|e| format!("seed {seed}: {e}"))?
                .ok_or_else(|| format!("seed {seed}: the manifest declares an oracle, but it gave no answer"))?;
            let s = env.step(&answer).map_err(|e| format!("seed {seed}, oracle answer {answer:?}: {e}"))?;
            if s.done {
                wins += u64::from(s.success);
                break;
            }
        }
    }
    let rate = wins as f64 / opts.oracle_episodes.max(1) as f64;
    let summary = format!("won {wins} of {} episodes within {max_turns} turns", opts.oracle_episodes);
    if rate + 1e-12 >= opts.oracle_min_success {
        Ok(summary)
    } else {
        Err(format!("{summary}; at least {:.0}% required", opts.oracle_min_success * 100.0))
    }
}

/// Answers for scripted episodes: random actions for a discrete vocabulary, else the
/// oracle's, else a fixed text. Seeded by the episode seed, so two runs agree.
struct Answers {
    rng: ChaCha8Rng,
    manifest: crate::Manifest,
}

impl Answers {
    fn new(plugin: &dyn Plugin, seed: u64) -> Self {
        Self { rng: ChaCha8Rng::seed_from_u64(seed), manifest: plugin.manifest().clone() }
    }

    fn next(&mut self, env: &mut dyn Environment) -> Result<String, Error> {
        if let Some(a) = random_answer(env.action_space(), &mut self.rng) {
            return Ok(a);
        }
        if self.manifest.has_oracle
            && let Some(a) = env.oracle()?
        {
            return Ok(a);
        }
        Ok("answer".into())
    }
}

fn first_answer(plugin: &dyn Plugin) -> String {
    plugin.manifest().action_names.first().cloned().unwrap_or_else(|| "answer".into())
}
