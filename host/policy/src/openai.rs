//! OpenAI's chat-completions bodies (the fields of OpenAI's API reference that we read or
//! write), shared by `vagen-host serve` (reads requests, writes responses) and the trainer's
//! OpenAI judge client (writes requests, reads responses), so both ends agree on one shape.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// `POST /v1/chat/completions`'s body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub messages: Vec<ChatMessage>,
    /// Deprecated by OpenAI for `max_completion_tokens`; either is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Completions to return, 1 by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    /// Draws the completions repeat; absent: fresh ones every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// With `stream`: `include_usage` adds a last chunk with no choices and the usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Return each sampled token's log-prob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<bool>,
    /// With `logprobs`: the most likely tokens at each position, 0–20.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_logprobs: Option<i64>,
    /// Functions the model may call: `{"type": "function", "function": {"name", ...}}`
    /// each, kept as sent (the chat template writes them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Value>>,
    /// `"auto"` (the default with tools), `"none"`, `"required"` or one function
    /// (`{"type": "function", "function": {"name": ...}}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    /// Every other field, for the server to accept (harmless ones) or refuse by name.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_usage: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default)]
    pub content: Content,
    /// An assistant turn's calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallEntry>>,
    /// A `tool` message's: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A message of `role` with `content` and no tool calls.
    pub fn new(role: impl Into<String>, content: Content) -> Self {
        ChatMessage { role: role.into(), content, tool_calls: None, tool_call_id: None }
    }

    /// Its role as a chat template names it (`developer` is OpenAI's newer name for
    /// `system`), or what is wrong with it.
    pub fn template_role(&self) -> Result<&'static str, String> {
        match self.role.as_str() {
            "system" | "developer" => Ok("system"),
            "user" => Ok("user"),
            "assistant" => Ok("assistant"),
            "tool" => Ok("tool"),
            other => Err(format!("role {other:?}: expected system, developer, user, assistant or tool")),
        }
    }

    /// Its tool calls as a chat template takes them: only an assistant's message has any,
    /// and each one's arguments are a JSON object (empty arguments: `{}`, as vLLM reads them).
    pub fn template_tool_calls(&self) -> Result<Vec<vagen_model::ToolCall>, String> {
        let Some(calls) = &self.tool_calls else { return Ok(vec![]) };
        if self.role != "assistant" {
            return Err("tool_calls are an assistant's".into());
        }
        let call = |(k, c): (usize, &ToolCallEntry)| {
            let arguments = match c.function.arguments.trim() {
                "" => "{}".to_string(),
                a if serde_json::from_str::<serde_json::Map<String, Value>>(a).is_ok() => c.function.arguments.clone(),
                _ => return Err(format!("tool_calls[{k}].function.arguments: not a JSON object")),
            };
            Ok(vagen_model::ToolCall { id: c.id.clone(), name: c.function.name.clone(), arguments })
        };
        calls.iter().enumerate().map(call).collect()
    }
}

/// One call in an assistant message: `{"id", "type": "function", "function": {"name",
/// "arguments"}}`, the arguments as JSON text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallEntry {
    pub id: String,
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    pub function: FunctionCall,
}

fn function_kind() -> String {
    "function".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: String,
}

/// A streamed piece of a call: the first of each call has its index, id, type and name,
/// the arguments follow (here: whole, in the same piece).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeltaToolCall {
    pub index: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<DeltaFunction>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeltaFunction {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

/// A message's content: a string, or parts (text, and images as `data:` URLs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
    #[default]
    Empty,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    Text { text: String },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageUrl {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn strings(&self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s.clone()],
            Stop::Many(v) => v.clone(),
        }
    }
}

/// A non-streamed answer (read leniently: compatible servers leave fields out).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub object: String,
    #[serde(default)]
    pub created: u64,
    #[serde(default)]
    pub model: String,
    pub choices: Vec<Choice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    #[serde(default)]
    pub index: usize,
    pub message: AssistantMessage,
    #[serde(default)]
    pub finish_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<ChoiceLogprobs>,
    /// Our extension: the sampled token ids, so a harness can train on exactly what was
    /// sampled (`serve`'s answers always carry them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
    /// Our extension: the bytes of a character the answer stopped inside (a length cut),
    /// which `content` leaves out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_bytes: Option<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    #[serde(default)]
    pub role: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallEntry>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChoiceLogprobs {
    pub content: Vec<TokenLogprob>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprob>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
}

/// One server-sent event of a streamed answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatChunk {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChunkChoice>,
    /// Only on the last chunk of a stream asked with `include_usage` (whose `choices` is empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkChoice {
    pub index: usize,
    pub delta: Delta,
    pub finish_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<ChoiceLogprobs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
    /// As [`Choice::partial_bytes`], on a choice's last chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_bytes: Option<Vec<u8>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Delta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<DeltaToolCall>>,
}

/// Every error's body: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub param: Option<String>,
    #[serde(default)]
    pub code: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_reads_strings_parts_and_unknown_fields() {
        let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"},
            {"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"data:x"}}]},
            {"role":"assistant","content":null}],"stop":"x","n":2,"tools":[]}"#;
        let r: ChatRequest = serde_json::from_str(body).unwrap();
        assert_eq!(r.messages[0].content, Content::Text("hi".into()));
        assert!(matches!(&r.messages[1].content, Content::Parts(p) if p.len() == 2));
        assert_eq!(r.messages[2].content, Content::Empty);
        assert_eq!(r.stop.unwrap().strings(), ["x"]);
        assert_eq!(r.n, Some(2));
        assert_eq!(r.tools, Some(vec![]));
        assert!(r.other.is_empty());
    }
}
