//! Reading a response: its parts, whether it follows the format, the actions to execute.
//! Linear scans with ASCII needles only, so any text (unicode, megabytes, unbalanced or
//! nested tags) is handled without panicking.

use crate::format::{Format, TAGS};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Parsed {
    pub think: Option<String>,
    pub observation: Option<String>,
    pub reasoning: Option<String>,
    pub prediction: Option<String>,
    /// The first complete `<answer>…</answer>`, found even when the format is wrong.
    pub answer: Option<String>,
    /// The whole trimmed response is exactly the format's pattern: each part once, in
    /// order, no tag inside a part's text, nothing but white space between and around.
    pub format_ok: bool,
    /// The answer split on the env's separator, trimmed, empties dropped, at most
    /// `max_actions` (0: no limit).
    pub actions: Vec<String>,
    /// Actions the answer carried beyond `max_actions`, which are not executed.
    #[serde(default)]
    pub extra_actions: usize,
}

impl Parsed {
    /// What goes to the env's `step`: the kept actions joined by the separator (empty
    /// when the response has no answer, which the env treats as an invalid turn).
    pub fn step_answer(&self, separator: &str) -> String {
        self.actions.join(separator)
    }
}

pub fn parse(response: &str, format: Format, separator: &str, max_actions: usize) -> Parsed {
    if format == Format::Raw {
        // The whole text is the answer; its actions are counted, not cut (the env decides).
        let (actions, _) = split_actions(response, separator, 0);
        return Parsed { answer: Some(response.to_string()), format_ok: true, actions, ..Parsed::default() };
    }
    let answer = part(response, "answer").map(str::to_string);
    let (actions, extra_actions) =
        answer.as_deref().map(|a| split_actions(a, separator, max_actions)).unwrap_or_default();
    Parsed {
        think: part(response, "think").map(str::to_string),
        observation: part(response, "observation").map(str::to_string),
        reasoning: part(response, "reasoning").map(str::to_string),
        prediction: part(response, "prediction").map(str::to_string),
        answer,
        format_ok: follows(response, format).is_some(),
        actions,
        extra_actions,
    }
}

/// The kept actions, and how many more the answer held.
fn split_actions(answer: &str, separator: &str, max: usize) -> (Vec<String>, usize) {
    let pieces: Vec<&str> = if separator.is_empty() { vec![answer] } else { answer.split(separator).collect() };
    let mut all: Vec<String> =
        pieces.into_iter().map(str::trim).filter(|a| !a.is_empty()).map(str::to_string).collect();
    let extra = if max == 0 { 0 } else { all.len().saturating_sub(max) };
    all.truncate(all.len() - extra);
    (all, extra)
}

/// Text of the first `<tag>` up to the next `</tag>`.
fn part<'a>(text: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = text.find(&open)? + open.len();
    let end = text[start..].find(&close)?;
    Some(&text[start..start + end])
}

/// `Some(())` when `response` is exactly the format's pattern.
fn follows(response: &str, format: Format) -> Option<()> {
    let mut rest = response.trim();
    if let Some(parts) = format.think_parts() {
        rest = rest.strip_prefix("<think>")?;
        if parts.is_empty() {
            rest = take_part(rest, "think")?;
        } else {
            for tag in parts {
                rest = rest.trim_start().strip_prefix(&format!("<{tag}>") as &str)?;
                rest = take_part(rest, tag)?;
            }
            rest = rest.trim_start().strip_prefix("</think>")?;
        }
        rest = rest.trim_start();
    }
    rest = rest.strip_prefix("<answer>")?;
    rest = take_part(rest, "answer")?;
    rest.trim().is_empty().then_some(())
}

/// Skips a part's text up to and past `</tag>`; `None` when the text holds any tag.
fn take_part<'a>(rest: &'a str, tag: &str) -> Option<&'a str> {
    let close = format!("</{tag}>");
    let end = rest.find(&close)?;
    let text = &rest[..end];
    let clean =
        TAGS.iter().all(|t| !text.contains(&format!("<{t}>") as &str) && !text.contains(&format!("</{t}>") as &str));
    clean.then(|| &rest[end + close.len()..])
}
