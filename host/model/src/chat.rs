//! Chat templates rendered as transformers renders them: Jinja with `trim_blocks` and
//! `lstrip_blocks`, `raise_exception`, Python string methods, and a `tojson` that writes
//! what Python's `json.dumps` writes.

use crate::folder::{FileKind, ModelFolder};
use crate::{Error, Result};
use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, ErrorKind};
use std::collections::BTreeMap;
use vagen_abi::Message;

/// A model's chat template with the special-token strings it may refer to.
#[derive(Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    special_tokens: BTreeMap<String, String>,
}

impl ChatTemplate {
    /// `source` is the Jinja text; `special_tokens` are the `bos_token`, `eos_token`, …
    /// strings from `tokenizer_config.json`, passed to the template as transformers does.
    pub fn new(source: &str, special_tokens: BTreeMap<String, String>) -> Result<Self> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_fuel(Some(TEMPLATE_FUEL));
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |message: String| -> std::result::Result<Value, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
        });
        env.add_filter("tojson", tojson);
        env.add_template_owned("chat", source.to_string()).map_err(|e| Error::Template(describe(&e)))?;
        Ok(ChatTemplate { env, source: source.to_string(), special_tokens })
    }

    /// The template of a model folder: `chat_template.jinja` if present (newer transformers
    /// save it there), else `chat_template.json`'s `chat_template` (how transformers 4 saved
    /// a processor's, e.g. Qwen2.5-VL's), else `chat_template` in `tokenizer_config.json` (a
    /// string, or a list of named templates of which `default` is used). `None` when the
    /// folder has none of them.
    pub fn from_folder(folder: &ModelFolder) -> Result<Option<Self>> {
        let config_path = folder.path().join("tokenizer_config.json");
        let config = folder.read_json("tokenizer_config.json", FileKind::TokenizerConfig)?.unwrap_or_default();
        if let Some(text) = folder.read_text("chat_template.jinja", FileKind::ChatTemplate)? {
            return Self::new(&text, special_tokens(&config)).map(Some);
        }
        if let Some(v) = folder.read_json("chat_template.json", FileKind::ChatTemplate)? {
            let json = folder.path().join("chat_template.json");
            let source = v
                .get("chat_template")
                .and_then(|t| t.as_str())
                .ok_or_else(|| Error::Template(format!("{}: no \"chat_template\" string", json.display())))?;
            return Self::new(source, special_tokens(&config)).map(Some);
        }
        Self::from_tokenizer_config(&config).map_err(|e| Error::Template(format!("{}: {e}", config_path.display())))
    }

    /// The template held in a `tokenizer_config.json` value, if any.
    pub fn from_tokenizer_config(config: &serde_json::Value) -> Result<Option<Self>> {
        let source = match config.get("chat_template") {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .and_then(|t| t.get("template")?.as_str())
                .ok_or_else(|| Error::Template("no chat template named \"default\"".into()))?
                .to_string(),
            _ => return Ok(None),
        };
        Self::new(&source, special_tokens(config)).map(Some)
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The prompt text for `messages`; with `add_generation_prompt` it ends with the opening
    /// of an assistant turn, as `apply_chat_template(..., add_generation_prompt=True)`.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        self.render_chat(messages, &[], false, add_generation_prompt)
    }

    /// [`Self::render`] with each `<image>` marker in a message as an image entry of list
    /// content (`[{"type": "image"}, {"type": "text", "text": ...}]`), which is how
    /// multimodal templates (Qwen2.5-VL's) place `<|vision_start|><|image_pad|><|vision_end|>`.
    /// Messages without a marker stay plain strings.
    pub fn render_with_images(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        self.render_chat(messages, &[], true, add_generation_prompt)
    }

    /// The prompt of a chat in OpenAI's format: `tools` (as the client sent them) passed to
    /// the template as `tools`, as transformers passes them, and each tool call's arguments
    /// as the object they encode (a template writes them with `tojson`), as vLLM decodes
    /// them; JSON objects keep their keys' order, as Python's dicts do. `images`: as
    /// [`Self::render_with_images`].
    pub fn render_chat(
        &self,
        messages: &[Message],
        tools: &[serde_json::Value],
        images: bool,
        add_generation_prompt: bool,
    ) -> Result<String> {
        let messages: Vec<Value> = messages.iter().map(|m| message_value(m, images)).collect();
        let tools: Vec<Value> = tools.iter().map(Value::from_serialize).collect();
        let template = self.env.get_template("chat").map_err(|e| Error::Template(describe(&e)))?;
        let mut ctx: BTreeMap<String, Value> =
            self.special_tokens.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect();
        ctx.insert("messages".into(), Value::from(messages));
        // transformers passes `tools=None` when there are none, which templates test for.
        ctx.insert("tools".into(), if tools.is_empty() { Value::from(()) } else { Value::from(tools) });
        ctx.insert("add_generation_prompt".into(), Value::from(add_generation_prompt));
        let mut out = Capped(Vec::new());
        template.render_captured_to(ctx, &mut out).map_err(|e| match e.kind() {
            ErrorKind::WriteFailure => Error::Template(format!(
                "the rendered prompt passed {} MiB (a template writing without end?)",
                MAX_PROMPT_BYTES >> 20
            )),
            _ => Error::Template(describe(&e)),
        })?;
        String::from_utf8(out.0).map_err(|_| Error::Template("the template wrote invalid UTF-8".into()))
    }
}

/// Template instructions one render may run: a 100-turn conversation in Qwen2.5's template
/// takes about 6,300; a template looping without end stops here in about a second.
const TEMPLATE_FUEL: u64 = 20_000_000;

/// The most text one render may write: far past any context window.
const MAX_PROMPT_BYTES: usize = 16 << 20;

