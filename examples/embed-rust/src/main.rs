//! vagen-runtime embedded in a program of its own: loads a plugin, plays seeded episodes
//! with its own policy, and handles each kind of error the runtime can return.
//!
//! Run (after `cargo xtask plugins`):
//!
//! ```sh
//! cargo run --release -p embed-rust -- target/plugins/frozenlake.wasm 20
//! cargo run --release -p embed-rust -- target/test-plugins/hostile.wasm 5 '{"mode": "flaky"}'
//! ```
//!
//! The policy asks the env's oracle every other turn and otherwise picks an action name
//! from its own seeded generator: what a real agent would replace with its model.

use std::process::ExitCode;
use vagen_runtime::{Environment, Error, Limits, Runtime};

/// How an episode ended.
#[derive(Debug, PartialEq)]
enum Outcome {
    Success,
    Failure,
    /// The plugin faulted (trap, timeout, out of memory or fuel, malformed result); the
    /// runtime has already re-created the instance.
    Fault(String),
    /// The env said it could not go on (`EnvError::Failed` in the SDK).
    EnvFailed(String),
}

/// A tiny seeded generator (SplitMix64), so the example needs nothing but the runtime.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Our policy: the oracle on even turns when there is one, else a random action name.
fn answer(env: &mut dyn Environment, turn: u32, rng: &mut Rng) -> Result<String, Error> {
    if turn.is_multiple_of(2)
        && let Some(expert) = env.oracle()?
    {
        return Ok(expert);
    }
    let names = &env.action_space().action_names;
    Ok(if names.is_empty() { String::new() } else { names[(rng.next() % names.len() as u64) as usize].clone() })
}

fn episode(env: &mut dyn Environment, seed: u64, max_turns: u32) -> Result<Outcome, Error> {
    let mut rng = Rng(seed);
    env.reset(seed)?;
    for turn in 0..max_turns {
        let a = answer(env, turn, &mut rng)?;
        let step = env.step(&a)?;
        if step.done {
            return Ok(if step.success { Outcome::Success } else { Outcome::Failure });
        }
    }
    Ok(Outcome::Failure)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: embed-rust PLUGIN.wasm [EPISODES] [CONFIG_JSON]");
        return ExitCode::from(2);
    };
    let episodes: u64 = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(10);
    let config = args.get(2).cloned().unwrap_or_default();
    let limits = Limits { call_timeout_ms: 1_000, memory_mib: 128, ..Limits::default() };
    // Loading and configuring are the caller's problems: report them and stop.
    let plugin = match Runtime::new(limits).and_then(|rt| rt.load(path)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cannot load {path}: {e}");
            return ExitCode::from(2);
        }
    };
    let mut env = match plugin.create(&config) {
        Ok(env) => env,
        Err(Error::BadConfig(why)) => {
            eprintln!("{path} refused the config: {why}");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("cannot create an instance of {path}: {e}");
            return ExitCode::from(2);
        }
    };
    let max_turns = plugin.max_turns(None);
    let mut counts = std::collections::BTreeMap::<&str, u64>::new();
    for seed in 0..episodes {
        let outcome = match episode(env.as_mut(), seed, max_turns) {
            Ok(o) => o,
            // A fault ends this episode only: the instance is fresh again for the next reset.
            Err(e) if e.is_fault() => Outcome::Fault(e.to_string()),
            Err(Error::Failed { message, .. }) => Outcome::EnvFailed(message),
            // Out of order calls are a bug in this program, not in the plugin.
            Err(e @ Error::InvalidState(_)) => {
                eprintln!("seed {seed}: {e}");
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("seed {seed}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let label = match &outcome {
            Outcome::Success => "success",
            Outcome::Failure => "failure",
            Outcome::Fault(_) => "fault",
            Outcome::EnvFailed(_) => "env-failed",
        };
        match &outcome {
            Outcome::Fault(why) | Outcome::EnvFailed(why) => println!("seed {seed}: {label}: {why}"),
            _ => println!("seed {seed}: {label}"),
        }
        *counts.entry(label).or_default() += 1;
    }
    let summary: Vec<String> = counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
    println!("{episodes} episodes: {}", summary.join(", "));
    ExitCode::SUCCESS
}
