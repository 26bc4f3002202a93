//! The model as a rollout policy: requests rendered through its chat template (as the
//! training layout lays turns out), answered by batched generation with log-probs.

use std::collections::HashMap;
use std::rc::Rc;
use vagen_model::{
    Engine, EngineKind, EngineOptions, EngineRequest, EngineStats, GenerateOptions, Generation, Model, Prompt, Refresh,
    RequestId,
};
use vagen_rollout::{
    AnswerOrigin, ChatTokenizer, ContextOverflow, Image, Message, OutOfContext, Policy, PolicyError, PromptIds,
    Request, Response, StreamingPolicy, prompt_ids,
};

/// The layout's view of a model: its chat template and tokenizer, and for a VL model the
/// tokens each image takes.
pub struct ChatModel<'a>(pub &'a Model);

impl std::ops::Deref for ChatModel<'_> {
    type Target = Model;
    fn deref(&self) -> &Model {
        self.0
    }
}

impl ChatTokenizer for ChatModel<'_> {
    fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String, String> {
        let template = self.chat_template().map_err(|e| e.to_string())?;
        match self.vision {
            Some(_) => template.render_with_images(messages, add_generation_prompt),
            None => template.render(messages, add_generation_prompt),
        }
        .map_err(|e| e.to_string())
    }
    fn render_with_tools(
        &self,
        messages: &[Message],
        tools: &[serde_json::Value],
        add_generation_prompt: bool,
    ) -> Result<String, String> {
        let template = self.chat_template().map_err(|e| e.to_string())?;
        template.render_chat(messages, tools, self.vision.is_some(), add_generation_prompt).map_err(|e| e.to_string())
    }
    fn image_pad(&self) -> Option<u32> {
        self.vision.as_ref().map(|v| v.config.image_token_id)
    }
    fn image_tokens(&self, image: &Image) -> Result<usize, String> {
        self.vision().and_then(|v| v.processor.tokens(image)).map_err(|e| e.to_string())
    }
    fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        self.tokenizer.encode(text).map_err(|e| e.to_string())
    }
    fn decode(&self, ids: &[u32]) -> Result<String, String> {
        self.tokenizer.decode(ids).map_err(|e| e.to_string())
    }
    fn end_of_turn(&self) -> Option<u32> {
        self.tokenizer.token_to_id("<|im_end|>").or_else(|| self.eos_token_ids.first().copied())
    }
}

/// A language model through its chat template and the generation engine.
pub struct ModelPolicy {
    pub model: Rc<Model>,
    pub options: GenerateOptions,
    /// Prompt plus answer tokens a turn may take (RAGEN's `max_context_window`): each
    /// answer is capped at what its prompt leaves, and a prompt that leaves nothing ends its
    /// episode (`Response::out_of_context`) instead of failing the batch.
    pub context_window: usize,
    pub overflow: ContextOverflow,
    /// Image tokens a prompt may hold (0: no limit): a first turn past it is an error, a
    /// later one ends its episode as a prompt past the window does (or, with
    /// [`ContextOverflow::DropOldest`], drops the oldest turns with their images).
    pub max_image_tokens: usize,
    /// The rollout engine (keys and values kept across turns, continuous batching); `None`:
    /// one static batch per turn.
    engine: Option<Engine>,
    /// The trajectory of each request the engine runs for [`StreamingPolicy`], and answers
    /// given without it (out of context) not yet polled.
    running: HashMap<RequestId, usize>,
    ready: Vec<(usize, Response)>,
}

impl ModelPolicy {
    /// The whole of the model's window (`max_position_embeddings`), the continuous engine
    /// with its default options.
    pub fn new(model: Rc<Model>, options: GenerateOptions) -> Self {
        let context_window = model.lm.config().max_position_embeddings;
        let engine = Some(Engine::new(EngineOptions::default()));
        ModelPolicy {
            model,
            options,
            context_window,
            overflow: ContextOverflow::End,
            max_image_tokens: 0,
            engine,
            running: HashMap::new(),
            ready: vec![],
        }
    }

    /// Generation by the engine `options` name.
    pub fn with_engine(mut self, options: &EngineOptions) -> Self {
        self.engine = match options.kind {
            EngineKind::Continuous => Some(Engine::new(options.clone())),
            EngineKind::Static => None,
        };
        self
    }

