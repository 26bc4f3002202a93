//! The rollout engine: generation that keeps each trajectory's keys and values between
//! turns, prefills a prompt shared by a group once, and batches continuously (rows leave
//! the decode batch as they end; waiting requests join).
//!
//! A request names its trajectory (`key`). Its prompt is compared with every cached
//! sequence: the longest common prefix is reused (in place when it is the trajectory's own,
//! copied when it is another's, e.g. a group sibling's), and only the rest is prefilled.
//! A trajectory whose new prompt does not extend what it cached (a history window dropped a
//! turn, a template rewrote one) reuses what still matches and is counted as a fallback.
//!
//! Each request draws from its own ChaCha8 stream (seeded by the request), and a row's
//! logits depend only on its own tokens, so the sampled ids do not depend on which rows
//! share a batch, how many run at once, or whether a prefix came from the cache.

mod kv;
mod schedule;
mod slots;

use crate::generate::{Ends, validate};
use crate::image_processor::PixelValues;
use crate::linear::AdapterRows;
use crate::sampling::Sampler;
use crate::vl::MropePositions;
use crate::{Error, GenerateOptions, Generation, Model, Qwen2ForCausalLM, Result, Tokenizer, Vision};
use kv::KvRows;
use schedule::{Ask, Decode, Prefill, Scheduler};
use serde::{Deserialize, Serialize};
use slots::Slots;
use std::num::NonZeroUsize;
use tch::{Kind, Tensor};

/// Which generation engine answers rollout requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EngineKind {
    /// This module's engine: keys and values kept across turns, shared prompts prefilled
    /// once, rows leaving and joining the decode batch as they end.
    #[default]
    Continuous,
    /// One left-padded batch per turn, every prompt prefilled whole, ended rows feeding
    /// padding until the longest ends (the engine before the continuous one; a baseline).
    Static,
}

/// How the engine batches and how much it may cache (`[engine]` in a training config).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineOptions {
    pub kind: EngineKind,
    /// Rows decoded together at most; requests past it wait and join as rows end.
    pub max_batch: NonZeroUsize,
    /// Prompt tokens one prefill forward takes at most (rows × longest new part, padding
    /// included): bounds the activations of a wave of long prompts.
    pub max_prefill_tokens: NonZeroUsize,
    /// Memory for cached keys and values, in MiB. Past it, the least recently used cached
    /// sequences not being decoded are evicted (their next turn is prefilled whole).
    pub kv_cache_mib: NonZeroUsize,
    /// Reuse cached keys and values. Off, every prompt is prefilled whole: the baseline the
    /// tests compare reuse against.
    pub reuse: bool,
    /// With LoRA, generate from a copy of the model with the adapters merged into its
    /// weights (refreshed after every update; a second copy of the weights) instead of
    /// the adapters' extra matrix products. Read by whoever owns the model (the trainer).
    pub merge_lora: bool,
    /// Where a generator that keeps its own copy of the model (the trainer's `[async]`
    /// thread) places it, e.g. `cuda:1`; unset: the model's device. Read by that owner.
    pub device: Option<crate::DeviceChoice>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            kind: EngineKind::Continuous,
            max_batch: NonZeroUsize::new(64).expect("positive"),
            max_prefill_tokens: NonZeroUsize::new(16384).expect("positive"),
            kv_cache_mib: NonZeroUsize::new(4096).expect("positive"),
            reuse: true,
            merge_lora: false,
            device: None,
        }
    }
}

/// One prompt to continue.
#[derive(Debug)]
pub struct EngineRequest {
    /// The trajectory the prompt belongs to: its cached sequence is extended in place.
    pub key: u64,
    /// Token ids; for a VL model with each image's pad token expanded to its token count
    /// (as [`Vision::expand`] leaves them).
    pub ids: Vec<u32>,
    /// A VL model's images, in the order of their pad runs in `ids`.
    pub images: Vec<PixelValues>,
    /// Tokens to generate at most (within the options' `max_new_tokens`).
    pub max_new_tokens: usize,
    /// Seeds this request's own draw stream.
    pub seed: u64,
    /// The served adapter it is answered with (see [`crate::Model::add_served_adapter`]);
    /// 0: the model as it is. Rows of different adapters share a batch, never a cached
    /// prefix.
    pub adapter: usize,
}

