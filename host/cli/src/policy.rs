//! Who writes the answers in `vagen-host run`: random actions, the env's oracle, or a person.

use anyhow::{Result, bail};
use clap::ValueEnum;
use rand_chacha::ChaCha8Rng;
use std::io::{BufRead, Write};
use vagen_runtime::{Environment, Manifest, random_answer};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PolicyKind {
    /// 1..=max actions per turn, each drawn uniformly from the action names (the
    /// instance's, as its config set them).
    Random,
    /// The plugin's expert answers.
    Oracle,
    /// Answers typed on stdin.
    Human,
    /// A language model (`--model`), through the chat template and the response parser.
    Model,
}

pub struct Policy {
    kind: PolicyKind,
}

impl Policy {
    pub fn new(kind: PolicyKind, m: &Manifest) -> Result<Self> {
        match kind {
            PolicyKind::Random if m.action_names.is_empty() => {
                bail!("the random policy needs discrete action names, and {} takes free-form answers", m.name)
            }
            PolicyKind::Oracle if !m.has_oracle => bail!("{} has no oracle", m.name),
            _ => {}
        }
        Ok(Self { kind })
    }

    pub fn kind(&self) -> PolicyKind {
        self.kind
    }

    /// The next answer; `None` when a person ends input.
    pub fn answer(&self, env: &mut dyn Environment, rng: &mut ChaCha8Rng) -> Result<Option<String>> {
        match self.kind {
            // `new` refused envs without action names (a config may not add any), so there
            // is always an answer.
            PolicyKind::Random => Ok(random_answer(env.action_space(), rng)),
            PolicyKind::Oracle => match env.oracle()? {
                Some(a) => Ok(Some(a)),
                None => bail!("the oracle gave no answer for this state"),
            },
            PolicyKind::Model => bail!("the model policy runs through the rollout path"),
            PolicyKind::Human => {
                print!("answer> ");
                std::io::stdout().flush()?;
                let mut line = String::new();
                if std::io::stdin().lock().read_line(&mut line)? == 0 {
                    return Ok(None);
                }
                Ok(Some(line.trim_end_matches(['\r', '\n']).to_string()))
            }
        }
    }
}