    /// Weights that change while the engine runs ([`Engine::set_refresh`]); refused on the
    /// static path.
    pub fn with_refresh(mut self, refresh: Refresh) -> Result<Self, String> {
        let engine = self.engine.as_mut().ok_or("new weights during a rollout need the continuous engine")?;
        engine.set_refresh(refresh);
        Ok(self)
    }

    /// What the engine did over this policy's rollouts (`None` on the static path).
    pub fn engine_stats(&self) -> Option<EngineStats> {
        self.engine.as_ref().map(Engine::stats)
    }

    /// A smaller window (e.g. the longest sequence training lays out); never past the
    /// model's own.
    pub fn with_context_window(mut self, tokens: usize) -> Self {
        self.context_window = self.context_window.min(tokens);
        self
    }

    pub fn with_overflow(mut self, overflow: ContextOverflow) -> Self {
        self.overflow = overflow;
        self
    }

    pub fn with_max_image_tokens(mut self, tokens: usize) -> Self {
        self.max_image_tokens = tokens;
        self
    }

    fn over_images(&self, p: &PromptIds) -> bool {
        self.max_image_tokens > 0 && p.image_tokens > self.max_image_tokens
    }

    /// `r`'s prompt; with [`ContextOverflow::DropOldest`], without as many of its oldest
    /// turns as it takes to leave room for a full answer within the image budget.
    fn prompt(&self, r: &Request) -> Result<PromptIds, PolicyError> {
        let mut prompt = prompt_of(self.model.as_ref(), r, 0)?;
        if self.overflow == ContextOverflow::DropOldest {
            let mut dropped = 0;
            while (self.context_window.saturating_sub(prompt.ids.len()) < self.options.max_new_tokens
                || self.over_images(&prompt))
                && dropped < r.history.len()
            {
                dropped += 1;
                prompt = prompt_of(self.model.as_ref(), r, dropped)?;
            }
        }
        if r.history.is_empty() && self.over_images(&prompt) {
            return Err(PolicyError::Prompt(format!(
                "trajectory {} turn {}: the observation's images take {} tokens, more than max_image_tokens {}",
                r.trajectory, r.turn, prompt.image_tokens, self.max_image_tokens
            )));
        }
        Ok(prompt)
    }

    /// Tokens prompt `p` leaves for the answer (0: none, or over the image budget).
    fn room(&self, p: &PromptIds) -> usize {
        if self.over_images(p) { 0 } else { self.context_window.saturating_sub(p.ids.len()) }
    }

    fn out_of_context(&self, p: &PromptIds) -> Response {
        let out = OutOfContext { prompt_tokens: p.ids.len(), window: self.context_window };
        Response { out_of_context: Some(out), ..Response::default() }
    }

    /// The engine's request for `r` (prompt `p`, `room` tokens left): the trajectory's own
    /// row, its own draw stream, so what it samples does not depend on which requests
    /// share its batch.
    fn engine_request(&self, r: &Request, p: &PromptIds, room: usize) -> Result<EngineRequest, PolicyError> {
        let prompt = self.model_prompt(p)?;
        Ok(EngineRequest {
            key: r.trajectory as u64,
            ids: prompt.ids,
            images: prompt.images,
            max_new_tokens: room.min(self.options.max_new_tokens),
            seed: self.options.seed.rotate_left(5) ^ r.seed,
            adapter: 0,
        })
    }

    /// The prompt as the model takes it: a VL model's images turned into pixel values.
    fn model_prompt(&self, p: &PromptIds) -> Result<Prompt, PolicyError> {
        let pixels = match (&self.model.vision, p.images.is_empty()) {
            (_, true) => vec![],
            (Some(v), false) => p
                .images
                .iter()
                .map(|img| v.processor.process(img))
                .collect::<vagen_model::Result<_>>()
                .map_err(|e| PolicyError::Prompt(e.to_string()))?,
            (None, false) => unreachable!("a text-only model's layout holds no images"),
        };
        Ok(Prompt { ids: p.ids.clone(), images: pixels })
    }
}