/// What the engine did, summed over its calls since it was created or cleared.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineStats {
    pub requests: usize,
    pub prompt_tokens: usize,
    /// Prompt tokens run through the model.
    pub prefilled_tokens: usize,
    /// Prompt tokens read from the trajectory's own cached sequence.
    pub reused_tokens: usize,
    /// Prompt tokens copied from another cached sequence (a group sibling's prompt).
    pub shared_tokens: usize,
    /// Prompts that did not extend their trajectory's cached sequence.
    pub fallbacks: usize,
    /// Cached sequences dropped to stay within `kv_cache_mib`.
    pub evictions: usize,
    pub prefill_calls: usize,
    pub decode_steps: usize,
    /// Tokens sampled.
    pub generated_tokens: usize,
    /// Rows that left the decode batch while others went on decoding or waited.
    pub rows_freed_early: usize,
    /// Of those, rows ended by their token cap.
    pub freed_at_length: usize,
    /// Requests that joined a decode batch already running.
    pub joined_running: usize,
    pub peak_kv_bytes: usize,
    /// New weights loaded while rows were running ([`Engine::set_refresh`]).
    pub weight_swaps: usize,
    /// Positions of running rows run again after new weights (prompts and sampled tokens).
    pub recomputed_tokens: usize,
}

impl EngineStats {
    /// Both engines' counters (two ranks' engines over distinct requests); the KV peak is
    /// the larger one, each engine's cache being its own.
    pub fn add(&mut self, o: &EngineStats) {
        self.requests += o.requests;
        self.prompt_tokens += o.prompt_tokens;
        self.prefilled_tokens += o.prefilled_tokens;
        self.reused_tokens += o.reused_tokens;
        self.shared_tokens += o.shared_tokens;
        self.fallbacks += o.fallbacks;
        self.evictions += o.evictions;
        self.prefill_calls += o.prefill_calls;
        self.decode_steps += o.decode_steps;
        self.generated_tokens += o.generated_tokens;
        self.rows_freed_early += o.rows_freed_early;
        self.freed_at_length += o.freed_at_length;
        self.joined_running += o.joined_running;
        self.peak_kv_bytes = self.peak_kv_bytes.max(o.peak_kv_bytes);
        self.weight_swaps += o.weight_swaps;
        self.recomputed_tokens += o.recomputed_tokens;
    }

    /// Prompt tokens not run through the model.
    pub fn saved_tokens(&self) -> usize {
        self.reused_tokens + self.shared_tokens
    }
}

/// Loads any newer weights into the model and returns the version it holds now; an `Err`
/// says why it could not (see [`Engine::set_refresh`]).
pub type Refresh = Box<dyn FnMut() -> std::result::Result<u64, String> + Send>;

/// A token just sampled, as the engine's watch sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    /// The request's `key`.
    pub key: u64,
    pub token: u32,
    pub logprob: f32,
    /// The most likely ids there (`GenerateOptions::top_logprobs`; empty when 0).
    pub top: Vec<(u32, f32)>,
}

/// Sees every token as it is sampled (a streaming server sends it on) and returns the keys
/// of requests to stop now (their clients left): their rows leave the batch before the next
/// decode step, finished as [`crate::FinishReason::Cancelled`].
pub type Watch = Box<dyn FnMut(&[Sampled]) -> Vec<u64> + Send>;

pub struct Engine {
    pub options: EngineOptions,
    watch: Option<Watch>,
    cache: Option<Cache>,
    stats: EngineStats,
    calls: u64,
    refresh: Option<Refresh>,
    /// The weights' version the cached rows were computed with.
    version: Option<u64>,
}

/// The cached rows: their metadata (the scheduler's) and their tensors (the runner's).
struct Cache {
    slots: Slots,
    kv: KvRows,
}

