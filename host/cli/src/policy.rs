//! Who writes the answers in `vagen-host run`: random actions, the env's oracle, or a person.

use anyhow::{Result, bail};
use clap::ValueEnum;
use rand_chacha::ChaCha8Rng;
use rand_core::Rng;
use std::io::{BufRead, Write};
use vagen_runtime::{Environment, Manifest};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PolicyKind {
    /// 1..=max actions per turn, each drawn uniformly from the action names.
    Random,
    /// The plugin's expert answers.
    Oracle,
    /// Answers typed on stdin.
    Human,
}

pub struct Policy {
    kind: PolicyKind,
    names: Vec<String>,
    joiner: String,
    max_per_turn: usize,
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
        Ok(Self {
            kind,
            names: m.action_names.clone(),
            joiner: format!("{} ", m.action_separator.trim()),
            max_per_turn: m.max_actions_per_turn.max(1) as usize,
        })
    }

    pub fn kind(&self) -> PolicyKind {
        self.kind
    }

    /// The next answer; `None` when a person ends input.
    pub fn answer(&self, env: &mut dyn Environment, rng: &mut ChaCha8Rng) -> Result<Option<String>> {
        match self.kind {
            PolicyKind::Random => {
                // Modulo bias is irrelevant for a handful of actions.
                let k = 1 + (rng.next_u64() % self.max_per_turn as u64) as usize;
                let picks: Vec<&str> =
                    (0..k).map(|_| self.names[(rng.next_u64() % self.names.len() as u64) as usize].as_str()).collect();
                Ok(Some(picks.join(&self.joiner)))
            }
            PolicyKind::Oracle => match env.oracle()? {
                Some(a) => Ok(Some(a)),
                None => bail!("the oracle gave no answer for this state"),
            },
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
