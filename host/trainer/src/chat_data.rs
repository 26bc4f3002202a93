//! SFT data in OpenAI's chat format (`[sft] data = "chats.jsonl"`): a conversation a line,
//! `{"messages": [...], "tools": [...]}` with system, user, assistant (tool calls included)
//! and tool messages, images as `data:` URLs or files beside the data file. Each is laid
//! out by the chat template with the loss on its assistant messages only
//! (`vagen_rollout::layout_chat`), the way TRL's `assistant_only_loss` masks them.

use crate::config::TrainConfig;
use crate::step_batch::{Source, StepBatch};
use anyhow::{Context, Result, bail};
use base64::Engine as _;
use rand_core::{Rng, SeedableRng};
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vagen_model::{ChatTemplate, IMAGE_MARKER, Image, Message, Model};
use vagen_policy::ChatModel;
use vagen_policy::openai::{ChatMessage, Content, Part};
use vagen_rollout::{LayoutOptions, layout_chat};

/// The conversations of a chat file, read and checked once.
pub struct ChatData {
    path: PathBuf,
    chats: Vec<Conversation>,
}

struct Conversation {
    /// The line it was read from (1-based), for errors.
    line: usize,
    messages: Vec<Message>,
    tools: Vec<Value>,
    images: Vec<Arc<Image>>,
}

/// One line of the file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    messages: Vec<ChatMessage>,
    #[serde(default)]
    tools: Vec<Value>,
}

impl ChatData {
    /// The file's conversations; an error names the line and what is wrong with it. A model
    /// without vision (`vision = false`) takes no images.
    pub fn load(path: &Path, vision: bool) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading sft.data {}", path.display()))?;
        let folder = path.parent().unwrap_or(Path::new("."));
        let mut chats = vec![];
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let at = || format!("{} line {}", path.display(), i + 1);
            let parsed: Line = serde_json::from_str(line).with_context(|| format!("{}: not a chat", at()))?;
            let chat = conversation(parsed, folder, i + 1).with_context(at)?;
            if !vision && !chat.images.is_empty() {
                bail!("{}: it holds images, and the model has no vision tower", at());
            }
            chats.push(chat);
        }
        if chats.is_empty() {
            bail!("sft.data {}: no conversations in it", path.display());
        }
        Ok(ChatData { path: path.to_path_buf(), chats })
    }

    /// The texts a tokenizer learning this data's words should see: each conversation as
    /// `template` writes it (tools and calls spelt as they will be in prompts).
    pub fn texts(&self, template: &ChatTemplate) -> Result<Vec<String>> {
        let render = |c: &Conversation| template.render_chat(&c.messages, &c.tools, false, false);
        let at = |c: &Conversation| format!("sft.data {} line {}", self.path.display(), c.line);
        self.chats.iter().map(|c| render(c).with_context(|| at(c))).collect()
    }

    /// Refuses, naming its line, a conversation that cannot be laid out for `model` (a
    /// first answer past `rollout.max_sequence_tokens`, a template that does not take it):
    /// before the first step, on every rank alike, not when one rank meets it mid-run.
    pub fn check(&self, cfg: &TrainConfig, model: &Model) -> Result<()> {
        let options = layout_options(cfg);
        for c in &self.chats {
            layout_chat(&ChatModel(model), &c.messages, &c.tools, &c.images, &options)
                .with_context(|| format!("sft.data {} line {}", self.path.display(), c.line))?;
        }
        Ok(())
    }

    /// SFT step `k`'s conversations (`n` a step), laid out for `model`: the file read in an
    /// order drawn anew for each pass over it from `seed`, the step's block of that order
    /// (and within it this rank's share, `range`).
    pub fn step_batch(
        &self,
        cfg: &TrainConfig,
        model: &Model,
        k: u64,
        n: usize,
        share: std::ops::Range<usize>,
    ) -> Result<StepBatch> {
        let options = layout_options(cfg);
        let mut batch = StepBatch::new();
        let mut orders: Vec<(usize, Vec<usize>)> = vec![];
        for slot in share {
            let at = k as usize * n + slot;
            let (pass, index) = (at / self.chats.len(), at % self.chats.len());
            if !orders.iter().any(|(p, _)| *p == pass) {
                orders.push((pass, order(self.chats.len(), cfg.schedule.seed, pass as u64)));
            }
            let this = &orders.iter().find(|(p, _)| *p == pass).expect("just made").1;
            let chat = &self.chats[this[index]];
            let mut seq = layout_chat(&ChatModel(model), &chat.messages, &chat.tools, &chat.images, &options)
                .with_context(|| format!("sft.data {} line {}", self.path.display(), chat.line))?;
            // Conversations have no turns of an episode (rewards, origins): only the loss.
            seq.turn_ends.clear();
            batch.push(seq, Source { episode: slot, group: slot as u64, seed: chat.line as u64, turns: vec![] });
        }
        Ok(batch)
    }
}

