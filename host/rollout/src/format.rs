//! Reasoning formats: which tags a response must hold, how the system prompt explains them,
//! and the reminder repeated each turn (names and rules as RAGEN / VAGEN).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// `<answer>…</answer>`
    NoThink,
    /// `<think>…</think><answer>…</answer>`
    #[default]
    FreeThink,
    /// `<think><observation>…</observation><reasoning>…</reasoning></think><answer>…</answer>`
    Grounding,
    /// `<think><reasoning>…</reasoning><prediction>…</prediction></think><answer>…</answer>`
    WorldModeling,
    /// `<think><observation>…</observation><reasoning>…</reasoning><prediction>…</prediction></think><answer>…</answer>`
    GroundingWorldModeling,
    /// No format: the response is the answer, sent to the env as written; no instructions,
    /// no reminder, no format reward (`vagen-host run` without `--format`).
    Raw,
}

/// Every tag a format may use; text inside one part must not hold any of them.
pub const TAGS: [&str; 5] = ["think", "observation", "reasoning", "prediction", "answer"];

impl Format {
    pub const ALL: [Format; 5] =
        [Format::NoThink, Format::FreeThink, Format::Grounding, Format::WorldModeling, Format::GroundingWorldModeling];

    /// The stable name (`free-think`, …).
    pub fn name(self) -> &'static str {
        match self {
            Format::Raw => "raw",
            Format::NoThink => "no-think",
            Format::FreeThink => "free-think",
            Format::Grounding => "grounding",
            Format::WorldModeling => "world-modeling",
            Format::GroundingWorldModeling => "grounding-world-modeling",
        }
    }

    pub fn from_name(name: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.name() == name)
    }

    /// `None`: no `<think>`. `Some([])`: free text inside `<think>`. Otherwise the tags that
    /// must appear inside `<think>`, in order.
    pub fn think_parts(self) -> Option<&'static [&'static str]> {
        match self {
            Format::NoThink | Format::Raw => None,
            Format::FreeThink => Some(&[]),
            Format::Grounding => Some(&["observation", "reasoning"]),
            Format::WorldModeling => Some(&["reasoning", "prediction"]),
            Format::GroundingWorldModeling => Some(&["observation", "reasoning", "prediction"]),
        }
    }

    /// The pattern a response must follow, with `…` for free text.
    pub fn pattern(self) -> String {
        if self == Format::Raw {
            return "…".into();
        }
        let answer = "<answer>…</answer>";
        match self.think_parts() {
            None => answer.into(),
            Some([]) => format!("<think>…</think>{answer}"),
            Some(parts) => {
                let inner: String = parts.iter().map(|p| format!("<{p}>…</{p}>")).collect();
                format!("<think>{inner}</think>{answer}")
            }
        }
    }

    /// A correct response for `answer`, with stock text in the reasoning parts: what the
    /// random and oracle policies send, so they go through the same parser as a model.
    pub fn wrap(self, answer: &str) -> String {
        let part = |tag: &str| match tag {
            "observation" => "I look at the current state.",
            "reasoning" => "I choose the next actions.",
            _ => "The state will change after these actions.",
        };
        match self.think_parts() {
            None if self == Format::Raw => answer.to_string(),
            None => format!("<answer>{answer}</answer>"),
            Some([]) => format!("<think>I choose the next actions.</think><answer>{answer}</answer>"),
            Some(parts) => {
                let inner: String = parts.iter().map(|p| format!("<{p}>{}</{p}>", part(p))).collect();
                format!("<think>{inner}</think><answer>{answer}</answer>")
            }
        }
    }

    /// Appended to the env's system prompt: the format, what each part is for, an example.
    pub fn instructions(self, example_answer: &str) -> String {
        if self == Format::Raw {
            return String::new();
        }
        let mut s = format!("Respond in this format:\n{}\n", self.pattern());
        if let Some(parts) = self.think_parts() {
            for p in parts {
                s.push_str(match *p {
                    "observation" => "In <observation>, describe what you see in the current state.\n",
                    "reasoning" => "In <reasoning>, explain which actions to take and why.\n",
                    _ => "In <prediction>, describe the state you expect after your actions.\n",
                });
            }
            if parts.is_empty() {
                s.push_str("Think step by step in <think>, then give your actions in <answer>.\n");
            }
        }
        s.push_str(&format!("Example:\n{}", self.wrap(example_answer)));
        s
    }

    /// Where generation stops: the end of the answer, after which the format allows
    /// nothing.
    pub fn stop_strings(self) -> Vec<String> {
        match self {
            Format::Raw => vec![],
            _ => vec!["</answer>".into()],
        }
    }

    /// The short line after each observation (none without a format).
    pub fn reminder(self) -> String {
        if self == Format::Raw {
            return String::new();
        }
        format!("Respond in the format {}", self.pattern())
    }
}
