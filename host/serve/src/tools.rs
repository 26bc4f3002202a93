//! Tool calling: a request's `tools` and `tool_choice` read into what the prompt offers and
//! forces, and an answer read back into text and calls. The model's chat template writes the
//! tools into the prompt; a forced call (`required`, or a named function) is an answer that
//! starts with the call's opening, written after the generation prompt (part of the prompt,
//! not sampled: vLLM constrains sampling instead). A call the model wrote badly leaves the
//! answer as text, never an error.

use crate::request::{Refused, refused};
use serde_json::Value;
use vagen_model::{CALL_OPEN, ToolCall, ToolFormat};
use vagen_policy::openai::ChatRequest;

/// What a request asked of tools.
#[derive(Debug, Clone)]
pub(crate) struct ToolUse {
    /// The tools as sent, for the chat template.
    pub tools: Vec<Value>,
    pub names: Vec<String>,
    /// How answers are read for calls; `None`: not read (no tools, or `tool_choice` none).
    pub format: Option<ToolFormat>,
    /// What the answer starts with (a forced call's opening), part of the prompt.
    pub prefix: String,
    /// `tool_choice` named the function: OpenAI then ends the answer with `stop`, not
    /// `tool_calls`.
    pub named: bool,
    /// `parallel_tool_calls` (default true): false keeps an answer's first call only.
    pub parallel: bool,
}

impl Default for ToolUse {
    fn default() -> Self {
        ToolUse { tools: vec![], names: vec![], format: None, prefix: String::new(), named: false, parallel: true }
    }
}

impl ToolUse {
    /// How a stream sends an answer's text: all of it, none (a forced call, read whole at
    /// the end), or up to where a call may begin.
    pub fn streaming(&self) -> Streaming {
        match (&self.format, self.prefix.is_empty()) {
            (None, _) => Streaming::All,
            (Some(_), false) => Streaming::Nothing,
            (Some(_), true) => Streaming::UntilCall,
        }
    }

    /// Whether an answer with `calls` ends as `tool_calls` (OpenAI's finish reason for calls
    /// the model chose to make; one forced by name ends with `stop`).
    pub fn ends_in_calls(&self, calls: &[ToolCall]) -> bool {
        !calls.is_empty() && !self.named
    }

    /// An answer's `text` (past the prefix) as content and calls, each call given a fresh
    /// id. A request that reads no calls, an answer without one and an answer with a
    /// malformed one are all text (the prefix included).
    pub fn read(&self, text: &str) -> (String, Vec<ToolCall>) {
        let whole = format!("{}{text}", self.prefix);
        let Some(format) = self.format else { return (whole, vec![]) };
        let names: Vec<&str> = self.names.iter().map(String::as_str).collect();
        match format.parse(&whole, &names) {
            Ok(answer) if !answer.calls.is_empty() => {
                let kept = if self.parallel { answer.calls.len() } else { 1 };
                let calls = answer.calls.into_iter().take(kept).map(|c| ToolCall { id: call_id(), ..c }).collect();
                (answer.content, calls)
            }
            _ => (whole, vec![]),
        }
    }
}

/// See [`ToolUse::streaming`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Streaming {
    All,
    Nothing,
    UntilCall,
}

impl Streaming {
    /// How much of `text` may be sent: all of it, nothing, or what comes before a call
    /// could begin (a call's opening, a piece of one at the end, and the whitespace before
    /// either, which the call's text leaves out).
    pub fn sendable(self, text: &str) -> usize {
        match self {
            Streaming::All => text.len(),
            Streaming::Nothing => 0,
            Streaming::UntilCall => {
                let mut end = text.find(CALL_OPEN).unwrap_or(text.len());
                if let Some(k) = (1..CALL_OPEN.len()).rev().find(|&k| text[..end].ends_with(&CALL_OPEN[..k])) {
                    end -= k;
                }
                text[..end].trim_end().len()
            }
        }
    }
}

