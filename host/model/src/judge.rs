//! The local judge: reward functions' judge requests answered by a model of ours through the
//! rollout engine, every request of a call in one batched generation.

use crate::{Engine, EngineOptions, EngineRequest, GenerateOptions, IMAGE_MARKER, Image, Message, Model};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
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
    pub fn new(model: Model) -> crate::Result<Self> {
        let engine = Engine::new(EngineOptions::default())?;
        Ok(LocalJudge { inner: Mutex::new(Inner { model, engine }), calls: 0.into(), requests: 0.into() })
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

/// A seed from the prompt: the same request draws the same answer.
fn seed_of(ids: &[u32]) -> u64 {
    ids.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &t| (h ^ t as u64).wrapping_mul(0x1000_0000_01b3))
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
            let mut batch = vec![];
            let mut which = vec![];
            for (i, r) in requests.iter().enumerate().filter(|(_, r)| r.temperature.to_bits() == bits) {
                let (messages, images) = messages(r);
                match model.encode_chat_images(&messages, &images, true) {
                    Ok(p) => {
                        let seed = seed_of(&p.ids);
                        let max_new_tokens = (r.max_tokens as usize).max(1);
                        batch.push(EngineRequest { key: i as u64, ids: p.ids, images: p.images, max_new_tokens, seed });
                        which.push(i);
                    }
                    Err(e) => out[i] = Err(format!("the local judge cannot read this request: {e}")),
                }
            }
            if batch.is_empty() {
                continue;
            }
            let longest = batch.iter().map(|r| r.max_new_tokens).max().unwrap_or(1);
            let options =
                GenerateOptions { max_new_tokens: longest, temperature: f64::from_bits(bits), ..Default::default() };
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.requests.fetch_add(batch.len(), Ordering::SeqCst);
            // A judge's prompts are not a trajectory's next turn: nothing to keep between calls.
            engine.clear();
            match model.generate_with(engine, &batch, &options) {
                Ok(generations) => {
                    for (i, g) in which.into_iter().zip(generations) {
                        out[i] = Ok(g.text);
                    }
                }
                Err(e) => {
                    for i in which {
                        out[i] = Err(format!("the local judge failed: {e}"));
                    }
                }
            }
        }
        out
    }
}
