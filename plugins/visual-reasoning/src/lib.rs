//! VAGEN's visual-reasoning reward with the host's judge. For each turn whose format was
//! right, the judge is asked (in one batch per call) whether the agent's `<observation>`
//! matches the environment's description of the state before the move, and whether its
//! `<prediction>` matches the state after; each YES pays its weight. An answer that says
//! neither YES nor NO counts as NO and is counted (`unparsed`); a judge error fails the
//! turn (the host counts it, never a 0).

mod prompts;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use vagen_sdk::export_reward;
use vagen_sdk::reward::{Judge, JudgeRequest, Message, Part, Reward, Turn, TurnScore};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// What a YES on grounding pays (VAGEN: 0.5).
    pub grounding_weight: f64,
    /// What a YES on world modeling pays (VAGEN: 0.5).
    pub worldmodeling_weight: f64,
    /// Tokens the judge may write (its verdict comes first).
    pub max_tokens: u32,
    pub temperature: f64,
    /// Show the judge the observation's images beside the description (a VL judge).
    pub images: bool,
    /// Prompt templates by env name, replacing the built-in ones: `{state}` is the true
    /// state, `{text}` the agent's, `{what}` `observation` or `prediction`.
    pub prompts: BTreeMap<String, String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            grounding_weight: 0.5,
            worldmodeling_weight: 0.5,
            max_tokens: 8,
            temperature: 0.0,
            images: false,
            prompts: BTreeMap::new(),
        }
    }
}

#[derive(Debug)]
pub struct VisualReasoning(Config);

/// One question to the judge: which turn, which term.
struct Asked {
    turn: usize,
    grounding: bool,
}

/// YES, NO, or neither, from the judge's first word that is one of them.
pub fn verdict(answer: &str) -> Option<bool> {
    answer.split(|c: char| !c.is_ascii_alphabetic()).find_map(|w| match w.to_ascii_uppercase().as_str() {
        "YES" => Some(true),
        "NO" => Some(false),
        _ => None,
    })
}

impl Reward for VisualReasoning {
    type Config = Config;

    fn new(c: Config) -> Result<Self, String> {
        for (name, w) in [("grounding_weight", c.grounding_weight), ("worldmodeling_weight", c.worldmodeling_weight)] {
            if !w.is_finite() {
                return Err(format!("{name} must be a finite number, not {w}"));
            }
        }
        if c.max_tokens == 0 {
            return Err("max_tokens must be at least 1".into());
        }
        if !(c.temperature >= 0.0 && c.temperature.is_finite()) {
            return Err(format!("temperature {} must be finite and >= 0", c.temperature));
        }
        for (env, p) in &c.prompts {
            if !p.contains("{state}") || !p.contains("{text}") {
                return Err(format!("prompts.{env} must contain {{state}} and {{text}}"));
            }
        }
        Ok(VisualReasoning(c))
    }

    fn score(&mut self, turns: &[Turn], judge: &dyn Judge) -> Vec<Result<TurnScore, String>> {
        let mut asked = vec![];
        let mut requests = vec![];
        for (i, t) in turns.iter().enumerate().filter(|(_, t)| t.format_ok) {
            for (grounding, text, state, images) in [
                (true, &t.observation, &t.state_before, &t.images_before),
                (false, &t.prediction, &t.state_after, &t.images_after),
            ] {
                let Some(text) = text else { continue };
                let prompt = prompts::prompt(&self.0.prompts, &t.env_name, grounding, state, text);
                let mut content = vec![];
                if self.0.images {
                    content.extend(images.iter().cloned().map(Part::Image));
                }
                content.push(Part::Text(prompt));
                requests.push(JudgeRequest {
                    messages: vec![Message::system(prompts::SYSTEM), Message { role: "user".into(), content }],
                    max_tokens: self.0.max_tokens,
                    temperature: self.0.temperature,
                });
                asked.push(Asked { turn: i, grounding });
            }
        }
        let answers = if requests.is_empty() { vec![] } else { judge.complete(&requests) };
        let mut out: Vec<Result<TurnScore, String>> = turns
            .iter()
            .map(|_| Ok(TurnScore::new(0.0).with("grounding", 0.0).with("worldmodeling", 0.0).with("unparsed", 0.0)))
            .collect();
        for (a, answer) in asked.iter().zip(answers) {
            let Ok(score) = &mut out[a.turn] else { continue };
            match answer {
                Err(e) => out[a.turn] = Err(format!("the judge failed: {e}")),
                Ok(text) => {
                    let yes = verdict(&text);
                    let (weight, metric) =
                        if a.grounding { (self.0.grounding_weight, 0) } else { (self.0.worldmodeling_weight, 1) };
                    if yes == Some(true) {
                        score.reward += weight;
                        score.metrics[metric].1 = 1.0;
                    }
                    if yes.is_none() {
                        score.metrics[2].1 += 1.0;
                    }
                }
            }
        }
        out
    }
}

