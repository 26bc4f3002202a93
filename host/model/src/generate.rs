//! Batched generation with a KV cache: prompts of different lengths are left-padded, each row
//! gets its own positions, finished rows stop counting, and every sampled token comes back
//! with its log-prob.

use crate::image_processor::PixelValues;
use crate::qwen2::{attention_mask, right_pad};
use crate::sampling::Sampler;
use crate::vl::{MropePositions, Prompt, Vision, batch_positions};
use crate::{Error, KvCache, Model, Qwen2ForCausalLM, Result, Tokenizer};
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

/// How to continue the prompts. Temperature 0 is greedy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GenerateOptions {
    /// Tokens to generate at most per prompt.
    pub max_new_tokens: usize,
    /// Softmax temperature; 0 picks the most likely token.
    pub temperature: f64,
    /// Nucleus sampling: draw from the smallest set of tokens holding this much probability.
    pub top_p: f64,
    /// Draw from the k most likely tokens only; 0 means no limit.
    pub top_k: usize,
    /// Generation of a row ends once its text contains one of these (e.g. `</answer>`).
    pub stop: Vec<String>,
    /// Seeds the draws: same seed, prompts and options give the same tokens.
    pub seed: u64,
    /// A tighter cap per prompt (one entry each), e.g. what is left of each prompt's context
    /// window; empty: `max_new_tokens` for every prompt.
    pub max_new_tokens_per_prompt: Vec<usize>,
    /// The engine also records this many most likely tokens at each sampled position, with
    /// their log-probs under the distribution `logprobs` are under ([`Generation::top`]).
    pub top_logprobs: usize,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_new_tokens: 64,
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            stop: vec![],
            seed: 0,
            max_new_tokens_per_prompt: vec![],
            top_logprobs: 0,
        }
    }
}

/// How a run's policy samples: `[rollout]`'s sampling keys (the rest of that table is the
/// rollout's and the trainer's). Training rollouts and held-out evaluation differ in
/// temperature only; [`Sampling::options`] is the one conversion to [`GenerateOptions`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Sampling {
    /// Sampling temperature for training rollouts (RAGEN 1.0, VAGEN 0.7).
    pub temperature: f64,
    pub top_p: f64,
    /// 0: no top-k.
    pub top_k: usize,
    /// Temperature for evaluation (0: greedy; RAGEN 0.5), with no top-p or top-k.
    pub val_temperature: f64,
    /// Tokens per response at most (RAGEN 400).
    pub max_new_tokens: usize,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling { temperature: 1.0, top_p: 1.0, top_k: 0, val_temperature: 0.0, max_new_tokens: 128 }
    }
}

/// Which of a run's samplings: its training rollouts' or its held-out evaluation's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SamplingFor {
    Training,
    HeldOut,
}

impl Sampling {
    /// The generation options for `purpose`, ending answers at `stop`, drawing from `seed`.
    pub fn options(&self, purpose: SamplingFor, stop: Vec<String>, seed: u64) -> GenerateOptions {
        let (temperature, top_p, top_k) = match purpose {
            SamplingFor::Training => (self.temperature, self.top_p, self.top_k),
            SamplingFor::HeldOut => (self.val_temperature, 1.0, 0),
        };
        GenerateOptions {
            max_new_tokens: self.max_new_tokens,
            temperature,
            top_p,
            top_k,
            stop,
            seed,
            ..GenerateOptions::default()
        }
    }
}