impl Engine {
    pub fn new(options: EngineOptions) -> Self {
        Engine {
            options,
            watch: None,
            cache: None,
            stats: EngineStats::default(),
            calls: 0,
            refresh: None,
            version: None,
        }
    }

    /// The watch of the calls that follow (`None`: none).
    pub fn set_watch(&mut self, watch: Option<Watch>) {
        self.watch = watch;
    }

    /// Weights that change while rows run (asynchronous RL): `refresh` is called at the
    /// start of every call and before every decode step. A version other than the last one
    /// means the model now holds new weights: cached rows are forgotten, running rows are
    /// recomputed whole with the new weights before their next token, and every token
    /// records the version that sampled it ([`Generation::versions`]).
    pub fn set_refresh(&mut self, refresh: Refresh) {
        self.refresh = Some(refresh);
    }

    pub fn stats(&self) -> EngineStats {
        let mut s = self.stats.clone();
        s.peak_kv_bytes = self.cache.as_ref().map_or(0, |c| c.slots.peak_bytes);
        s
    }

    /// Bytes the cache holds now.
    pub fn kv_bytes(&self) -> usize {
        self.cache.as_ref().map_or(0, |c| c.slots.bytes())
    }

    /// Forgets every cached sequence (the weights changed, or a new rollout starts) and
    /// releases its memory; the figures stay.
    pub fn clear(&mut self) {
        if let Some(c) = &mut self.cache {
            c.slots.clear();
            c.kv.clear();
        }
    }

    /// Continues every request; the generations come back in request order. `eos` are the
    /// ids that end a row; `options` gives sampling, stop strings and `max_new_tokens` (its
    /// seed is unused: each request brings its own).
    pub fn generate(
        &mut self,
        lm: &Qwen2ForCausalLM,
        vision: Option<&Vision>,
        tokenizer: &Tokenizer,
        eos: &[u32],
        requests: &[EngineRequest],
        options: &GenerateOptions,
    ) -> Result<Vec<Generation>> {
        let prompts: Vec<&[u32]> = requests.iter().map(|r| r.ids.as_slice()).collect();
        let caps: Vec<usize> = requests.iter().map(|r| r.max_new_tokens.min(options.max_new_tokens)).collect();
        validate(lm, &prompts, &GenerateOptions { max_new_tokens_per_prompt: caps.clone(), ..options.clone() })?;
        let mut keys: Vec<u64> = requests.iter().map(|r| r.key).collect();
        keys.sort_unstable();
        if let Some(w) = keys.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::Invalid(format!("two requests of one call continue trajectory {}", w[0])));
        }
        let served = lm.model.served_adapters();
        if let Some(r) = requests.iter().find(|r| r.adapter > served) {
            return Err(Error::Invalid(format!(
                "adapter {} is not served here (this model serves {served})",
                r.adapter
            )));
        }
        let prompts = requests.iter().map(|r| Prompted::new(vision, r)).collect::<Result<Vec<_>>>()?;
        let _guard = tch::no_grad_guard();
        let mut weights = Weights { refresh: self.refresh.as_mut(), version: &mut self.version };
        if weights.changed()? {
            self.clear();
        }
        self.calls += 1;
        let budget = self.options.kv_cache_mib.get() << 20;
        let cache = self.cache.get_or_insert_with(|| Cache {
            slots: Slots::new(crate::KvCache::bytes_per_position(lm.config(), lm.model.kind()), budget),
            kv: KvRows::new(lm.config(), lm.model.kind(), lm.model.device()),
        });
        cache.slots.budget = budget;
        let asks = requests
            .iter()
            .zip(&prompts)
            .zip(&caps)
            .map(|((r, p), &cap)| Ask { key: r.key, content: &p.content, cap, seed: r.seed })
            .collect();
        let mut call = Call {
            lm,
            vision,
            prompts: &prompts,
            requests,
            ends: Ends { eos, stop: &options.stop, tokenizer },
            sampler: Sampler::new(options.temperature, options.top_p, options.top_k, 0),
            top_logprobs: options.top_logprobs,
            schedule: Scheduler::new(asks, &self.options, &mut cache.slots, &mut self.stats, self.calls),
            kv: &mut cache.kv,
            out: (0..requests.len()).map(|_| None).collect(),
            weights: Weights { refresh: self.refresh.as_mut(), version: &mut self.version },
            watch: self.watch.as_mut(),
        };
        let out = call.run().map(|()| call.out);
        if out.is_err() {
            // The schedule runs ahead of the tensors (a planned wave's rows already claim
            // their prompts): after a call that failed part-way no cached row is trusted.
            cache.slots.clear();
            cache.kv.clear();
        }
        out?.into_iter().map(|g| Ok(g.expect("every request ends"))).collect()
    }
}