/// OpenAI's ids look like `call_` and 24 letters and digits.
fn call_id() -> String {
    let n = u128::from(crate::fresh_seed()) << 64 | u128::from(crate::fresh_seed());
    format!("call_{:024x}", n & ((1u128 << 96) - 1))
}

/// The request's tools and choice, or the field at fault. `format`: how the served model
/// writes calls (`None`: its template writes none, and tools are refused).
pub(crate) fn tool_use(r: &ChatRequest, format: Option<ToolFormat>) -> Result<ToolUse, Refused> {
    let tools = r.tools.clone().unwrap_or_default();
    let mut names: Vec<String> = vec![];
    for (i, tool) in tools.iter().enumerate() {
        let name = tool
            .get("function")
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty() && tool.get("type").and_then(Value::as_str) == Some("function"));
        let Some(name) = name else {
            return Err(refused(
                "tools",
                format!("tools[{i}]: expected {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}"),
            ));
        };
        // OpenAI's rule; it also keeps a name the same in JSON and in the template's text.
        if name.len() > 64 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
            let message = format!("tools[{i}]: the name {name:?} is not 1 to 64 of a-z, A-Z, 0-9, _ and -");
            return Err(refused("tools", message));
        }
        if names.iter().any(|n| n == name) {
            return Err(refused("tools", format!("tools[{i}]: a second function named {name:?}")));
        }
        names.push(name.to_string());
    }
    let choice = match &r.tool_choice {
        None | Some(Value::Null) => Choice::Auto,
        Some(Value::String(s)) if s == "auto" => Choice::Auto,
        Some(Value::String(s)) if s == "none" => Choice::None,
        Some(Value::String(s)) if s == "required" => Choice::Required,
        Some(v) => match v.get("function").and_then(|f| f.get("name")).and_then(Value::as_str) {
            Some(name) if v.get("type").and_then(Value::as_str) == Some("function") => Choice::Named(name.to_string()),
            _ => {
                return Err(refused(
                    "tool_choice",
                    "tool_choice: expected \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                ));
            }
        },
    };
    let parallel = match r.other.get("parallel_tool_calls") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(refused("parallel_tool_calls", "parallel_tool_calls: expected true or false")),
    };
    if tools.is_empty() {
        return match choice {
            Choice::Auto | Choice::None => Ok(ToolUse { parallel, ..ToolUse::default() }),
            _ => Err(refused("tool_choice", "tool_choice: forces a call, and the request has no tools")),
        };
    }
    let Some(format) = format else {
        return Err(refused(
            "tools",
            "tools: this model's chat template writes no tool calls (it has no <tool_call> format)",
        ));
    };
    let prefix = match &choice {
        Choice::Auto | Choice::None => String::new(),
        Choice::Required => format.forced_prefix(None),
        Choice::Named(name) if names.contains(name) => format.forced_prefix(Some(name)),
        Choice::Named(name) => {
            return Err(refused("tool_choice", format!("tool_choice names {name:?}, which is not among the tools")));
        }
    };
    let format = (choice != Choice::None).then_some(format);
    let named = matches!(choice, Choice::Named(_));
    Ok(ToolUse { tools, names, format, prefix, named, parallel })
}

