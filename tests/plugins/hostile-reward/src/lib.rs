//! A reward function that does what its `mode` says, for the host's containment tests.

use serde::{Deserialize, Serialize};
use vagen_sdk::export_reward;
use vagen_sdk::reward::{Judge, JudgeRequest, Message, Reward, Turn, TurnScore};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `echo` (the env reward back), `loop`, `memory`, `trap`, `short` (one score too
    /// few), `nan`, `refuse` (every turn an error), `judge` (asks the judge once per call,
    /// one request per turn, and pays 1 for a `YES`), `constant` (`value` on every turn),
    /// `huge` (a 4 MiB error for the first turn, 100,000 metrics for the others),
    /// `judge-empty` / `judge-spin` (call the judge in a loop with no requests / one).
    pub mode: String,
    pub value: f64,
}

pub struct Hostile(Config);

impl Reward for Hostile {
    type Config = Config;

    fn new(c: Config) -> Result<Self, String> {
        match c.mode.as_str() {
            "" | "echo" | "loop" | "memory" | "trap" | "short" | "nan" | "refuse" | "judge" | "constant" | "huge"
            | "judge-empty" | "judge-spin" => Ok(Hostile(c)),
            other => Err(format!(
                "mode {other:?} is not one of echo, loop, memory, trap, short, nan, refuse, judge, constant, huge, \
                 judge-empty, judge-spin"
            )),
        }
    }

    fn score(&mut self, turns: &[Turn], judge: &dyn Judge) -> Vec<Result<TurnScore, String>> {
        match self.0.mode.as_str() {
            "loop" => {
                let mut x = 0u64;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            "memory" => {
                let mut hoard: Vec<Vec<u8>> = vec![];
                loop {
                    hoard.push(vec![1; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "judge-empty" => loop {
                std::hint::black_box(judge.complete(&[]));
            },
            "judge-spin" => {
                let ask = JudgeRequest { messages: vec![Message::user("Again?")], max_tokens: 1, temperature: 0.0 };
                loop {
                    std::hint::black_box(judge.complete(std::slice::from_ref(&ask)));
                }
            }
            "trap" => panic!("the hostile reward panics on purpose"),
            "short" => turns.iter().skip(1).map(|t| Ok(TurnScore::new(t.env_reward))).collect(),
            "nan" => turns.iter().map(|_| Ok(TurnScore::new(f64::NAN))).collect(),
            "huge" => turns
                .iter()
                .enumerate()
                .map(|(i, _)| {
                    if i == 0 {
                        return Err("x".repeat(4 << 20));
                    }
                    let mut s = TurnScore::new(1.0);
                    s.metrics = (0..100_000).map(|k| (format!("m{k}"), 1.0)).collect();
                    Ok(s)
                })
                .collect(),
            "constant" => turns.iter().map(|_| Ok(TurnScore::new(self.0.value).with("paid", 1.0))).collect(),
            "refuse" => turns.iter().map(|t| Err(format!("cannot score {:?}", t.response))).collect(),
            "judge" => {
                let requests: Vec<JudgeRequest> = turns
                    .iter()
                    .map(|t| JudgeRequest {
                        messages: vec![Message::user(format!("Is this right? {}", t.response))],
                        max_tokens: 4,
                        temperature: 0.0,
                    })
                    .collect();
                judge
                    .complete(&requests)
                    .into_iter()
                    .map(|a| {
                        a.map(|text| {
                            let yes = text.trim().to_uppercase().starts_with("YES");
                            TurnScore::new(f64::from(u8::from(yes))).with("yes", f64::from(u8::from(yes)))
                        })
                    })
                    .collect()
            }
            _ => turns.iter().map(|t| Ok(TurnScore::new(t.env_reward).with("echo", 1.0))).collect(),
        }
    }
}

export_reward!(Hostile);