impl Model {
    /// Continues `requests` with the rollout engine (its cached sequences reused and kept).
    pub fn generate_with(
        &self,
        engine: &mut Engine,
        requests: &[EngineRequest],
        options: &GenerateOptions,
    ) -> Result<Vec<Generation>> {
        engine.generate(&self.lm, self.vision.as_ref(), &self.tokenizer, &self.eos_token_ids, requests, options)
    }
}

/// The engine's refresh hook and the version its cached rows hold.
struct Weights<'a> {
    refresh: Option<&'a mut Refresh>,
    version: &'a mut Option<u64>,
}

impl Weights<'_> {
    /// Polls the hook: whether the model now holds other weights than the cached rows'.
    fn changed(&mut self) -> Result<bool> {
        let Some(refresh) = self.refresh.as_mut() else { return Ok(false) };
        let now = refresh().map_err(Error::Refresh)?;
        Ok(self.version.replace(now).is_some_and(|was| was != now))
    }
}

/// A request's prompt as the engine compares and positions it.
struct Prompted {
    /// The prompt's content keys (what a cached row's `ids` are compared with).
    content: Vec<u64>,
    /// A VL prompt's M-RoPE positions.
    mrope: Option<MropePositions>,
    /// Each image's pad run `[start, end)` in the prompt.
    runs: Vec<(usize, usize)>,
}

impl Prompted {
    /// A served adapter's prompts get content keys of their own, so no cached prefix is
    /// shared across adapters (their keys and values differ).
    fn new(vision: Option<&Vision>, r: &EngineRequest) -> Result<Self> {
        let mut prompted = Self::keyed(vision, r)?;
        if r.adapter > 0 {
            for c in &mut prompted.content {
                *c ^= (r.adapter as u64) << ADAPTER_SHIFT;
            }
        }
        Ok(prompted)
    }

    fn keyed(vision: Option<&Vision>, r: &EngineRequest) -> Result<Self> {
        let Some(v) = vision else {
            if !r.images.is_empty() {
                return Err(Error::Invalid("a text-only model (no vision tower) cannot take images".into()));
            }
            return Ok(Prompted { content: r.ids.iter().map(|&t| t as u64).collect(), mrope: None, runs: vec![] });
        };
        let grids: Vec<[usize; 3]> = r.images.iter().map(|p| p.grid).collect();
        let mrope = v.positions(&r.ids, &grids)?;
        let pad = v.config.image_token_id;
        let merge = v.config.vision.spatial_merge_size;
        let mut content: Vec<u64> = r.ids.iter().map(|&t| t as u64).collect();
        let mut runs = vec![];
        let mut at = 0;
        for image in &r.images {
            let start = at + r.ids[at..].iter().position(|&t| t == pad).expect("positions checked the pads");
            let end = start + image.tokens(merge);
            let key = image_key(image)?;
            for (k, c) in content[start..end].iter_mut().enumerate() {
                *c = IMAGE_CONTENT | (key.wrapping_add(k as u64) >> 1);
            }
            runs.push((start, end));
            at = end;
        }
        Ok(Prompted { content, mrope: Some(mrope), runs })
    }
}

/// Content keys of image tokens have the top bit set (token ids never do).
const IMAGE_CONTENT: u64 = 1 << 63;
/// Where a served adapter's index goes in content keys: above any token id, below the
/// image bit.
const ADAPTER_SHIFT: u32 = 40;