impl GenerateOptions {
    /// Tokens prompt `i` may generate.
    pub fn cap(&self, i: usize) -> usize {
        self.max_new_tokens_per_prompt.get(i).map_or(self.max_new_tokens, |&c| c.min(self.max_new_tokens))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FinishReason {
    /// An end-of-sequence token was sampled (it is the last of `token_ids`).
    Eos,
    /// The text reached a stop string.
    Stop,
    /// `max_new_tokens` were generated.
    Length,
    /// The caller stopped it (the engine's watch: a client that left).
    Cancelled,
}

/// One row's continuation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Generation {
    /// The sampled ids, including a final end-of-sequence token: these, not a re-tokenisation
    /// of `text`, are what training scores.
    pub token_ids: Vec<u32>,
    /// Log-prob of each sampled id under the temperature-scaled model distribution.
    pub logprobs: Vec<f32>,
    /// Decoded text without the end-of-sequence token, cut just after a stop string.
    pub text: String,
    pub finish: FinishReason,
    /// The weights' version that sampled each id, where the engine was told versions
    /// ([`crate::Engine::set_refresh`]); empty otherwise.
    pub versions: Vec<u64>,
    /// At each sampled position, the most likely ids and their log-probs, most likely first
    /// (`GenerateOptions::top_logprobs` of them; empty when 0).
    pub top: Vec<Vec<(u32, f32)>>,
}

/// Continues each prompt (token ids) of a batch. `eos` are the ids that end a row.
pub fn generate(
    lm: &Qwen2ForCausalLM,
    tokenizer: &Tokenizer,
    eos: &[u32],
    prompts: &[Vec<u32>],
    options: &GenerateOptions,
) -> Result<Vec<Generation>> {
    let ids: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
    run(lm, None, tokenizer, eos, &ids, options)
}

/// [`generate`] for a VL model: prompts with their images (of any number and size per row).
pub fn generate_vl(
    lm: &Qwen2ForCausalLM,
    vision: &Vision,
    tokenizer: &Tokenizer,
    eos: &[u32],
    prompts: &[Prompt],
    options: &GenerateOptions,
) -> Result<Vec<Generation>> {
    let ids: Vec<&[u32]> = prompts.iter().map(|p| p.ids.as_slice()).collect();
    run(lm, Some((vision, prompts)), tokenizer, eos, &ids, options)
}

impl Model {
    /// Continues `prompts` (token ids), ending rows at this model's end-of-sequence ids.
    pub fn generate(&self, prompts: &[Vec<u32>], options: &GenerateOptions) -> Result<Vec<Generation>> {
        generate(&self.lm, &self.tokenizer, &self.eos_token_ids, prompts, options)
    }

