//! Tool calls in a model's answer, in the format its chat template teaches it. Qwen2.5's
//! templates (and Hermes') write each call as `<tool_call>\n{"name": ..., "arguments":
//! {...}}\n</tool_call>` after the turn's text; that is the format read here (vLLM's
//! `hermes` parser reads the same).

use crate::ChatTemplate;
use vagen_abi::ToolCall;

/// Where a call begins in an answer.
pub const CALL_OPEN: &str = "<tool_call>";
const CALL_CLOSE: &str = "</tool_call>";

/// How a model writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>{"name": ..., "arguments": ...}</tool_call>` blocks.
    Hermes,
}

/// An answer read for tool calls: its text before the first call, and the calls (ids not
/// yet given).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolAnswer {
    /// The text before the first call, trailing whitespace left out (the template writes
    /// its own line break before a call).
    pub content: String,
    pub calls: Vec<ToolCall>,
}

impl ToolFormat {
    /// The format `template` writes calls in; `None` when it writes none (a template that
    /// takes no tools).
    pub fn of(template: &ChatTemplate) -> Option<Self> {
        let source = template.source();
        (source.contains(CALL_OPEN) && source.contains("tools")).then_some(ToolFormat::Hermes)
    }

    /// What an answer forced to call a tool starts with: a call of any tool (`None`), or of
    /// the tool named (a plain name, `[A-Za-z0-9_-]`), up to its arguments. Each ends where
    /// the template's own spelling of a call goes on with one pre-token (` "`, ` {`), so the
    /// model writes the next one whole.
    pub fn forced_prefix(self, name: Option<&str>) -> String {
        match name {
            None => format!("{CALL_OPEN}\n{{\"name\": \""),
            Some(n) => format!("{CALL_OPEN}\n{{\"name\": \"{n}\", \"arguments\":"),
        }
    }

    /// `answer` as text and calls of the tools named in `offered`. `Ok` with no calls for an
    /// answer that has none; an error that says what is wrong for a call that is not JSON,
    /// not closed, names a tool not offered, or has text after it.
    pub fn parse(self, answer: &str, offered: &[&str]) -> Result<ToolAnswer, String> {
        let Some(first) = answer.find(CALL_OPEN) else {
            return Ok(ToolAnswer { content: answer.to_string(), calls: vec![] });
        };
        let content = answer[..first].trim_end().to_string();
        let mut calls = vec![];
        let mut rest = &answer[first..];
        while let Some(open) = rest.find(CALL_OPEN) {
            if !rest[..open].trim().is_empty() {
                return Err(format!("text between tool calls: {:?}", rest[..open].trim()));
            }
            let body = &rest[open + CALL_OPEN.len()..];
            let close = body.find(CALL_CLOSE).ok_or_else(|| format!("tool call {} is not closed", calls.len()))?;
            calls.push(call(body[..close].trim(), offered).map_err(|e| format!("tool call {}: {e}", calls.len()))?);
            rest = &body[close + CALL_CLOSE.len()..];
        }
        if !rest.trim().is_empty() {
            return Err(format!("text after the last tool call: {:?}", rest.trim()));
        }
        Ok(ToolAnswer { content, calls })
    }
}

/// One call's `{"name": ..., "arguments": {...}}`; its arguments' text as written.
fn call(json: &str, offered: &[&str]) -> Result<ToolCall, String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Written<'a> {
        name: String,
        #[serde(borrow, default)]
        arguments: Option<&'a serde_json::value::RawValue>,
    }
    let written: Written = serde_json::from_str(json).map_err(|e| format!("not a JSON call ({e}): {json:?}"))?;
    if !offered.contains(&written.name.as_str()) {
        return Err(format!("calls {:?}, which is not among the tools offered ({})", written.name, offered.join(", ")));
    }
    let arguments = written.arguments.map_or("{}", |a| a.get());
    if !arguments.starts_with('{') {
        return Err(format!("the arguments of {:?} are not a JSON object: {arguments}", written.name));
    }
    Ok(ToolCall { id: String::new(), name: written.name, arguments: arguments.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOOLS: &[&str] = &["calc", "search"];

    fn parse(answer: &str) -> Result<ToolAnswer, String> {
        ToolFormat::Hermes.parse(answer, TOOLS)
    }

    #[test]
    fn calls_are_read_with_their_arguments_as_written_and_the_text_before_them() {
        let a = parse(
            "Let me add.\n<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"b\": 2, \"a\": [1, 2.5]}}\n</tool_call>\n\
             <tool_call>\n{\"name\": \"search\", \"arguments\": {}}\n</tool_call>",
        )
        .unwrap();
        assert_eq!(a.content, "Let me add.");
        assert_eq!(a.calls.len(), 2);
        assert_eq!((a.calls[0].name.as_str(), a.calls[0].arguments.as_str()), ("calc", "{\"b\": 2, \"a\": [1, 2.5]}"));
        assert_eq!((a.calls[1].name.as_str(), a.calls[1].arguments.as_str()), ("search", "{}"));
        let plain = parse("just text").unwrap();
        assert_eq!((plain.content.as_str(), plain.calls.len()), ("just text", 0));
        assert_eq!(parse("<tool_call>{\"name\": \"calc\"}</tool_call>").unwrap().calls[0].arguments, "{}");
    }

    #[test]
    fn a_malformed_call_says_what_is_wrong() {
        for (answer, says) in [
            ("<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"a\": 1}\n</tool_call>", "not a JSON call"),
            ("<tool_call>\n{\"name\": \"calc\", \"arguments\": {}}", "not closed"),
            (
                "<tool_call>{\"name\": \"rm\", \"arguments\": {}}</tool_call>",
                "not among the tools offered (calc, search)",
            ),
            ("<tool_call>{\"name\": \"calc\", \"arguments\": 3}</tool_call>", "not a JSON object"),
            ("<tool_call>{\"name\": \"calc\"}</tool_call> and more", "text after the last tool call"),
            ("<tool_call>{\"name\": \"calc\"}</tool_call> so <tool_call>{\"name\": \"calc\"}</tool_call>", "between"),
            ("<tool_call>{\"name\": \"calc\", \"args\": {}}</tool_call>", "unknown field"),
        ] {
            let err = parse(answer).unwrap_err();
            assert!(err.contains(says), "{answer:?}: {err}");
        }
    }

    #[test]
    fn a_forced_prefix_opens_a_call_the_parser_reads_back() {
        let named = ToolFormat::Hermes.forced_prefix(Some("calc"));
        let a = parse(&format!("{named} {{\"x\": 1}}}}\n</tool_call>")).unwrap();
        assert_eq!((a.calls[0].name.as_str(), a.calls[0].arguments.as_str()), ("calc", "{\"x\": 1}"));
        let any = ToolFormat::Hermes.forced_prefix(None);
        let a = parse(&format!("{any}search\", \"arguments\": {{}}}}\n</tool_call>")).unwrap();
        assert_eq!(a.calls[0].name, "search");
    }
}
