//! RAGEN's Countdown: given numbers and a target, write an arithmetic expression that uses
//! each number exactly once and equals the target. Puzzles are generated from the seed with
//! a known solution (no dataset download); one answer per episode.

mod expr;

pub use expr::{Evaluated, ExprError, MAX_DEPTH, MAX_LEN, Op, Ratio, evaluate};

use serde::{Deserialize, Serialize};
use vagen_sdk::{Env, EnvError, Manifest, Observation, Rng, Step, export_env};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// How many numbers a puzzle gives (2..=6; RAGEN's data has 3 or 4).
    pub numbers: u32,
    /// Numbers are drawn from 1..=max_number.
    pub max_number: u32,
    /// Targets lie in 1..=max_target.
    pub max_target: u32,
    /// Reward for an expression that uses the numbers and hits the target.
    pub correct_reward: f64,
    /// Reward for an expression that parses but is wrong (RAGEN's format score).
    pub format_reward: f64,
}

impl Default for Config {
    fn default() -> Self {
        Self { numbers: 4, max_number: 100, max_target: 1000, correct_reward: 1.0, format_reward: 0.1 }
    }
}

/// Redraws before giving up on a target in range and taking the plain sum instead.
const MAX_DRAWS: usize = 10_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Puzzle {
    pub numbers: Vec<u64>,
    pub target: u64,
    /// An expression that solves it.
    pub solution: String,
}

impl Puzzle {
    /// Random numbers, combined pairwise in random order with random operations that keep
    /// every intermediate a positive whole number; the result is the target.
    pub fn generate(c: &Config, seed: u64) -> Puzzle {
        let mut rng = Rng::new(seed);
        for _ in 0..MAX_DRAWS {
            let numbers: Vec<u64> = (0..c.numbers).map(|_| 1 + rng.below(c.max_number as usize) as u64).collect();
            let mut items: Vec<(u64, String)> = numbers.iter().map(|n| (*n, n.to_string())).collect();
            while items.len() > 1 {
                let (a, b) = items.swap_remove(rng.below(items.len()));
                let (c2, d) = items.swap_remove(rng.below(items.len()));
                items.push(combine(&mut rng, (a, b), (c2, d)));
            }
            let (target, solution) = items.pop().expect("at least two numbers");
            if (1..=u64::from(c.max_target)).contains(&target) && !numbers.contains(&target) {
                return Puzzle { numbers, target, solution };
            }
        }
        let numbers: Vec<u64> = (1..=u64::from(c.numbers)).collect();
        let solution = numbers.iter().map(u64::to_string).collect::<Vec<_>>().join(" + ");
        Puzzle { target: numbers.iter().sum(), numbers, solution }
    }
}

fn combine(rng: &mut Rng, (a, ea): (u64, String), (b, eb): (u64, String)) -> (u64, String) {
    let (hi, ehi, lo, elo) = if a >= b { (a, ea, b, eb) } else { (b, eb, a, ea) };
    let mut ops = vec![Op::Add, Op::Mul];
    if hi > lo {
        ops.push(Op::Sub);
    }
    if lo > 1 && hi % lo == 0 {
        ops.push(Op::Div);
    }
    let op = *rng.choose(&ops).expect("Add is always allowed");
    let value = match op {
        Op::Add => hi + lo,
        Op::Sub => hi - lo,
        Op::Mul => hi.saturating_mul(lo),
        Op::Div => hi / lo,
    };
    (value, format!("({ehi} {} {elo})", op.symbol()))
}

pub struct Countdown {
    config: Config,
    puzzle: Puzzle,
}

impl Env for Countdown {
    type Config = Config;

    fn new(config: Config) -> Result<Self, EnvError> {
        let bad = |m: String| Err(EnvError::BadConfig(m));
        if !(2..=6).contains(&config.numbers) {
            return bad(format!("numbers must be in 2..=6, got {}", config.numbers));
        }
        if !(2..=10_000).contains(&config.max_number) {
            return bad(format!("max_number must be in 2..=10000, got {}", config.max_number));
        }
        if !(10..=1_000_000).contains(&config.max_target) {
            return bad(format!("max_target must be in 10..=1000000, got {}", config.max_target));
        }
        if !config.correct_reward.is_finite() || !config.format_reward.is_finite() {
            return bad("rewards must be finite".into());
        }
        let puzzle = Puzzle::generate(&config, 0);
        Ok(Self { config, puzzle })
    }