    /// Continues prompts that may hold images (a text-only model takes prompts without).
    pub fn generate_vl(&self, prompts: &[Prompt], options: &GenerateOptions) -> Result<Vec<Generation>> {
        match &self.vision {
            Some(v) => generate_vl(&self.lm, v, &self.tokenizer, &self.eos_token_ids, prompts, options),
            None => {
                if prompts.iter().any(|p| !p.images.is_empty()) {
                    self.vision()?;
                }
                let ids: Vec<Vec<u32>> = prompts.iter().map(|p| p.ids.clone()).collect();
                self.generate(&ids, options)
            }
        }
    }
}

fn run(
    lm: &Qwen2ForCausalLM,
    vision: Option<(&Vision, &[Prompt])>,
    tokenizer: &Tokenizer,
    eos: &[u32],
    prompts: &[&[u32]],
    options: &GenerateOptions,
) -> Result<Vec<Generation>> {
    validate(lm, prompts, options)?;
    if prompts.is_empty() {
        return Ok(vec![]);
    }
    let _guard = tch::no_grad_guard();
    let device = lm.model.device();
    let batch = prompts.len();
    let longest = prompts.iter().map(|p| p.len()).max().unwrap_or(0);
    let caps: Vec<usize> = (0..batch).map(|i| options.cap(i)).collect();
    let new = caps.iter().copied().max().unwrap_or(0);
    let (ids, key_mask) = left_pad(prompts, longest, new, device);
    let (embeds, positions, deltas) = match vision {
        Some((v, vl_prompts)) => {
            let rows: Vec<MropePositions> =
                vl_prompts.iter().map(|p| v.positions(&p.ids, &p.grids())).collect::<Result<_>>()?;
            let offsets: Vec<usize> = prompts.iter().map(|p| longest - p.len()).collect();
            let positions = batch_positions(&rows, &offsets, longest, device);
            let images: Vec<&PixelValues> = vl_prompts.iter().flat_map(|p| &p.images).collect();
            (v.embed(&lm.model, &ids, &images)?, positions, rows.iter().map(|r| r.delta).collect())
        }
        None => {
            let positions = (key_mask.narrow(1, 0, longest as i64).cumsum(1, Kind::Int64) - 1).clamp_min(0);
            (lm.model.embed(&ids), positions, vec![0; batch])
        }
    };
    let mut cache = KvCache::new(lm.config(), batch, longest + new, lm.model.kind(), device);
    let mask = attention_mask(&key_mask.narrow(1, 0, longest as i64), 0, longest);
    // Only the last position's logits are needed: the head over every prompt position would
    // cost batch × prompt × vocab × hidden for nothing.
    let hidden = lm.model.forward_embeds(embeds, &positions, Some(&mask), Some(&mut cache))?;
    let suppress = |logits: Tensor| match vision {
        Some((v, _)) => v.suppress_placeholders(&logits),
        None => logits,
    };
    let mut logits = suppress(lm.logits(&hidden.select(1, -1)));

    let mut sampler = Sampler::new(options.temperature, options.top_p, options.top_k, options.seed);
    let mut rows: Vec<Row> = (0..batch).map(|_| Row::default()).collect();
    for step in 0..new {
        let (tokens, logprobs) = sampler.step(&logits);
        let tokens: Vec<i64> = Vec::try_from(&tokens)?;
        let logprobs: Vec<f32> = Vec::try_from(&logprobs.to_kind(Kind::Float))?;
        let ends = Ends { eos, stop: &options.stop, tokenizer };
        for (b, row) in rows.iter_mut().enumerate().filter(|(_, r)| r.finish.is_none()) {
            row.push(tokens[b] as u32, logprobs[b], caps[b], &ends)?;
        }
        if step + 1 == new || rows.iter().all(|r| r.finish.is_some()) {
            break;
        }
        // Finished rows keep a slot in the batch but feed padding that nobody attends to.
        let active: Vec<bool> = rows.iter().map(|r| r.finish.is_none()).collect();
        let feed: Vec<i64> = tokens.iter().zip(&active).map(|(&t, &a)| if a { t } else { 0 }).collect();
        let column = (longest + step) as i64;
        key_mask.narrow(1, column, 1).copy_(&Tensor::from_slice(&active).view([-1, 1]).to_device(device));
        // A generated token's position continues the prompt's last one: its length plus
        // the M-RoPE delta, on all three axes.
        let pos: Vec<i64> = prompts.iter().zip(&deltas).map(|(p, d)| (p.len() + step) as i64 + d).collect();
        let mask = attention_mask(&key_mask.narrow(1, 0, column + 1), longest + step, 1);
        let input = Tensor::from_slice(&feed).view([-1, 1]).to_device(device);
        let mut pos = Tensor::from_slice(&pos).view([-1, 1]).to_device(device);
        if vision.is_some() {
            pos = pos.unsqueeze(0).expand([3, batch as i64, 1], false);
        }
        logits = suppress(lm.forward(&input, &pos, Some(&mask), Some(&mut cache))?.select(1, 0));
    }
    rows.into_iter().map(|row| row.finish(tokenizer, &options.stop)).collect()
}

/// What ends a row: an end-of-sequence id, or a stop string in its text.
#[derive(Clone, Copy)]
pub(crate) struct Ends<'a> {
    pub eos: &'a [u32],
    pub stop: &'a [String],
    pub tokenizer: &'a Tokenizer,
}

/// One prompt's continuation so far.
#[derive(Default)]
pub(crate) struct Row {
    pub ids: Vec<u32>,
    pub logprobs: Vec<f32>,
    pub finish: Option<FinishReason>,
    pub versions: Vec<u64>,
    pub top: Vec<Vec<(u32, f32)>>,
}