#[derive(Debug, PartialEq)]
enum Choice {
    Auto,
    None,
    Required,
    Named(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(tools: Value, choice: Value) -> ChatRequest {
        serde_json::from_value(
            json!({"messages": [{"role": "user", "content": "hi"}], "tools": tools, "tool_choice": choice}),
        )
        .unwrap()
    }

    fn calc() -> Value {
        json!([{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}])
    }

    #[test]
    fn choices_read_into_what_is_forced_and_what_is_parsed() {
        let f = Some(ToolFormat::Hermes);
        let auto = tool_use(&request(calc(), Value::Null), f).unwrap();
        assert_eq!((auto.format, auto.prefix.as_str(), auto.streaming()), (f, "", Streaming::UntilCall));
        let none = tool_use(&request(calc(), json!("none")), f).unwrap();
        assert_eq!((none.format, none.streaming(), none.tools.len()), (None, Streaming::All, 1));
        let named = tool_use(&request(calc(), json!({"type": "function", "function": {"name": "calc"}})), f).unwrap();
        assert_eq!(
            (named.prefix.as_str(), named.streaming()),
            ("<tool_call>\n{\"name\": \"calc\", \"arguments\":", Streaming::Nothing)
        );
        assert!(named.named && !auto.named && auto.parallel);
        let call = [ToolCall { id: "c".into(), name: "calc".into(), arguments: "{}".into() }];
        assert!(auto.ends_in_calls(&call) && !auto.ends_in_calls(&[]) && !named.ends_in_calls(&call));
        assert!(tool_use(&request(calc(), json!("required")), f).unwrap().prefix.ends_with("{\"name\": \""));
        for (tools, choice, says) in [
            (calc(), json!({"type": "function", "function": {"name": "rm"}}), "not among the tools"),
            (json!([]), json!("required"), "has no tools"),
            (json!([{"type": "function", "function": {}}]), Value::Null, "tools[0]: expected"),
            (
                json!([{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "a"}}]),
                Value::Null,
                "a second function",
            ),
            (calc(), json!("sometimes"), "tool_choice: expected"),
            (json!([{"type": "function", "function": {"name": "a\"b"}}]), Value::Null, "is not 1 to 64"),
        ] {
            let err = tool_use(&request(tools, choice), f).unwrap_err();
            assert!(err.message.contains(says), "{}", err.message);
        }
        let err = tool_use(&request(calc(), Value::Null), None).unwrap_err();
        assert!(err.message.contains("writes no tool calls"), "{}", err.message);
    }

    #[test]
    fn answers_read_into_calls_or_stay_text() {
        let auto = tool_use(&request(calc(), Value::Null), Some(ToolFormat::Hermes)).unwrap();
        let two = "<tool_call>\n{\"name\": \"calc\"}\n</tool_call>\n<tool_call>\n{\"name\": \"calc\"}\n</tool_call>";
        assert_eq!(auto.read(two).1.len(), 2);
        assert_eq!(ToolUse { parallel: false, ..auto.clone() }.read(two).1.len(), 1);
        let (content, calls) =
            auto.read("Sure.\n<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"x\": 1}}\n</tool_call>");
        assert_eq!((content.as_str(), calls.len(), calls[0].arguments.as_str()), ("Sure.", 1, "{\"x\": 1}"));
        assert!(calls[0].id.starts_with("call_") && calls[0].id.len() == 29, "{}", calls[0].id);
        let bad = "<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"x\": 1}\n</tool_call>";
        assert_eq!(auto.read(bad), (bad.to_string(), vec![]));
        let named = tool_use(
            &request(calc(), json!({"type": "function", "function": {"name": "calc"}})),
            Some(ToolFormat::Hermes),
        )
        .unwrap();
        let (content, calls) = named.read(" {}}\n</tool_call>");
        assert_eq!((content.as_str(), calls[0].name.as_str()), ("", "calc"));
        assert_eq!(named.read("oops").0, format!("{}oops", named.prefix));
    }

    #[test]
    fn a_stream_sends_text_up_to_where_a_call_may_begin() {
        let s = Streaming::UntilCall;
        assert_eq!(s.sendable("Hello there"), 11);
        assert_eq!(s.sendable("Hello \n<tool"), 5);
        assert_eq!(s.sendable("Hello\n<tool_call>\n{"), 5);
        assert_eq!(s.sendable("a < b"), 5);
        assert_eq!(s.sendable("a <"), 1);
        assert_eq!(Streaming::Nothing.sendable("abc"), 0);
        assert_eq!(Streaming::All.sendable("abc "), 4);
    }
}
