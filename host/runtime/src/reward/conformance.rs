//! `vagen-host check --reward` and `fuzz --reward`: does a reward component honour the
//! contract, and does it hold up under turns it did not expect?

use super::{Judge, JudgeRequest, RewardPlugin, Turn};
use crate::{Error, Image};
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use std::sync::Arc;

/// One check's outcome.
#[derive(Debug, Clone)]
pub struct Finding {
    pub check: &'static str,
    pub passed: bool,
    pub detail: String,
}

/// A judge that answers YES to everything, or what a seeded stream says (for the fuzzer).
struct Scripted {
    seed: Option<u64>,
}

impl Judge for Scripted {
    fn complete(&self, requests: &[JudgeRequest]) -> Vec<Result<String, String>> {
        let Some(seed) = self.seed else { return requests.iter().map(|_| Ok("YES".into())).collect() };
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ requests.len() as u64);
        requests
            .iter()
            .map(|_| match rng.next_u32() % 5 {
                0 => Err("the judge timed out".into()),
                1 => Ok(String::new()),
                2 => Ok("NO".into()),
                3 => Ok("Y\u{1F600}S, maybe <answer>".repeat(1 + (rng.next_u32() % 50) as usize)),
                _ => Ok("YES".into()),
            })
            .collect()
    }
}

/// Varied turns: every format, with and without parts, done or not, with images or not.
pub fn sample_turns(n: usize, seed: u64) -> Vec<Turn> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let formats = ["free-think", "grounding", "world-modeling", "grounding-world-modeling", "no-think"];
    (0..n)
        .map(|i| {
            let some = |rng: &mut ChaCha8Rng, text: &str| (!rng.next_u32().is_multiple_of(3)).then(|| text.to_string());
            let image = |rng: &mut ChaCha8Rng| -> Vec<Arc<Image>> {
                if rng.next_u32().is_multiple_of(2) {
                    return vec![];
                }
                let side = 1 + rng.next_u32() % 8;
                let rgb = (0..side * side * 3).map(|k| (k * 37 + i as u32) as u8).collect();
                vec![Arc::new(Image { width: side, height: side, rgb })]
            };
            Turn {
                env_name: ["frozenlake", "sokoban", "navigation", "unknown-env"][i % 4].into(),
                format: formats[i % formats.len()].into(),
                response: format!("<think>turn {i}</think><answer>Left</answer>"),
                think: some(&mut rng, "I should go left."),
                observation: some(&mut rng, "The goal is below me."),
                prediction: some(&mut rng, "I will be next to the goal."),
                answer: some(&mut rng, "Left"),
                format_ok: rng.next_u32() % 2 == 0,
                env_reward: f64::from(rng.next_u32() % 3) - 1.0,
                done: i % 5 == 4,
                success: i % 10 == 9,
                state_before: format!("The goal is {} rows below you.", i % 3 + 1),
                state_after: format!("The goal is {} rows below you.", i % 3),
                images_before: image(&mut rng),
                images_after: image(&mut rng),
            }
        })
        .collect()
}

fn found(check: &'static str, passed: bool, detail: impl Into<String>) -> Finding {
    Finding { check, passed, detail: detail.into() }
}

fn describe(r: &Result<super::TurnScore, String>) -> String {
    match r {
        Ok(s) => format!("{:.6} {:?}", s.reward, s.metrics.iter().map(|m| (&m.name, m.value)).collect::<Vec<_>>()),
        Err(e) => format!("error: {e}"),
    }
}

