//! The conversation a rollout holds with its policy, piece by piece: the system prompt, each
//! user turn, how an answer is read into the env's action and what the format pays for it.
//! The driver builds every prompt from these, and so does the Python package's `Prompter`,
//! so a loop of one's own prompts exactly as training and `eval` do.

use crate::config::RolloutConfig;
use crate::{Format, Parsed, parse};
use std::num::NonZeroUsize;
use vagen_runtime::{ActionSpace, Manifest};

impl RolloutConfig {
    /// The system prompt: the config's own or the env's, then the format's instructions
    /// with the env's first action as the example (unless `instructions` is off).
    pub fn system_message(&self, env_system: &str, manifest: &Manifest) -> String {
        let example = manifest.action_names.first().map_or("...", String::as_str);
        let instructions = self.format.instructions(example);
        let system = self.system_prompt.as_deref().unwrap_or(env_system);
        if self.instructions && !instructions.is_empty() {
            format!("{system}\n\n{instructions}")
        } else {
            system.into()
        }
    }

    /// The observation as the policy reads it: the env's text, with its state description
    /// after it or in its place (`describe_state`, `observation_text`).
    pub fn shown_observation(&self, text: &str, description: Option<&str>) -> String {
        match description.filter(|_| self.describe_state) {
            None => text.to_string(),
            Some(d) if self.observation_text => format!("{text}\n{d}"),
            Some(d) => d.to_string(),
        }
    }

    /// A user turn: the feedback on the last answer and the reminder where the config keeps
    /// them, around the observation.
    pub fn user_message(&self, feedback: Option<String>, observation: &str) -> String {
        let feedback = feedback.filter(|_| self.feedback);
        let reminder = self.reminder.then(|| self.format.reminder()).filter(|r| !r.is_empty());
        feedback.into_iter().chain([observation.to_string()]).chain(reminder).collect::<Vec<_>>().join("\n")
    }

    /// The answer read in the format, its actions capped at what a turn takes (the
    /// instance's limit and `cap`, the smaller).
    pub fn read_answer(&self, response: &str, space: &ActionSpace, cap: Option<NonZeroUsize>) -> Parsed {
        let per_turn = match (cap, space.max_actions_per_turn as usize) {
            (None, m) => m,
            (Some(c), 0) => c.get(),
            (Some(c), m) => c.get().min(m),
        };
        parse(response, self.format, &space.action_separator, per_turn)
    }

    /// What `step` receives for the kept actions: the text as written without a format.
    pub fn step_answer(&self, response: &str, p: &Parsed, space: &ActionSpace) -> String {
        match self.format {
            Format::Raw => response.to_string(),
            _ => p.step_answer(&separator_with_space(space)),
        }
    }

    /// What the format adds to a turn's env reward, given how many actions were valid.
    pub fn format_reward(&self, p: &Parsed, valid_actions: u32) -> f64 {
        let extra = self.format_reward.extra_actions_invalid && p.extra_actions > 0;
        let all_valid = !p.actions.is_empty() && valid_actions as usize == p.actions.len() && !extra;
        match self.format {
            Format::Raw => 0.0,
            _ if p.format_ok && all_valid => self.format_reward.bonus,
            _ => self.format_reward.penalty,
        }
    }
}

/// What the next user turn says about the last answer, before the new observation.
pub fn feedback(p: &Parsed, valid: u32, effective: u32) -> String {
    if p.actions.is_empty() {
        return if p.answer.is_none() {
            "Your response had no <answer>; no action was executed.".into()
        } else {
            "Your answer held no action; no action was executed.".into()
        };
    }
    let n = p.actions.len();
    let mut s =
        format!("Your actions: {} ({valid} of {n} valid, {effective} changed the state).", p.actions.join(", "));
    if !p.format_ok {
        s.push_str(" Your response did not follow the format.");
    }
    s
}

/// The instance's separator as the random policy writes it (", " for ","), so answers
/// read naturally in logs.
pub(crate) fn separator_with_space(a: &ActionSpace) -> String {
    let s = a.action_separator.trim();
    if s.is_empty() { a.action_separator.clone() } else { format!("{s} ") }
}
