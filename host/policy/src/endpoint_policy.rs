//! A model behind an OpenAI-compatible endpoint as a rollout policy (`eval --policy
//! openai`): each request becomes a chat completion (system, the kept turns, the user
//! message with its images as `data:` URLs where its `<image>` markers stand), sampled with
//! the request's own seed. An answer the endpoint never gives (after its retries) loses that
//! episode alone ([`Response::lost`]), counted apart from the env's outcomes.

use crate::endpoint::{CallError, Endpoint, data_url};
use crate::openai::{ChatMessage, ChatRequest, ChatResponse, Content, ImageUrl, Part, Stop};
use serde_json::Value;
use std::sync::Arc;
use vagen_rollout::{AnswerOrigin, IMAGE_MARKER, Image, Policy, PolicyError, Request, Response};

pub struct EndpointPolicy {
    /// Shared, so its owner can read its counts.
    pub endpoint: Arc<Endpoint>,
    /// 0: greedy.
    pub temperature: f64,
    pub max_tokens: usize,
    /// Where answers end (the format's `</answer>`): sent as `stop`, and put back at the
    /// end of an answer a server cut before it (OpenAI's servers leave it out; ours keeps it).
    pub stop: Vec<String>,
}

impl EndpointPolicy {
    fn body(&self, r: &Request) -> Value {
        let mut messages = vec![ChatMessage::new("system", Content::Text(r.system.clone()))];
        for turn in &r.history {
            messages.push(ChatMessage::new("user", content(&turn.user, &turn.images)));
            messages.push(ChatMessage::new("assistant", Content::Text(turn.response.clone())));
        }
        messages.push(ChatMessage::new("user", content(&r.user, &r.images)));
        let request = ChatRequest {
            model: Some(self.endpoint.options.model.clone()),
            messages,
            max_tokens: Some(self.max_tokens as i64),
            temperature: Some(self.temperature),
            seed: Some(r.seed),
            stop: (!self.stop.is_empty()).then(|| Stop::Many(self.stop.clone())),
            ..ChatRequest::default()
        };
        serde_json::to_value(request).expect("plain data")
    }

    /// The answer's text as the format reads it, or why there is none.
    fn read(&self, answer: Result<ChatResponse, CallError>) -> Response {
        let choice = match answer.map(|a| a.choices.into_iter().next()) {
            Ok(Some(choice)) => choice,
            Ok(None) => {
                return Response::lost(format!("{}: an answer without choices", self.endpoint.completions_url()));
            }
            Err(why) => return Response::lost(why.message),
        };
        // No content (a refusal, a tool call) is an answer that says nothing: an invalid
        // turn of the model's, not a lost one.
        let mut text = choice.message.content.unwrap_or_default();
        if choice.finish_reason.as_deref() == Some("stop") {
            restore_stop(&mut text, &self.stop);
        }
        Response { token_ids: choice.token_ids, ..Response::text(text).by(AnswerOrigin::Model) }
    }
}

/// `text` split at its `<image>` markers, each followed by its image as a `data:` URL;
/// plain text when it has none.
fn content(text: &str, images: &[Arc<Image>]) -> Content {
    if images.is_empty() {
        return Content::Text(text.to_string());
    }
    let mut parts = vec![];
    let mut images = images.iter();
    for (k, piece) in text.split(IMAGE_MARKER).enumerate() {
        if k > 0 {
            let url = images.next().map(|i| data_url(i)).unwrap_or_default();
            parts.push(Part::ImageUrl { image_url: ImageUrl { url, detail: None } });
        }
        if !piece.is_empty() {
            parts.push(Part::Text { text: piece.to_string() });
        }
    }
    Content::Parts(parts)
}

/// An answer stopped at one of `stop` but returned without it (OpenAI's rule): the stop
/// string put back where an opened tag (`<answer>` for `</answer>`) waits for it.
fn restore_stop(text: &mut String, stop: &[String]) {
    if stop.iter().any(|s| text.ends_with(s.as_str())) {
        return;
    }
    for s in stop {
        let open = s.replacen("</", "<", 1);
        let (opened, closed) = (text.rfind(open.as_str()), text.rfind(s.as_str()));
        if s.starts_with("</") && opened.is_some() && closed.is_none_or(|c| Some(c) < opened) {
            text.push_str(s);
            return;
        }
    }
}

impl Policy for EndpointPolicy {
    fn name(&self) -> &'static str {
        "openai"
    }
    fn respond(&mut self, requests: &[Request]) -> Result<Vec<Response>, PolicyError> {
        let bodies: Vec<Value> = requests.iter().map(|r| self.body(r)).collect();
        let answers = self.endpoint.fan_out(bodies.len(), |i| self.endpoint.complete(&bodies[i]));
        // A refusal of the key, the model or the URL would lose every episode: the run stops
        // on it instead, naming it.
        if let Some(Err(e)) = answers.iter().find(|a| a.as_ref().is_err_and(CallError::is_setup)) {
            return Err(PolicyError::Io { policy: "openai", message: e.message.clone() });
        }
        Ok(answers.into_iter().map(|a| self.read(a)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_string_comes_back_only_where_its_tag_was_opened() {
        let stop = vec!["</answer>".to_string()];
        for (given, kept) in [
            ("<think>x</think><answer>Left", "<think>x</think><answer>Left</answer>"),
            ("<answer>Left</answer>", "<answer>Left</answer>"),
            ("no tags at all", "no tags at all"),
            ("<answer>a</answer> then <answer>b", "<answer>a</answer> then <answer>b</answer>"),
        ] {
            let mut text = given.to_string();
            restore_stop(&mut text, &stop);
            assert_eq!(text, kept);
        }
    }

    #[test]
    fn images_go_where_their_markers_stand() {
        let image = Arc::new(Image { width: 1, height: 1, rgb: vec![0, 0, 0] });
        let Content::Parts(parts) = content(&format!("see {IMAGE_MARKER} now"), &[image]) else { panic!() };
        assert!(matches!(&parts[0], Part::Text { text } if text == "see "));
        assert!(
            matches!(&parts[1], Part::ImageUrl { image_url } if image_url.url.starts_with("data:image/png;base64,"))
        );
        assert!(matches!(&parts[2], Part::Text { text } if text == " now"));
        assert_eq!(content("plain", &[]), Content::Text("plain".into()));
    }
}
