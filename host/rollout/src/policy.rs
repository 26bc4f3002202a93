//! Who writes the responses: a batch of conversations in, a batch of responses out.
//! Random and oracle answers are wrapped in the run's format, so every policy goes through
//! the same parse → step path as a model.

use crate::{AssistantTurn, Format, prompt_ids};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::rc::Rc;
use std::sync::Arc;
use vagen_model::{GenerateOptions, Message, Model};
use vagen_runtime::{ActionSpace, Manifest, random_answer};

/// One conversation waiting for its next assistant turn.
#[derive(Clone)]
pub struct Request {
    /// Which trajectory of the rollout, and which of its turns.
    pub trajectory: usize,
    /// The trajectory's group: episodes of one group share their seed.
    pub group: usize,
    pub turn: usize,
    /// The state this turn acts in: the key its `TurnRecord::state_key` will have.
    pub state: u64,
    pub messages: Vec<Message>,
    /// The ids each assistant message of `messages` was sampled as (`None` when its policy
    /// had no tokens): a model policy prompts with them rather than re-tokenising the text.
    pub sampled: Vec<Option<Vec<u32>>>,
    pub manifest: Arc<Manifest>,
    /// How the trajectory's instance reads actions (its config's, not the manifest's).
    pub actions: Arc<ActionSpace>,
    /// The env's expert answer, filled in when the policy asks for it.
    pub oracle: Option<String>,
    /// Derived from the episode seed and the turn: a policy's draws for this request.
    pub seed: u64,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Response {
    pub text: String,
    /// The sampled ids (and their log-probs) when the policy is a model.
    pub token_ids: Option<Vec<u32>>,
    pub logprobs: Option<Vec<f32>>,
    /// Set, with no answer, when the prompt left no room to answer in the policy's context
    /// window: the episode ends there, truncated for `context`, and is trained on as far
    /// as it went.
    pub out_of_context: Option<OutOfContext>,
}

/// A prompt that outgrew the context window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfContext {
    pub prompt_tokens: usize,
    pub window: usize,
}

impl Response {
    pub fn text(text: impl Into<String>) -> Self {
        Response { text: text.into(), ..Default::default() }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("the {policy} policy cannot act in {env}: {reason}")]
    Unsupported { policy: &'static str, env: String, reason: String },
    #[error("model: {0}")]
    Model(#[from] vagen_model::Error),
    #[error("building the prompt: {0}")]
    Prompt(String),
}

pub trait Policy {
    fn name(&self) -> &'static str;
    /// Whether requests must carry the env's oracle answer.
    fn needs_oracle(&self) -> bool {
        false
    }
    fn respond(&mut self, requests: &[Request]) -> Result<Vec<Response>, PolicyError>;
}

/// 1..=max actions per turn drawn from the env's action names.
pub struct RandomPolicy {
    pub format: Format,
}

impl Policy for RandomPolicy {
    fn name(&self) -> &'static str {
        "random"
    }
    fn respond(&mut self, requests: &[Request]) -> Result<Vec<Response>, PolicyError> {
        requests
            .iter()
            .map(|r| {
                let mut rng = ChaCha8Rng::seed_from_u64(r.seed);
                let answer = random_answer(&r.actions, &mut rng).ok_or_else(|| PolicyError::Unsupported {
                    policy: "random",
                    env: r.manifest.name.clone(),
                    reason: "it takes free-form answers, not action names".into(),
                })?;
                Ok(Response::text(self.format.wrap(&answer)))
            })
            .collect()
    }
}

/// The env's own expert answers.
pub struct OraclePolicy {
    pub format: Format,
}

impl Policy for OraclePolicy {
    fn name(&self) -> &'static str {
        "oracle"
    }
    fn needs_oracle(&self) -> bool {
        true
    }
    fn respond(&mut self, requests: &[Request]) -> Result<Vec<Response>, PolicyError> {
        // No answer for a state (or no oracle) becomes an empty answer: an invalid turn.
        Ok(requests.iter().map(|r| Response::text(self.format.wrap(r.oracle.as_deref().unwrap_or("")))).collect())
    }
}

/// Fixed responses per trajectory, turn by turn (replays, tests); past the end, empty.
pub struct ScriptedPolicy {
    pub scripts: Vec<Vec<String>>,
}

impl Policy for ScriptedPolicy {
    fn name(&self) -> &'static str {
        "scripted"
    }
    fn respond(&mut self, requests: &[Request]) -> Result<Vec<Response>, PolicyError> {
        let pick =
            |r: &Request| self.scripts.get(r.trajectory).and_then(|s| s.get(r.turn)).cloned().unwrap_or_default();
        Ok(requests.iter().map(|r| Response::text(pick(r))).collect())
    }
}