/// The contract's checks, in order; a check that cannot run (its scorer did not build) fails.
pub fn check(plugin: &RewardPlugin, config: &str) -> Vec<Finding> {
    let mut out = vec![];
    let m = plugin.manifest();
    out.push(found("manifest", true, format!("{} {}: {}", m.name, m.version, m.description)));
    let judge = || Some(Arc::new(Scripted { seed: None }) as Arc<dyn Judge>);
    match plugin.create("", judge()).and_then(|_| plugin.create(&m.default_config, judge())) {
        Ok(_) => out.push(found("default-config", true, "the defaults and their JSON create a scorer")),
        Err(e) => out.push(found("default-config", false, e.to_string())),
    }
    match plugin.create(r#"{"vagen_check_unknown_field": 1}"#, judge()) {
        Err(Error::BadConfig(msg)) => out.push(found("unknown-field", true, format!("refused: {msg}"))),
        Err(e) => out.push(found("unknown-field", false, format!("refused, but not as bad-config: {e}"))),
        Ok(_) => out.push(found("unknown-field", false, "a config with an unknown field was accepted")),
    }
    let mut scorer = match plugin.create(config, judge()) {
        Ok(s) => s,
        Err(e) => {
            out.push(found("create", false, format!("with the config given: {e}")));
            return out;
        }
    };
    let turns = sample_turns(12, 1);
    match scorer.score(&[]) {
        Ok(s) if s.is_empty() => out.push(found("empty-batch", true, "no turns, no scores")),
        Ok(s) => out.push(found("empty-batch", false, format!("{} scores for no turns", s.len()))),
        Err(e) => out.push(found("empty-batch", false, e.to_string())),
    }
    let batch = match scorer.score(&turns) {
        Ok(s) => {
            let failed = s.iter().filter(|r| r.is_err()).count();
            out.push(found(
                "score",
                true,
                format!("{} turns: {} scored, {failed} refused", turns.len(), s.len() - failed),
            ));
            s
        }
        Err(e) => {
            out.push(found("score", false, e.to_string()));
            return out;
        }
    };
    let again = plugin.create(config, judge()).and_then(|mut s| s.score(&turns));
    match again {
        Ok(a) if a == batch => out.push(found("deterministic", true, "a new scorer gives the same scores")),
        Ok(a) => {
            let i = a.iter().zip(&batch).position(|(x, y)| x != y).unwrap_or(0);
            out.push(found(
                "deterministic",
                false,
                format!("turn {i}: {} then {}", describe(&batch[i]), describe(&a[i])),
            ))
        }
        Err(e) => out.push(found("deterministic", false, e.to_string())),
    }
    let alone: Result<Vec<_>, Error> =
        turns.iter().map(|t| scorer.score(std::slice::from_ref(t)).map(|mut s| s.remove(0))).collect();
    match alone {
        Ok(a) if a == batch => {
            out.push(found("batch-independent", true, "each turn scores the same alone as in a batch"))
        }
        Ok(a) => {
            let i = a.iter().zip(&batch).position(|(x, y)| x != y).unwrap_or(0);
            out.push(found(
                "batch-independent",
                false,
                format!("turn {i}: {} in the batch, {} alone", describe(&batch[i]), describe(&a[i])),
            ))
        }
        Err(e) => out.push(found("batch-independent", false, e.to_string())),
    }
    out
}

/// What a fuzzing campaign found: each kind of call failure once, with the batch that
/// caused it (as the turns' `Debug`).
#[derive(Debug, Default)]
pub struct FuzzReport {
    pub batches: usize,
    pub turns: usize,
    /// Turns the component refused (its own errors, which are allowed).
    pub refused: usize,
    pub findings: Vec<(String, String, Vec<Turn>)>,
}

/// Scores `batches` random batches (0..=32 turns of random text, images, flags; a judge that
/// answers, refuses, rambles or errs) and records each kind of call-level failure once.
pub fn fuzz(plugin: &RewardPlugin, config: &str, seed: u64, batches: usize) -> FuzzReport {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut report = FuzzReport::default();
    let judge: Arc<dyn Judge> = Arc::new(Scripted { seed: Some(seed) });
    let Ok(mut scorer) = plugin.create(config, Some(judge.clone())) else {
        report.findings.push(("create".into(), "the config given does not create a scorer".into(), vec![]));
        return report;
    };
    for b in 0..batches {
        let n = (rng.next_u32() % 33) as usize;
        let mut turns = sample_turns(n, rng.next_u64());
        for t in &mut turns {
            mutate(t, &mut rng);
        }
        report.batches += 1;
        report.turns += n;
        match scorer.score(&turns) {
            Ok(scores) => report.refused += scores.iter().filter(|s| s.is_err()).count(),
            Err(e) => {
                let kind = e.kind().to_string();
                if !report.findings.iter().any(|(k, ..)| *k == kind) {
                    report.findings.push((kind, format!("batch {b}: {e}"), turns));
                }
            }
        }
    }
    report
}

/// Odd text where components parse: empty, huge, markup, other scripts, control bytes.
fn mutate(t: &mut Turn, rng: &mut ChaCha8Rng) {
    let pick = |rng: &mut ChaCha8Rng| -> String {
        match rng.next_u32() % 7 {
            0 => String::new(),
            1 => "<think><observation>".repeat(1 + (rng.next_u32() % 200) as usize),
            2 => "\u{0}\u{7}\u{202e}\u{fffd}".into(),
            3 => "水".repeat((rng.next_u32() % 5000) as usize),
            4 => format!("{}", f64::from_bits(rng.next_u64())),
            5 => "YES NO yes no".into(),
            _ => "x".repeat((rng.next_u32() % 20000) as usize),
        }
    };
    match rng.next_u32() % 6 {
        0 => t.response = pick(rng),
        1 => t.observation = Some(pick(rng)),
        2 => t.prediction = Some(pick(rng)),
        3 => t.state_before = pick(rng),
        4 => t.answer = Some(pick(rng)),
        _ => t.env_name = pick(rng),
    }
}