impl Policy for ModelPolicy {
    fn name(&self) -> &'static str {
        "model"
    }
    fn begin_rollout(&mut self) {
        self.running.clear();
        self.ready.clear();
        if let Some(e) = &mut self.engine {
            e.reset();
        }
    }
    fn streaming(&mut self) -> Option<&mut dyn StreamingPolicy> {
        match self.engine {
            Some(_) => Some(self),
            None => None,
        }
    }
    fn respond(&mut self, requests: &[Request]) -> Result<Vec<Response>, PolicyError> {
        let prompts = requests.iter().map(|r| self.prompt(r)).collect::<Result<Vec<_>, _>>()?;
        let room: Vec<usize> = prompts.iter().map(|p| self.room(p)).collect();
        let fits: Vec<usize> = (0..prompts.len()).filter(|&i| room[i] > 0).collect();
        // One seed per batch, from the requests' own: the same rollout draws the same tokens.
        let seed = requests.iter().fold(self.options.seed, |acc, r| acc.rotate_left(5) ^ r.seed);
        let options = GenerateOptions {
            seed,
            max_new_tokens_per_prompt: fits.iter().map(|&i| room[i].min(self.options.max_new_tokens)).collect(),
            ..self.options.clone()
        };
        let requests_for_engine = match self.engine {
            Some(_) => {
                Some(fits.iter().map(|&i| self.engine_request(&requests[i], &prompts[i], room[i])).collect::<Result<
                    Vec<_>,
                    PolicyError,
                >>(
                )?)
            }
            None => None,
        };
        let generations = match (requests_for_engine, &mut self.engine) {
            (Some(batch), Some(engine)) => self.model.generate_with(engine, &batch, &options),
            _ => {
                let batch: Vec<Prompt> =
                    fits.iter().map(|&i| self.model_prompt(&prompts[i])).collect::<Result<_, _>>()?;
                self.model.generate_vl(&batch, &options)
            }
        };
        let mut generations: std::vec::IntoIter<Generation> =
            generations.map_err(|e| PolicyError::Model(e.to_string()))?.into_iter();
        Ok((0..prompts.len())
            .map(|i| match room[i] {
                0 => self.out_of_context(&prompts[i]),
                _ => answer(generations.next().expect("one generation per prompt that fits")),
            })
            .collect())
    }
}

/// The continuous engine's step loop, driven by the rollout: each request joins the running
/// batch at the next step.
impl StreamingPolicy for ModelPolicy {
    fn submit(&mut self, request: Request) -> Result<(), PolicyError> {
        let prompt = self.prompt(&request)?;
        let room = self.room(&prompt);
        if room == 0 {
            self.ready.push((request.trajectory, self.out_of_context(&prompt)));
            return Ok(());
        }
        let asked = self.engine_request(&request, &prompt, room)?;
        let engine =
            self.engine.as_mut().ok_or_else(|| PolicyError::Model("the static engine does not stream".into()))?;
        let id = engine.submit(&self.model, asked, &self.options).map_err(|e| PolicyError::Model(e.to_string()))?;
        self.running.insert(id, request.trajectory);
        Ok(())
    }

    fn poll(&mut self) -> Result<Vec<(usize, Response)>, PolicyError> {
        let mut out = std::mem::take(&mut self.ready);
        if let Some(engine) = self.engine.as_mut().filter(|_| !self.running.is_empty()) {
            let step = engine.step(&self.model).map_err(|e| {
                self.running.clear();
                PolicyError::Model(e.to_string())
            })?;
            for (id, g) in step.finished {
                let trajectory = self.running.remove(&id).expect("the engine runs only this policy's requests");
                out.push((trajectory, answer(g)));
            }
        }
        Ok(out)
    }

    fn pending(&self) -> usize {
        self.running.len() + self.ready.len()
    }
}

/// A generation as the rollout's response.
fn answer(g: Generation) -> Response {
    Response {
        text: g.text,
        origin: AnswerOrigin::Model,
        token_ids: Some(g.token_ids),
        logprobs: Some(g.logprobs),
        versions: (!g.versions.is_empty()).then_some(g.versions),
        ..Response::default()
    }
}

/// `r`'s prompt as `layout` lays turns out, leaving out its first `skip` earlier turns with
/// their images.
fn prompt_of(model: &Model, r: &Request, skip: usize) -> Result<PromptIds, PolicyError> {
    let history = &r.history[skip.min(r.history.len())..];
    prompt_ids(&ChatModel(model), &r.system, history, &r.user, &r.images)
        .map_err(|e| PolicyError::Prompt(format!("trajectory {} turn {}: {e}", r.trajectory, r.turn)))
}