/// What a prompt that leaves too little of the context window for an answer does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ContextOverflow {
    /// The answer gets what is left; a prompt that leaves nothing ends its episode,
    /// truncated for `context` (RAGEN's `max_context_window`).
    #[default]
    End,
    /// The prompt leaves out its oldest whole turns, one at a time, until a full answer
    /// (`max_new_tokens`) fits, or none is left; the episode goes on. It ends as with `end`
    /// only when the current observation alone leaves no room.
    DropOldest,
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
}

impl ModelPolicy {
    /// The whole of the model's window (`max_position_embeddings`).
    pub fn new(model: Rc<Model>, options: GenerateOptions) -> Self {
        let context_window = model.lm.config().max_position_embeddings;
        ModelPolicy { model, options, context_window, overflow: ContextOverflow::End }
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

    /// `r`'s prompt; with [`ContextOverflow::DropOldest`], without as many of its oldest
    /// turns as it takes to leave room for a full answer.
    fn prompt(&self, r: &Request) -> Result<Vec<u32>, PolicyError> {
        let mut prompt = prompt_of(self.model.as_ref(), r, 0)?;
        if self.overflow == ContextOverflow::DropOldest {
            let mut dropped = 0;
            while self.context_window.saturating_sub(prompt.len()) < self.options.max_new_tokens
                && dropped < r.sampled.len()
            {
                dropped += 1;
                prompt = prompt_of(self.model.as_ref(), r, dropped)?;
            }
        }
        Ok(prompt)
    }
}

impl Policy for ModelPolicy {
    fn name(&self) -> &'static str {
        "model"
    }
    fn respond(&mut self, requests: &[Request]) -> Result<Vec<Response>, PolicyError> {
        let prompts = requests.iter().map(|r| self.prompt(r)).collect::<Result<Vec<_>, _>>()?;
        let window = self.context_window;
        let room: Vec<usize> = prompts.iter().map(|p| window.saturating_sub(p.len())).collect();
        let fits: Vec<usize> = (0..prompts.len()).filter(|&i| room[i] > 0).collect();
        // One seed per batch, from the requests' own: the same rollout draws the same tokens.
        let seed = requests.iter().fold(self.options.seed, |acc, r| acc.rotate_left(5) ^ r.seed);
        let options = GenerateOptions {
            seed,
            max_new_tokens_per_prompt: fits.iter().map(|&i| room[i].min(self.options.max_new_tokens)).collect(),
            ..self.options.clone()
        };
        let batch: Vec<Vec<u32>> = fits.iter().map(|&i| prompts[i].clone()).collect();
        let mut generations = self.model.generate(&batch, &options)?.into_iter();
        Ok((0..prompts.len())
            .map(|i| {
                if room[i] == 0 {
                    let out = OutOfContext { prompt_tokens: prompts[i].len(), window };
                    return Response { out_of_context: Some(out), ..Response::default() };
                }
                let g = generations.next().expect("one generation per prompt that fits");
                Response {
                    text: g.text,
                    token_ids: Some(g.token_ids),
                    logprobs: Some(g.logprobs),
                    out_of_context: None,
                }
            })
            .collect())
    }
}

/// `messages` = system, (user, assistant)*, user: prompted as `layout` lays turns out,
/// leaving out the first `skip` (user, assistant) pairs.
fn prompt_of(model: &vagen_model::Model, r: &Request, skip: usize) -> Result<Vec<u32>, PolicyError> {
    let bad = |what: &str| PolicyError::Prompt(format!("trajectory {} turn {}: {what}", r.trajectory, r.turn));
    let [system, rest @ .., user] = r.messages.as_slice() else {
        return Err(bad("needs at least a system and a user message"));
    };
    if rest.len() % 2 != 0 || rest.len() / 2 != r.sampled.len() {
        return Err(bad("earlier turns must be (user, assistant) pairs, one sampled entry each"));
    }
    let history: Vec<AssistantTurn> = rest
        .chunks(2)
        .zip(&r.sampled)
        .skip(skip)
        .map(|(pair, ids)| AssistantTurn {
            user: pair[0].content.clone(),
            response: pair[1].content.clone(),
            token_ids: ids.clone(),
            logprobs: None,
            reward: 0.0,
        })
        .collect();
    prompt_ids(model, &system.content, &history, &user.content).map_err(|e| bad(&e.to_string()))
}