fn layout_options(cfg: &TrainConfig) -> LayoutOptions {
    LayoutOptions {
        max_tokens: cfg.rollout.sequences.max_sequence_tokens,
        max_image_tokens: cfg.rollout.sequences.max_image_tokens,
        ..LayoutOptions::default()
    }
}

/// A pass's order of `len` conversations: a Fisher-Yates shuffle drawn from `seed` and the
/// pass.
fn order(len: usize, seed: u64, pass: u64) -> Vec<usize> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ pass.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut out: Vec<usize> = (0..len).collect();
    for i in (1..len).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        out.swap(i, j);
    }
    out
}

/// A line's messages as the chat template takes them, its images decoded.
fn conversation(line: Line, folder: &Path, number: usize) -> Result<Conversation> {
    let mut images = vec![];
    let mut messages = vec![];
    for (i, m) in line.messages.into_iter().enumerate() {
        let role = m.template_role().map_err(|e| anyhow::anyhow!("messages[{i}].{e}"))?;
        let calls = m.template_tool_calls().map_err(|e| anyhow::anyhow!("messages[{i}]: {e}"))?;
        let text = match m.content {
            Content::Text(s) => s,
            Content::Empty => String::new(),
            Content::Parts(parts) => {
                let mut text = String::new();
                for (k, p) in parts.into_iter().enumerate() {
                    match p {
                        Part::Text { text: t } => text.push_str(&t),
                        Part::ImageUrl { image_url } => {
                            if role != "user" {
                                bail!("messages[{i}].content[{k}]: images are accepted in user messages only");
                            }
                            let image = read_image(&image_url.url, folder)
                                .with_context(|| format!("messages[{i}].content[{k}]"))?;
                            images.push(Arc::new(image));
                            text.push_str(IMAGE_MARKER);
                        }
                    }
                }
                text
            }
        };
        let mut message = Message::new(role, text);
        message.tool_calls = calls;
        message.tool_call_id = m.tool_call_id;
        messages.push(message);
    }
    if !messages.iter().any(|m| m.role == "assistant") {
        bail!("no assistant message: nothing to learn");
    }
    Ok(Conversation { line: number, messages, tools: line.tools, images })
}