    fn manifest() -> Manifest {
        Manifest { default_max_turns: 1, has_oracle: true, ..Manifest::default() }
    }

    fn reset(&mut self, seed: u64) -> Observation {
        self.puzzle = Puzzle::generate(&self.config, seed);
        Observation::text(format!("Target: {}, nums: {:?}", self.puzzle.target, self.puzzle.numbers))
    }

    fn step(&mut self, answer: &str) -> Step {
        // "expr = target" is accepted: only the left side is evaluated.
        let expression = answer.split('=').next().unwrap_or("");
        let mut step = Step { done: true, ..Step::default() };
        let text = match evaluate(expression) {
            Err(e) => format!("That is not an expression I can read: {e}."),
            Ok(ev) => {
                step.valid_actions = 1;
                step.effective_actions = 1;
                let mut used = ev.numbers.clone();
                let mut given = self.puzzle.numbers.clone();
                used.sort_unstable();
                given.sort_unstable();
                let hits = ev.value.as_int() == Some(self.puzzle.target as i128);
                step.success = used == given && hits;
                step.reward = if step.success { self.config.correct_reward } else { self.config.format_reward };
                match (used == given, ev.value.as_int()) {
                    (false, _) => format!("The expression must use each of {:?} exactly once.", self.puzzle.numbers),
                    (true, Some(v)) if hits => format!("Correct: it equals {v}."),
                    (true, Some(v)) => format!("It equals {v}, not {}.", self.puzzle.target),
                    (true, None) => format!("It is not a whole number, so not {}.", self.puzzle.target),
                }
            }
        };
        step.observation = Observation::text(text);
        step
    }

    fn system_prompt(&self) -> String {
        "You are solving Countdown puzzles.\n\
         Goal: using each given number exactly once, with +, -, * and / and parentheses, write an expression \
         that equals the target.\n\
         Example: for Target: 24, nums: [2, 3, 4, 6], the answer (6 - 2) * (4 + 3) - 4 is wrong (4 used twice); \
         6 * 4 * (3 - 2) is right.\n\
         Answer with the expression only."
            .into()
    }

    fn describe_state(&self) -> String {
        format!("One solution is {} = {}.", self.puzzle.solution, self.puzzle.target)
    }

    fn oracle(&self) -> Option<String> {
        Some(self.puzzle.solution.clone())
    }
}

export_env!(Countdown);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_puzzles_are_solved_by_their_solution() {
        let c = Config::default();
        for seed in 0..2000 {
            let p = Puzzle::generate(&c, seed);
            assert_eq!(p.numbers.len(), 4);
            assert!((1..=1000).contains(&p.target), "seed {seed}: {}", p.target);
            let ev = evaluate(&p.solution).unwrap();
            assert_eq!(ev.value, Ratio::int(p.target as i128), "seed {seed}: {}", p.solution);
            let (mut a, mut b) = (ev.numbers, p.numbers.clone());
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b);
        }
        assert_eq!(Puzzle::generate(&c, 5), Puzzle::generate(&c, 5));
    }

    #[test]
    fn rewards_are_one_a_tenth_or_zero() {
        let mut env = Countdown::new(Config::default()).unwrap();
        env.puzzle = Puzzle { numbers: vec![2, 3, 4, 6], target: 24, solution: "6 * 4 * (3 - 2)".into() };
        let cases = [
            ("6 * 4 * (3 - 2)", 1.0, true),
            ("(6 * 4 * (3 - 2)) = 24", 1.0, true),
            ("6 + 4 + 3 + 2", 0.1, false),
            ("6 * 4", 0.1, false),
            ("6 * 4 * 4 / 4", 0.1, false),
            ("6 * 4 / (3 - 3) + 2", 0.0, false),
            ("twenty-four", 0.0, false),
            ("", 0.0, false),
        ];
        for (answer, reward, success) in cases {
            let s = env.step(answer);
            assert_eq!((s.reward, s.success, s.done), (reward, success, true), "{answer:?}: {}", s.observation.text);
        }
    }
}