impl Row {
    /// Adds a sampled token and says whether the row has ended (`cap` tokens at most).
    pub fn push(&mut self, token: u32, logprob: f32, cap: usize, ends: &Ends) -> Result<bool> {
        self.ids.push(token);
        self.logprobs.push(logprob);
        if ends.eos.contains(&token) {
            self.finish = Some(FinishReason::Eos);
        } else if !ends.stop.is_empty() {
            // A stop string ends in the last token: decoding one token more than the
            // longest stop string's bytes covers it.
            let window = ends.stop.iter().map(String::len).max().unwrap_or(0) + 1;
            let tail = ends.tokenizer.decode(&self.ids[self.ids.len().saturating_sub(window)..])?;
            if ends.stop.iter().any(|s| tail.contains(s.as_str())) {
                self.finish = Some(FinishReason::Stop);
            }
        }
        if self.finish.is_none() && self.ids.len() >= cap {
            self.finish = Some(FinishReason::Length);
        }
        Ok(self.finish.is_some())
    }

    pub fn finish(self, tokenizer: &Tokenizer, stop: &[String]) -> Result<Generation> {
        let finish = self.finish.unwrap_or(FinishReason::Length);
        let text_ids = if finish == FinishReason::Eos { &self.ids[..self.ids.len() - 1] } else { &self.ids[..] };
        let mut text = tokenizer.decode(text_ids)?;
        if finish == FinishReason::Stop
            && let Some(end) = stop.iter().filter_map(|s| text.find(s.as_str()).map(|i| i + s.len())).min()
        {
            text.truncate(end);
        }
        Ok(Generation {
            token_ids: self.ids,
            logprobs: self.logprobs,
            text,
            finish,
            versions: self.versions,
            top: self.top,
        })
    }
}

pub(crate) fn validate(lm: &Qwen2ForCausalLM, prompts: &[&[u32]], options: &GenerateOptions) -> Result<()> {
    check_sampling(options)?;
    let per_prompt = &options.max_new_tokens_per_prompt;
    if !per_prompt.is_empty() && per_prompt.len() != prompts.len() {
        return Err(Error::Invalid(format!(
            "max_new_tokens_per_prompt has {} entries for {} prompts",
            per_prompt.len(),
            prompts.len()
        )));
    }
    if let Some(i) = per_prompt.iter().position(|&c| c == 0) {
        return Err(Error::Invalid(format!("prompt {i}: a cap of 0 new tokens leaves nothing to generate")));
    }
    for (i, p) in prompts.iter().enumerate() {
        check_prompt(lm, i, p, options.cap(i))?;
    }
    Ok(())
}

/// The sampling settings and the common cap.
pub(crate) fn check_sampling(options: &GenerateOptions) -> Result<()> {
    if !(options.temperature >= 0.0 && options.temperature.is_finite()) {
        return Err(Error::Invalid(format!("temperature {} must be finite and >= 0", options.temperature)));
    }
    if !(options.top_p > 0.0 && options.top_p <= 1.0) {
        return Err(Error::Invalid(format!("top_p {} must be in (0, 1]", options.top_p)));
    }
    if options.max_new_tokens == 0 {
        return Err(Error::Invalid("max_new_tokens must be at least 1".into()));
    }
    Ok(())
}

/// Prompt `i` (`p`) with `cap` new tokens fits the model.
pub(crate) fn check_prompt(lm: &Qwen2ForCausalLM, i: usize, p: &[u32], cap: usize) -> Result<()> {
    let c = lm.config();
    if cap == 0 {
        return Err(Error::Invalid(format!("prompt {i}: a cap of 0 new tokens leaves nothing to generate")));
    }
    if p.is_empty() {
        return Err(Error::Invalid(format!("prompt {i} has no tokens")));
    }
    if let Some(&bad) = p.iter().find(|&&t| t as usize >= c.vocab_size) {
        return Err(Error::Invalid(format!("prompt {i}: token id {bad} >= vocab_size {}", c.vocab_size)));
    }
    if p.len() + cap > c.max_position_embeddings {
        return Err(Error::Invalid(format!(
            "prompt {i}: {} tokens + {cap} new exceed max_position_embeddings {}",
            p.len(),
            c.max_position_embeddings
        )));
    }
    Ok(())
}