/// A writer that fails past [`MAX_PROMPT_BYTES`], which ends the render.
struct Capped(Vec<u8>);

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_PROMPT_BYTES {
            return Err(std::io::Error::other("prompt cap"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A message as the template reads it (transformers' dict): role, content (with `images`,
/// content holding `<image>` markers split into list entries), and where present the tool
/// calls (arguments decoded) and the id of the call a tool message answers.
fn message_value(m: &Message, images: bool) -> Value {
    let content = if images && m.content.contains(vagen_abi::IMAGE_MARKER) {
        let mut parts = vec![];
        for (i, piece) in m.content.split(vagen_abi::IMAGE_MARKER).enumerate() {
            if i > 0 {
                parts.push(Value::from_iter([("type", "image")]));
            }
            if !piece.is_empty() {
                parts.push(Value::from_iter([("type", "text"), ("text", piece)]));
            }
        }
        Value::from(parts)
    } else {
        Value::from(m.content.as_str())
    };
    let mut fields = vec![("role", Value::from(m.role.as_str())), ("content", content)];
    if !m.tool_calls.is_empty() {
        let calls = m.tool_calls.iter().map(|c| {
            // vLLM decodes the arguments before rendering (templates write them with
            // `tojson`); text that is not JSON stays text.
            let arguments = json_value(&c.arguments).unwrap_or_else(|_| Value::from(c.arguments.as_str()));
            let function = Value::from_iter([("name", Value::from(c.name.as_str())), ("arguments", arguments)]);
            Value::from_iter([
                ("id", Value::from(c.id.as_str())),
                ("type", Value::from("function")),
                ("function", function),
            ])
        });
        fields.push(("tool_calls", calls.collect()));
    }
    if let Some(id) = &m.tool_call_id {
        fields.push(("tool_call_id", Value::from(id.as_str())));
    }
    Value::from_iter(fields)
}

/// JSON text as a template value, objects keeping their keys' order.
fn json_value(text: &str) -> std::result::Result<Value, serde_json::Error> {
    serde_json::from_str(text)
}

/// `bos_token`, `eos_token`, … as plain strings (the config may hold `{"content": ...}`).
fn special_tokens(config: &serde_json::Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for key in ["bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"] {
        let value = match config.get(key) {
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(serde_json::Value::Object(o)) => o.get("content").and_then(|c| c.as_str()).map(String::from),
            _ => None,
        };
        if let Some(v) = value {
            out.insert(key.to_string(), v);
        }
    }
    out
}

fn describe(e: &minijinja::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

/// Python's `json.dumps(value, ensure_ascii=False, indent=indent)`: `", "` and `": "`
/// separators, non-ASCII kept, no HTML escaping (minijinja's own `tojson` escapes `<`).
fn tojson(value: Value, kwargs: Kwargs) -> std::result::Result<Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    // Written from the template's value itself, whose maps keep their order (as Python's
    // dicts, which `json.dumps` writes in order).
    let mut out = Vec::new();
    let result = match indent {
        Some(n) => {
            let pad = vec![b' '; n];
            let mut ser = serde_json::Serializer::with_formatter(&mut out, PyFormatter::indented(&pad));
            serde::Serialize::serialize(&value, &mut ser)
        }
        None => {
            let mut ser = serde_json::Serializer::with_formatter(&mut out, PyFormatter::compact());
            serde::Serialize::serialize(&value, &mut ser)
        }
    };
    result.map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    Ok(Value::from_safe_string(String::from_utf8(out).expect("serde_json writes UTF-8")))
}

/// serde_json formatter with Python's separators; indented like `json.dumps(indent=n)`.
struct PyFormatter<'a> {
    indent: Option<&'a [u8]>,
    depth: usize,
    has_value: bool,
}

impl<'a> PyFormatter<'a> {
    fn compact() -> Self {
        PyFormatter { indent: None, depth: 0, has_value: false }
    }
    fn indented(indent: &'a [u8]) -> Self {
        PyFormatter { indent: Some(indent), depth: 0, has_value: false }
    }
    fn newline<W: ?Sized + std::io::Write>(&self, w: &mut W) -> std::io::Result<()> {
        if let Some(pad) = self.indent {
            w.write_all(b"\n")?;
            for _ in 0..self.depth {
                w.write_all(pad)?;
            }
        }
        Ok(())
    }
    fn open<W: ?Sized + std::io::Write>(&mut self, w: &mut W, c: &[u8]) -> std::io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        w.write_all(c)
    }
    fn close<W: ?Sized + std::io::Write>(&mut self, w: &mut W, c: &[u8]) -> std::io::Result<()> {
        self.depth -= 1;
        if self.has_value {
            self.newline(w)?;
        }
        self.has_value = true;
        w.write_all(c)
    }
    fn item<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if !first {
            w.write_all(if self.indent.is_some() { b"," } else { b", " })?;
        }
        self.newline(w)
    }
}

impl serde_json::ser::Formatter for PyFormatter<'_> {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"[")
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"]")
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        self.item(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"{")
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"}")
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        self.item(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
    fn write_string_fragment<W: ?Sized + std::io::Write>(&mut self, w: &mut W, fragment: &str) -> std::io::Result<()> {
        w.write_all(fragment.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(source: &str) -> Result<String> {
        let template = ChatTemplate::new(source, BTreeMap::new())?;
        template.render(&[Message::user("hi")], true)
    }

    #[test]
    fn a_template_that_loops_or_writes_without_end_is_stopped() {
        let started = std::time::Instant::now();
        let err =
            render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}").unwrap_err();
        assert!(err.to_string().contains("fuel"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
        let err = render("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}").unwrap_err();
        assert!(err.to_string().contains("passed 16 MiB"), "{err}");
        assert_eq!(render("{{ messages[0].content }}").unwrap(), "hi");
    }
}