/// A key of an image's pixels and grid.
fn image_key(image: &PixelValues) -> Result<u64> {
    use std::hash::{Hash, Hasher};
    let values = Vec::<f32>::try_from(image.values.flatten(0, -1).to_kind(Kind::Float))?;
    let mut h = std::hash::DefaultHasher::new();
    image.grid.hash(&mut h);
    values.iter().for_each(|v| v.to_bits().hash(&mut h));
    Ok(h.finish())
}

/// One `generate` call: the scheduler's plans run on the model and the cache tensors.
struct Call<'a> {
    lm: &'a Qwen2ForCausalLM,
    vision: Option<&'a Vision>,
    prompts: &'a [Prompted],
    requests: &'a [EngineRequest],
    ends: Ends<'a>,
    sampler: Sampler,
    top_logprobs: usize,
    schedule: Scheduler<'a>,
    kv: &'a mut KvRows,
    out: Vec<Option<Generation>>,
    weights: Weights<'a>,
    watch: Option<&'a mut Watch>,
}

impl Call<'_> {
    fn run(&mut self) -> Result<()> {
        // Every row of this call fits: its prompt and answer (the cache keeps cached rows
        // only as far as the budget allows).
        let moves = self.schedule.reserve()?;
        self.kv.apply(&moves)?;
        while !self.schedule.done() {
            while let Some(wave) = self.schedule.admit()? {
                self.kv.apply(&wave.moves)?;
                for p in &wave.prefills {
                    self.prefill(p)?;
                }
            }
            self.retire()?;
            if self.schedule.active.is_empty() {
                continue;
            }
            if self.weights.changed()? {
                for p in &self.schedule.recompute() {
                    self.prefill(p)?;
                }
            } else {
                let step = self.schedule.decode();
                self.decode(&step)?;
            }
            self.retire()?;
        }
        Ok(())
    }

    /// One prefill forward: each row's new part, padded to the longest, attending to its
    /// cached prefix; samples each row's first token.
    fn prefill(&mut self, p: &Prefill) -> Result<()> {
        let device = self.lm.model.device();
        let reqs: Vec<usize> = p.rows.iter().map(|r| r.request).collect();
        let past: Vec<usize> = p.rows.iter().map(|r| r.past).collect();
        let lens: Vec<usize> = p.rows.iter().map(|r| r.len).collect();
        let t = lens.iter().copied().max().unwrap_or(1);
        let n = p.rows.len() as i64;
        let mut ids = Vec::with_capacity(p.rows.len() * t);
        for (i, r) in (p.start..).zip(&p.rows) {
            // Past the prompt (a row recomputed after new weights): what the row sampled.
            let sampled = &self.schedule.active[i].row.ids;
            let whole = self.requests[r.request].ids.iter().chain(sampled);
            let part = whole.skip(r.past).take(r.len).map(|&x| x as i64);
            ids.extend(part.chain(std::iter::repeat_n(0, t - r.len)));
        }
        let ids = Tensor::from_slice(&ids).view([n, t as i64]).to_device(device);
        let starts = Tensor::from_slice(&past.iter().map(|&p| p as i64).collect::<Vec<_>>()).to_device(device);
        let steps = starts.view([n, 1]) + Tensor::arange(t as i64, (Kind::Int64, device)).view([1, -1]);
        let keys = past.iter().zip(&lens).map(|(p, l)| p + l).max().unwrap_or(0);
        // Query i of a row sits at its place in the cache and sees every key up to it. A
        // padding query's keys are never kept; it sees real ones, so no attention row is
        // empty.
        let mask = Tensor::arange(keys as i64, (Kind::Int64, device))
            .view([1, 1, 1, -1])
            .le_tensor(&steps.unsqueeze(1).unsqueeze(-1));
        let (embeds, positions) = match self.vision {
            None => (self.lm.model.embed(&ids), steps),
            Some(v) => (self.vl_embeds(v, &ids, &reqs, &past)?, self.vl_positions(&reqs, &past, &lens, t)),
        };
        let adapters: Vec<usize> = reqs.iter().map(|&r| self.requests[r].adapter).collect();
        let rows = AdapterRows::new(&adapters, device);
        let hidden = {
            let mut view = self.kv.view(p.start, &past, &lens, keys);
            self.lm.model.forward_cached(embeds, &positions, &mask, &mut view, rows.as_ref())
        };
        let last: Vec<i64> = lens.iter().map(|&l| l as i64 - 1).collect();
        let last = Tensor::from_slice(&last).to_device(device);
        let hidden = hidden.gather(1, &last.view([n, 1, 1]).expand([n, 1, hidden.size()[2]], false), false);
        let logits = self.logits(&hidden.squeeze_dim(1));
        self.sample(p.start, p.start + p.rows.len(), &logits)
    }

    /// The head, with a VL model's placeholder tokens out of reach.
    fn logits(&self, hidden: &Tensor) -> Tensor {
        let logits = self.lm.logits(hidden);
        match self.vision {
            Some(v) => v.suppress_placeholders(&logits),
            None => logits,
        }
    }

    /// Embeddings of the new parts `ids` `[rows, t]` (request `reqs[i]` from position
    /// `past[i]` on), image tokens taking their features: every image with a token in a
    /// new part goes through the tower once, and its features past the cached part are used.
    fn vl_embeds(&self, v: &Vision, ids: &Tensor, reqs: &[usize], past: &[usize]) -> Result<Tensor> {
        let embeds = self.lm.model.embed(ids);
        let mut images: Vec<&PixelValues> = vec![];
        let mut slices: Vec<(usize, i64, i64)> = vec![];
        for (&r, &p) in reqs.iter().zip(past) {
            for (k, &(a, b)) in self.prompts[r].runs.iter().enumerate() {
                if b > p {
                    slices.push((images.len(), (p.max(a) - a) as i64, (b - p.max(a)) as i64));
                    images.push(&self.requests[r].images[k]);
                }
            }
        }
        if images.is_empty() {
            return Ok(embeds);
        }
        let pixels = Tensor::cat(&images.iter().map(|p| &p.values).collect::<Vec<_>>(), 0);
        let grids: Vec<[usize; 3]> = images.iter().map(|p| p.grid).collect();
        let features = v.tower.forward(&pixels, &grids).to_kind(embeds.kind());
        let merge = v.config.vision.spatial_merge_size;
        let sizes: Vec<i64> = images.iter().map(|p| p.tokens(merge) as i64).collect();
        let per_image = features.split_with_sizes(&sizes, 0);
        let used: Vec<Tensor> = slices.iter().map(|&(k, from, len)| per_image[k].narrow(0, from, len)).collect();
        let mask = ids.eq(v.config.image_token_id as i64);
        Ok(embeds.masked_scatter(&mask.unsqueeze(-1).expand_as(&embeds), &Tensor::cat(&used, 0)))
    }

    /// `[3, rows, t]` M-RoPE positions of the new parts `[past[i], past[i] + lens[i])`
    /// (padding at 0); past the prompt, generated tokens' (their place plus the delta).
    fn vl_positions(&self, reqs: &[usize], past: &[usize], lens: &[usize], t: usize) -> Tensor {
        let n = reqs.len();
        let mut data = vec![0i64; 3 * n * t];
        for (row, ((&r, &p), &len)) in reqs.iter().zip(past).zip(lens).enumerate() {
            let m = self.prompts[r].mrope.as_ref().expect("a VL prompt has M-RoPE positions");
            for (j, at) in (p..p + len).enumerate() {
                let pos = m.positions.get(at).copied().unwrap_or([at as i64 + m.delta; 3]);
                for (axis, &v) in pos.iter().enumerate() {
                    data[(axis * n + row) * t + j] = v;
                }
            }
        }
        Tensor::from_slice(&data).view([3, n as i64, t as i64]).to_device(self.lm.model.device())
    }

    /// One token for every row of the decode batch.
    fn decode(&mut self, step: &Decode) -> Result<()> {
        let device = self.lm.model.device();
        let m = step.feed.len();
        let keys = step.past.iter().max().unwrap_or(&0) + 1;
        let pos = Tensor::from_slice(&step.past.iter().map(|&p| p as i64).collect::<Vec<_>>()).to_device(device);
        let mask = Tensor::arange(keys as i64, (Kind::Int64, device))
            .view([1, 1, 1, -1])
            .le_tensor(&pos.view([m as i64, 1, 1, 1]));
        // A generated token's position continues its prompt's: its place plus the M-RoPE
        // delta, on all three axes.
        let positions = match self.vision {
            None => pos.view([m as i64, 1]),
            Some(_) => {
                let delta = |r: usize| self.prompts[r].mrope.as_ref().map_or(0, |p| p.delta);
                let deltas: Vec<i64> = self.schedule.active.iter().map(|a| delta(a.request)).collect();
                let with = pos + Tensor::from_slice(&deltas).to_device(device);
                with.view([1, m as i64, 1]).expand([3, m as i64, 1], false)
            }
        };
        let feed: Vec<i64> = step.feed.iter().map(|&t| t as i64).collect();
        let embeds = self.lm.model.embed(&Tensor::from_slice(&feed).view([m as i64, 1]).to_device(device));
        let adapters: Vec<usize> = self.schedule.active.iter().map(|a| self.requests[a.request].adapter).collect();
        let rows = AdapterRows::new(&adapters, device);
        let hidden = {
            let mut view = self.kv.view(0, &step.past, &vec![1; m], keys);
            self.lm.model.forward_cached(embeds, &positions, &mask, &mut view, rows.as_ref())
        };
        let logits = self.logits(&hidden.select(1, 0));
        self.sample(0, m, &logits)
    }

    /// A token for rows `start..end` from their logits `[end - start, vocab]`.
    fn sample(&mut self, start: usize, end: usize, logits: &Tensor) -> Result<()> {
        let draws = self.schedule.draws(start, end);
        let (tokens, logprobs) = self.sampler.step_with(logits, &draws);
        let tokens: Vec<i64> = Vec::try_from(&tokens)?;
        let logprobs: Vec<f32> = Vec::try_from(&logprobs.to_kind(Kind::Float))?;
        self.schedule.record(start, &tokens, &logprobs, *self.weights.version, &self.ends)?;
        let top = match self.top_logprobs {
            0 => vec![vec![]; end - start],
            k => self.sampler.top(logits, k)?,
        };
        if self.top_logprobs > 0 {
            for (a, t) in self.schedule.active[start..end].iter_mut().zip(&top) {
                a.row.top.push(t.clone());
            }
        }
        let Some(watch) = self.watch.as_mut() else { return Ok(()) };
        let sampled: Vec<Sampled> = self.schedule.active[start..end]
            .iter()
            .zip(tokens.iter().zip(&logprobs))
            .zip(top)
            .map(|((a, (&t, &l)), top)| Sampled { key: self.requests[a.request].key, token: t as u32, logprob: l, top })
            .collect();
        let stop = watch(&sampled);
        if !stop.is_empty() {
            let requests: Vec<usize> =
                (0..self.requests.len()).filter(|&r| stop.contains(&self.requests[r].key)).collect();
            for r in self.schedule.cancel(&requests) {
                // Never admitted: an empty answer.
                let row = crate::generate::Row { finish: Some(crate::FinishReason::Cancelled), ..Default::default() };
                self.out[r] = Some(row.finish(self.ends.tokenizer, self.ends.stop)?);
            }
        }
        Ok(())
    }

    /// Ended rows leave the batch; their generations are kept in request order.
    fn retire(&mut self) -> Result<()> {
        let retired = self.schedule.retire();
        self.kv.apply(&retired.moves)?;
        for (request, row) in retired.done {
            self.out[request] = Some(row.finish(self.ends.tokenizer, self.ends.stop)?);
        }
        Ok(())
    }
}
