//! The local judge: reward functions' judge requests answered by a model of the run, through
//! the rollout engine (`Model::answer_chats`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use vagen_model::{Chat, ChatError, Engine, EngineOptions, GenerateOptions, IMAGE_MARKER, Image, Message, Model};
use vagen_runtime::reward::{Judge, JudgePart, JudgeRequest};

/// A model answering judge requests; its own device and weights, never trained.
pub struct LocalJudge {
    inner: Mutex<Inner>,
    calls: AtomicUsize,
    requests: AtomicUsize,
}

struct Inner {
    model: Model,
    engine: Engine,
}

impl LocalJudge {
    pub fn new(model: Model) -> Self {
        let engine = Engine::new(EngineOptions::default());
        LocalJudge { inner: Mutex::new(Inner { model, engine }), calls: 0.into(), requests: 0.into() }
    }

    /// Generation calls made so far (one per distinct temperature in a judge call).
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Requests answered so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// A request's messages as the chat template takes them: images as `<image>` markers.
fn messages(r: &JudgeRequest) -> (Vec<Message>, Vec<Image>) {
    let mut images = vec![];
    let messages = r
        .messages
        .iter()
        .map(|m| {
            let mut text = String::new();
            for part in &m.content {
                match part {
                    JudgePart::Text(t) => text.push_str(t),
                    JudgePart::Image(i) => {
                        text.push_str(IMAGE_MARKER);
                        images.push(i.clone());
                    }
                }
            }
            Message::new(m.role.as_str(), text)
        })
        .collect();
    (messages, images)
}

impl Judge for LocalJudge {
    fn complete(&self, requests: &[JudgeRequest]) -> Vec<Result<String, String>> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let Inner { model, engine } = &mut *inner;
        let mut out: Vec<Result<String, String>> = vec![Err(String::new()); requests.len()];
        // One generation per temperature (a reward function's requests share one).
        let mut temperatures: Vec<u64> = requests.iter().map(|r| r.temperature.to_bits()).collect();
        temperatures.sort_unstable();
        temperatures.dedup();
        for bits in temperatures {
            let which: Vec<usize> =
                (0..requests.len()).filter(|&i| requests[i].temperature.to_bits() == bits).collect();
            let chats: Vec<Chat> = which
                .iter()
                .map(|&i| {
                    let (messages, images) = messages(&requests[i]);
                    Chat::new(messages, images, requests[i].max_tokens as usize, None)
                })
                .collect();
            let options = GenerateOptions { temperature: f64::from_bits(bits), ..Default::default() };
            let answered = model.answer_chats(engine, &chats, &options);
            if answered.generated > 0 {
                self.calls.fetch_add(1, Ordering::SeqCst);
                self.requests.fetch_add(answered.generated, Ordering::SeqCst);
            }
            for (&i, answer) in which.iter().zip(answered.answers) {
                out[i] = match answer {
                    Ok(a) => Ok(a.generation.text),
                    Err(ChatError::Prompt(e)) => Err(format!("the local judge cannot read this request: {e}")),
                    Err(ChatError::Generation(e)) => Err(format!("the local judge failed: {e}")),
                };
            }
        }
        out
    }

    fn counts(&self) -> Vec<(&'static str, usize)> {
        vec![("calls", self.calls()), ("requests", self.requests())]
    }
}