/// An image from a `data:image/...;base64,` URL or a file (relative to the data file).
fn read_image(url: &str, folder: &Path) -> Result<Image> {
    let bytes = match url.strip_prefix("data:") {
        Some(rest) => {
            let (_, data) = rest.split_once(";base64,").context("a data URL without ;base64,")?;
            base64::engine::general_purpose::STANDARD.decode(data).context("bad base64")?
        }
        None => {
            let path = folder.join(url.strip_prefix("file://").unwrap_or(url));
            std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?
        }
    };
    let img = image::load_from_memory(&bytes).context("not an image")?.to_rgb8();
    Ok(Image { width: img.width(), height: img.height(), rgb: img.into_raw() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pass_is_an_order_of_the_whole_file() {
        for pass in 0..4 {
            let mut o = order(10, 7, pass);
            assert_eq!(o, order(10, 7, pass), "the same seed and pass draw the same order");
            o.sort();
            assert_eq!(o, (0..10).collect::<Vec<_>>());
        }
        assert_ne!(order(10, 7, 0), order(10, 7, 1));
    }

    #[test]
    fn the_loss_covers_each_assistant_message_as_the_template_writes_it() {
        let dir = tempfile::tempdir().unwrap();
        let calc =
            serde_json::json!({"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}});
        let call = serde_json::json!({"id": "c1", "type": "function",
                                      "function": {"name": "calc", "arguments": "{\"expression\":\"3 + 4\"}"}});
        let line = serde_json::json!({"tools": [calc], "messages": [
            {"role": "user", "content": "What is 3 + 4?"},
            {"role": "assistant", "content": null, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "7"},
            {"role": "assistant", "content": "It is 7."}]});
        let path = dir.path().join("chats.jsonl");
        std::fs::write(&path, line.to_string()).unwrap();
        let data = ChatData::load(&path, false).unwrap();
        let model = vagen_model::default_model(0, Default::default()).unwrap();
        let c = &data.chats[0];
        let seq = layout_chat(&ChatModel(&model), &c.messages, &c.tools, &c.images, &LayoutOptions::default()).unwrap();
        let mut answers = vec![];
        let mut start = None;
        for (i, &m) in seq.loss_mask.iter().chain([false].iter()).enumerate() {
            match (m, start) {
                (true, None) => start = Some(i),
                (false, Some(s)) => {
                    answers.push(model.tokenizer.decode(&seq.ids[s..i]).unwrap());
                    start = None;
                }
                _ => {}
            }
        }
        // The arguments as the template spells them (Python's separators), whatever the file's.
        let called =
            "<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expression\": \"3 + 4\"}}\n</tool_call><|im_end|>";
        assert_eq!(answers, [called, "It is 7.<|im_end|>"]);
        // And the whole sequence is the rendered conversation, up to the last end of turn.
        let text = model.chat_template().unwrap().render_chat(&c.messages, &c.tools, false, false).unwrap();
        assert_eq!(model.tokenizer.decode(&seq.ids).unwrap(), text.strip_suffix('\n').unwrap());
        assert_eq!(data.texts(model.chat_template().unwrap()).unwrap(), [text]);
    }

    #[test]
    fn images_are_read_from_data_urls_and_files_beside_the_data() {
        let dir = tempfile::tempdir().unwrap();
        let mut png = std::io::Cursor::new(vec![]);
        image::RgbImage::new(3, 2).write_to(&mut png, image::ImageFormat::Png).unwrap();
        std::fs::write(dir.path().join("a.png"), png.get_ref()).unwrap();
        let url = format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(png.get_ref()));
        let line = serde_json::json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": "Both:"}, {"type": "image_url", "image_url": {"url": "a.png"}},
                                         {"type": "image_url", "image_url": {"url": url}}]},
            {"role": "assistant", "content": "Two."}]});
        let path = dir.path().join("chats.jsonl");
        std::fs::write(&path, line.to_string()).unwrap();
        let data = ChatData::load(&path, true).unwrap();
        let chat = &data.chats[0];
        assert_eq!(chat.messages[0].content, "Both:<image><image>");
        assert_eq!(chat.images.iter().map(|i| (i.width, i.height)).collect::<Vec<_>>(), [(3, 2), (3, 2)]);
        let err = format!("{:#}", ChatData::load(&path, false).err().unwrap());
        assert!(err.contains("no vision tower"), "{err}");
    }

    #[test]
    fn a_bad_line_is_named_with_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        for (line, says) in [
            (r#"{"messages": [{"role": "user", "content": "hi"}]}"#, "no assistant message"),
            (r#"{"messages": [{"role": "robot", "content": "hi"}]}"#, "role \"robot\""),
            (r#"{"messages": [], "tool": []}"#, "not a chat"),
            (
                r#"{"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}]}"#,
                "arguments: not a JSON object",
            ),
            (
                r#"{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "missing.png"}}]}, {"role": "assistant", "content": "x"}]}"#,
                "missing.png",
            ),
        ] {
            let path = dir.path().join("chats.jsonl");
            std::fs::write(&path, format!("\n{line}\n")).unwrap();
            let err = format!("{:#}", ChatData::load(&path, true).err().expect(line));
            assert!(err.contains("chats.jsonl line 2") && err.contains(says), "{line}: {err}");
        }
    }
}
