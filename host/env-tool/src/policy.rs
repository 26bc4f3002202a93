//! Who answers in `run`: random actions, the env's oracle, a person, or (in `vagen-host`
//! only) a language model, each as a rollout [`Policy`].

use crate::record::ImageSink;
use crate::run::RunArgs;
use anyhow::{Result, bail};
use clap::ValueEnum;
use std::io::{BufRead, Write};
use vagen_rollout::{AnswerOrigin, Format, OraclePolicy, Policy, PolicyError, RandomPolicy, Request, Response};
use vagen_runtime::Manifest;

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

/// Makes `--policy model`'s policy from the run's arguments, answering in the format given:
/// `vagen-host` loads a language model; `vagen-env`, which has none, says so.
pub type ModelPolicyMaker = dyn Fn(&RunArgs, Format) -> Result<Box<dyn Policy>>;

/// [`ModelPolicyMaker`] of a tool without a language model.
pub fn no_model(_: &RunArgs, _: Format) -> Result<Box<dyn Policy>> {
    bail!("vagen-env runs no language model (it is built without libtorch): use `vagen-host run --policy model`")
}

/// The policy `kind` answering in `format` for the env `m`.
pub fn make(
    kind: PolicyKind,
    format: Format,
    m: &Manifest,
    a: &RunArgs,
    model: &ModelPolicyMaker,
) -> Result<Box<dyn Policy>> {
    Ok(match kind {
        PolicyKind::Random if m.action_names.is_empty() => {
            bail!("the random policy needs discrete action names, and {} takes free-form answers", m.name)
        }
        PolicyKind::Random => Box::new(RandomPolicy { format }),
        PolicyKind::Oracle if !m.has_oracle => bail!("{} has no oracle", m.name),
        PolicyKind::Oracle => Box::new(OraclePolicy { format }),
        PolicyKind::Human if format != Format::Raw => bail!("the human policy types raw answers: drop --format"),
        PolicyKind::Human => {
            let images = ImageSink::new(None, Some(std::env::temp_dir().join("vagen-human")));
            Box::new(Human { images, episode: 0 })
        }
        PolicyKind::Model => model(a, format)?,
    })
}

/// A person at the terminal: shown the system prompt once, then each step's reward and the
/// observation (images as PNG paths); an empty input stream ends the episode. `run` plays
/// one episode at a time for it and shows how each ended ([`show_ending`]).
struct Human {
    images: ImageSink,
    /// Episodes started: the images' file names.
    episode: usize,
}

impl Policy for Human {
    fn name(&self) -> &'static str {
        "human"
    }
    fn respond(&mut self, requests: &[Request]) -> Result<Vec<Response>, PolicyError> {
        let failed = |e: anyhow::Error| PolicyError::Io { policy: "human", message: format!("{e:#}") };
        let mut out = Vec::with_capacity(requests.len());
        for r in requests {
            if r.turn == 0 {
                self.episode += 1;
                println!("{}\n", r.system);
            }
            if let Some(reward) = r.last_reward {
                println!("reward {reward:+}");
            }
            println!("{}", r.user);
            for path in self.images.save(self.episode, r.turn as u32, &r.images).map_err(failed)? {
                println!("[image: {path}]");
            }
            print!("answer> ");
            std::io::stdout().flush().map_err(|e| failed(e.into()))?;
            let mut line = String::new();
            if std::io::stdin().lock().read_line(&mut line).map_err(|e| failed(e.into()))? == 0 {
                out.push(Response { stop: true, ..Response::default() });
                continue;
            }
            out.push(Response::text(line.trim_end_matches(['\r', '\n'])).by(AnswerOrigin::Human));
        }
        Ok(out)
    }
}

/// How a person's episode ended: the last reward and observation, and the outcome.
pub fn show_ending(t: &vagen_rollout::Trajectory) {
    if let Some(last) = t.turns.last() {
        println!("reward {:+}", last.env_reward);
    }
    println!("{}", t.end_observation);
    let outcome = match (&t.failure, t.done) {
        (Some(f), _) => format!("failed: {f}"),
        (None, true) if t.success => "done: success".to_string(),
        (None, true) => "done: no success".to_string(),
        (None, false) => "ended before the env said done".to_string(),
    };
    println!("episode {outcome}\n");
}