/// Ids `[batch, longest]` padded on the left, and the key mask `[batch, longest + new]`
/// (true = real token) whose generated columns are filled in step by step.
fn left_pad(prompts: &[&[u32]], longest: usize, new: usize, device: tch::Device) -> (Tensor, Tensor) {
    let mut ids = Vec::with_capacity(prompts.len() * longest);
    let mut mask = Vec::with_capacity(prompts.len() * (longest + new));
    for p in prompts {
        let pad = longest - p.len();
        ids.extend(std::iter::repeat_n(0i64, pad).chain(p.iter().map(|&t| t as i64)));
        mask.extend(std::iter::repeat_n(false, pad).chain(std::iter::repeat_n(true, p.len())));
        mask.extend(std::iter::repeat_n(false, new));
    }
    let b = prompts.len() as i64;
    (
        Tensor::from_slice(&ids).view([b, longest as i64]).to_device(device),
        Tensor::from_slice(&mask).view([b, (longest + new) as i64]).to_device(device),
    )
}

/// Log-probs of each token of each sequence after the first, given the tokens before it,
/// at `temperature` (1 for raw logits): one forward over the right-padded batch, the way a
/// training step scores sampled tokens. Row i has `sequences[i].len() - 1` entries.
pub fn sequence_logprobs(lm: &Qwen2ForCausalLM, sequences: &[Vec<u32>], temperature: f64) -> Result<Vec<Vec<f32>>> {
    let rows: Vec<&[u32]> = sequences.iter().map(Vec::as_slice).collect();
    check_scorable(&rows)?;
    let _guard = tch::no_grad_guard();
    let device = lm.model.device();
    let ids = right_pad(&rows, device);
    let longest = ids.size()[1];
    let positions = Tensor::arange(longest, (Kind::Int64, device)).unsqueeze(0).expand_as(&ids);
    let logits = lm.forward(&ids, &positions, None, None)?;
    chosen_logprobs(&logits, &ids, &rows, temperature)
}

/// [`sequence_logprobs`] for a VL model: each sequence with the images its prompt shows.
pub fn sequence_logprobs_vl(
    lm: &Qwen2ForCausalLM,
    vision: &Vision,
    sequences: &[Prompt],
    temperature: f64,
) -> Result<Vec<Vec<f32>>> {
    let rows: Vec<&[u32]> = sequences.iter().map(|p| p.ids.as_slice()).collect();
    check_scorable(&rows)?;
    let _guard = tch::no_grad_guard();
    let refs: Vec<&Prompt> = sequences.iter().collect();
    let (logits, ids) = vision.logits(lm, &refs)?;
    chosen_logprobs(&vision.suppress_placeholders(&logits), &ids, &rows, temperature)
}

fn check_scorable(rows: &[&[u32]]) -> Result<()> {
    if rows.iter().any(|s| s.len() < 2) {
        return Err(Error::Invalid("each sequence needs at least two tokens to score".into()));
    }
    Ok(())
}

fn chosen_logprobs(logits: &Tensor, ids: &Tensor, rows: &[&[u32]], temperature: f64) -> Result<Vec<Vec<f32>>> {
    let longest = ids.size()[1];
    let t = if temperature > 0.0 { temperature } else { 1.0 };
    let logp = (logits.narrow(1, 0, longest - 1) / t).log_softmax(-1, Kind::Float);
    let targets = ids.narrow(1, 1, longest - 1).unsqueeze(-1);
    let chosen = logp.gather(-1, &targets, false).squeeze_dim(-1).to_device(tch::Device::Cpu);
    rows.iter()
        .enumerate()
        .map(|(i, s)| Ok(Vec::<f32>::try_from(chosen.get(i as i64).narrow(0, 0, s.len() as i64 - 1))?))
        .collect()
}