export_reward!(VisualReasoning);

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    struct Says(Vec<Result<String, String>>, RefCell<Vec<JudgeRequest>>);

    impl Judge for Says {
        fn complete(&self, requests: &[JudgeRequest]) -> Vec<Result<String, String>> {
            self.1.borrow_mut().extend(requests.iter().cloned());
            self.0.iter().take(requests.len()).cloned().collect()
        }
    }

    fn turn(format_ok: bool) -> Turn {
        Turn {
            env_name: "frozenlake".into(),
            observation: Some("the goal is below me".into()),
            prediction: Some("I will stand on the goal".into()),
            format_ok,
            state_before: "The goal is 1 row below you.".into(),
            state_after: "You are on the goal.".into(),
            ..Turn::default()
        }
    }

    #[test]
    fn each_yes_pays_its_weight_in_one_judge_call() {
        let mut r = VisualReasoning::new(Config::default()).unwrap();
        let judge = Says(
            vec![Ok("YES".into()), Ok("No, it is above.".into()), Ok("maybe".into()), Ok("yes.".into())],
            RefCell::new(vec![]),
        );
        let s = r.score(&[turn(true), turn(false), turn(true)], &judge);
        assert_eq!(judge.1.borrow().len(), 4, "two questions for each turn in format");
        let first = s[0].as_ref().unwrap();
        assert_eq!(first.reward, 0.5);
        assert_eq!(
            first.metrics,
            vec![("grounding".into(), 1.0), ("worldmodeling".into(), 0.0), ("unparsed".into(), 0.0)]
        );
        assert_eq!(s[1].as_ref().unwrap().reward, 0.0, "a wrong format is not judged");
        let third = s[2].as_ref().unwrap();
        assert_eq!(third.reward, 0.5);
        assert_eq!(third.metrics[2].1, 1.0, "an unparseable answer is a NO, counted");
        let prompt = format!("{:?}", judge.1.borrow()[0]);
        assert!(prompt.contains("The goal is 1 row below you.") && prompt.contains("the goal is below me"));
    }

    #[test]
    fn a_judge_error_fails_its_turn_only() {
        let mut r = VisualReasoning::new(Config::default()).unwrap();
        let judge = Says(
            vec![Err("timed out".into()), Ok("YES".into()), Ok("YES".into()), Ok("YES".into())],
            RefCell::new(vec![]),
        );
        let s = r.score(&[turn(true), turn(true)], &judge);
        assert!(s[0].as_ref().unwrap_err().contains("timed out"));
        assert_eq!(s[1].as_ref().unwrap().reward, 1.0);
    }

    #[test]
    fn verdicts_and_bad_configs() {
        assert_eq!(verdict(" Yes, it matches"), Some(true));
        assert_eq!(verdict("NO."), Some(false));
        assert_eq!(verdict("I think so"), None);
        assert_eq!(verdict("NOT sure; YES"), Some(true));
        let bad =
            Config { prompts: [("sokoban".to_string(), "no placeholders".to_string())].into(), ..Config::default() };
        assert!(VisualReasoning::new(bad).unwrap_err().contains("prompts.sokoban"));
        assert!(VisualReasoning::new(Config { max_tokens: 0, ..Config::default() }).is_err());
    }
}
