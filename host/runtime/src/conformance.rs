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
        Ok(format!("{} {}, {} actions, {} max turns", m.name, m.version, m.action_names.len(), m.default_max_turns)),
    );
    r.record("create", check_create(plugin, opts));
    r.record("step-before-reset", check_step_before_reset(plugin, opts));
    r.record("determinism", check_determinism(plugin, opts));
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

/// Everything observable about one episode, one entry per call, compared byte for byte.
fn transcript(env: &mut dyn Environment, plugin: &dyn Plugin, seed: u64) -> Result<(Vec<String>, bool), String> {
    let obs = env.reset(seed).map_err(|e| format!("reset({seed}): {e}"))?;
    let mut out = vec![fingerprint(&obs)];
    let mut answers = Answers::new(plugin, seed);
    for turn in 1..=plugin.manifest().default_max_turns {
        let answer = answers.next(env).map_err(|e| format!("seed {seed}, turn {turn}: {e}"))?;
        let s = env.step(&answer).map_err(|e| format!("seed {seed}, turn {turn}, answer {answer:?}: {e}"))?;
        out.push(format!("{answer:?} -> {}", fingerprint(&s)));
        if s.done {
            return Ok((out, true));
        }
    }
    Ok((out, false))
}

fn fingerprint(v: &impl std::fmt::Debug) -> String {
    // Debug output covers every field, image bytes included (they are not skipped there).
    format!("{v:?}")
}

fn check_determinism(plugin: &dyn Plugin, opts: &CheckOptions) -> Result<String, String> {
    let create = || plugin.create(&opts.config).map_err(|e| format!("create: {e}"));
    let (mut a, mut b) = (create()?, create()?);
    let mut finished = 0;
    for &seed in &opts.seeds {
        let (ta, done) = transcript(a.as_mut(), plugin, seed)?;
        let (tb, _) = transcript(b.as_mut(), plugin, seed)?;
        first_difference(&ta, &tb).map_or(Ok(()), |t| {
            Err(format!(
                "seed {seed}: two fresh instances differ at turn {t}{}",
                if t == 0 { " (the reset observation)" } else { "" }
            ))
        })?;
        finished += usize::from(done);
        // The same instance, after other episodes, must replay the seed exactly.
        transcript(a.as_mut(), plugin, seed.wrapping_add(1))?;
        let (again, _) = transcript(a.as_mut(), plugin, seed)?;
        first_difference(&ta, &again).map_or(Ok(()), |t| {
            Err(format!(
                "seed {seed}: replaying on the same instance differs at turn {t}; state leaks between episodes"
            ))
        })?;
    }
    Ok(format!(
        "{} seeds replay identically on fresh and reused instances ({finished} episodes ended within the turn limit)",
        opts.seeds.len()
    ))
}

fn first_difference(a: &[String], b: &[String]) -> Option<usize> {
    (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i))
}

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
    let max_turns = plugin.manifest().default_max_turns;
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
        if let Some(a) = random_answer(&self.manifest, &mut self.rng) {
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
