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

mod ahead;
mod kv;
mod padded;
mod prompted;
mod runner;
mod schedule;
mod slots;

use crate::flash::{Choice, Kernel};
use crate::generate::{Row, check_prompt, check_sampling};
use crate::image_processor::PixelValues;
use crate::sampling::Sampler;
use crate::{Error, GenerateOptions, Generation, Model, Result};
use kv::KvRows;
use padded::Padded;
use prompted::Prompted;
use runner::Runner;
use schedule::{Ask, Scheduler};
use serde::{Deserialize, Serialize};
use slots::Slots;
use std::collections::HashMap;
use std::num::NonZeroUsize;

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
    /// On CUDA, decode steps of a model without served adapters replay a CUDA graph
    /// per batch and keys bucket (captured on first use, again after the cache is
    /// reallocated or the weights' derived copies are rebuilt), and the cache's first
    /// allocation holds `max_batch` rows of twice the capacity asked (within `kv_cache_mib`),
    /// so it is seldom reallocated; `false`:
    /// one kernel launch per operator, the cache grown as needed. No effect on the CPU.
    pub cuda_graphs: bool,
    /// On CUDA in bf16 or f16, the engine's attention (prefill and decode, graphs or not)
    /// runs through varlen flash attention over each row's own positions (no mask, grouped
    /// heads read as stored), once the kernel matched SDPA on test cases at the engine's
    /// first step; `false`: SDPA with a mask over the batch's keys.
    pub flash_attention: bool,
    /// A decode step that samples in the padded step (every row sampling alike) is left in
    /// flight: the next step is launched first, each row fed its token on the device, and
    /// the host reads the earlier tokens and checks their stops while the device runs it; a
    /// row that ended has one token computed for nothing. `false`: every step is read before
    /// the next is launched.
    pub step_ahead: bool,
    /// Runs the padded forward the graphs capture, eagerly, on the CPU too: its arithmetic
    /// tested where no GPU is.
    #[doc(hidden)]
    #[serde(skip)]
    pub padded_decode_on_cpu: bool,
    /// On the CPU, attends the way the flash kernel does, with SDPA
    /// (`flash::Kernel::Emulated`).
    #[doc(hidden)]
    #[serde(skip)]
    pub flash_on_cpu: bool,
}

impl EngineOptions {
    /// `kv_cache_mib` in bytes.
    fn kv_budget(&self) -> usize {
        self.kv_cache_mib.get() << 20
    }
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
            cuda_graphs: true,
            flash_attention: true,
            step_ahead: true,
            padded_decode_on_cpu: false,
            flash_on_cpu: false,
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
    /// Rows decoded together at most.
    pub peak_batch: usize,
    pub peak_kv_bytes: usize,
    /// Allocations of the cache's tensors (each growth or truncation).
    pub kv_allocations: usize,
    /// New weights loaded while rows were running ([`Engine::set_refresh`]).
    pub weight_swaps: usize,
    /// Positions of running rows run again after new weights (prompts and sampled tokens).
    pub recomputed_tokens: usize,
    /// Reads of results back to the host (each waits for the device): one per forward.
    pub host_reads: usize,
    /// Decode steps run on padded shapes (`engine.cuda_graphs`); of them, those replayed
    /// from a CUDA graph; the graphs captured and the seconds that took.
    pub padded_steps: usize,
    pub graph_captures: usize,
    pub graph_capture_seconds: f64,
    pub graph_replays: usize,
    /// Decode steps whose attention ran through varlen flash attention.
    pub flash_steps: usize,
    /// Decode steps launched before the previous step's tokens were read
    /// (`engine.step_ahead`), and the tokens such steps computed for rows that had ended.
    pub steps_ahead: usize,
    pub discarded_tokens: usize,
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
        self.peak_batch = self.peak_batch.max(o.peak_batch);
        self.peak_kv_bytes = self.peak_kv_bytes.max(o.peak_kv_bytes);
        self.kv_allocations += o.kv_allocations;
        self.weight_swaps += o.weight_swaps;
        self.recomputed_tokens += o.recomputed_tokens;
        self.host_reads += o.host_reads;
        self.padded_steps += o.padded_steps;
        self.graph_captures += o.graph_captures;
        self.graph_capture_seconds += o.graph_capture_seconds;
        self.graph_replays += o.graph_replays;
        self.flash_steps += o.flash_steps;
        self.steps_ahead += o.steps_ahead;
        self.discarded_tokens += o.discarded_tokens;
    }

    /// Prompt tokens not run through the model.
    pub fn saved_tokens(&self) -> usize {
        self.reused_tokens + self.shared_tokens
    }
}

/// Loads any newer weights into the model and returns the version it holds now; an `Err`
/// says why it could not (see [`Engine::set_refresh`]).
pub type Refresh = Box<dyn FnMut() -> std::result::Result<u64, String> + Send>;

/// A request the engine holds, as [`Engine::submit`] numbered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub usize);

/// A token just sampled.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    pub id: RequestId,
    /// The request's `key`.
    pub key: u64,
    pub token: u32,
    pub logprob: f32,
    /// The most likely ids there (the request's `top_logprobs`; empty when 0).
    pub top: Vec<(u32, f32)>,
}

/// What one [`Engine::step`] did: every token sampled (in order; a request admitted in this
/// step may have two: its prefill's and the decode's), and the requests that ended.
#[derive(Debug, Default)]
pub struct StepOutput {
    pub sampled: Vec<Sampled>,
    pub finished: Vec<(RequestId, Generation)>,
}

pub struct Engine {
    pub options: EngineOptions,
    cache: Option<Cache>,
    /// The requests held, by number: what the runner needs of each.
    live: HashMap<usize, Live>,
    next: usize,
    /// Requests aborted before they ran: reported finished by the next step.
    aborted: Vec<usize>,
    /// No step ran since the engine was last idle: the next one starts a round.
    idle: bool,
    refresh: Option<Refresh>,
    /// The weights' version the cached rows were computed with.
    version: Option<u64>,
}

/// The cached rows: their metadata and the requests' schedule (plain data), and their
/// tensors (the runner's).
struct Cache {
    schedule: Scheduler,
    kv: KvRows,
    /// The padded decode (CUDA graphs), where the options and device take it.
    padded: Option<Padded>,
    /// Whether attention runs through varlen flash attention.
    flash: Choice,
    /// The decode step whose tokens the host has not read.
    pending: Option<ahead::Pending>,
}

/// A request as the runner reads it.
pub(crate) struct Live {
    request: EngineRequest,
    prompted: Prompted,
    sampler: Sampler,
    stop: Vec<String>,
    top_logprobs: usize,
}

impl Cache {
    fn new(model: &Model, options: &EngineOptions) -> Self {
        let lm = &model.lm;
        let device = lm.model.device();
        let bytes = crate::KvCache::bytes_per_position(lm.config(), lm.model.kind());
        let mut kv = KvRows::new(lm.config(), lm.model.kind(), device);
        let (padded, flash) = match device {
            tch::Device::Cuda(_) => (options.cuda_graphs, options.flash_attention.then_some(Kernel::Flash)),
            _ => (options.padded_decode_on_cpu, options.flash_on_cpu.then_some(Kernel::Emulated)),
        };
        let padded = match padded.then(|| Padded::new(device, options.max_batch.get())).transpose() {
            Ok(padded) => padded,
            Err(e) => {
                eprintln!("vagen: {e}; decoding without CUDA graphs (engine.cuda_graphs = false skips them)");
                None
            }
        };
        kv.padded_rows = padded.as_ref().map(Padded::rows);
        let mut slots = Slots::new(bytes, options.kv_budget());
        slots.first_room = kv.padded_rows;
        let schedule = Scheduler::new(options.clone(), slots);
        Cache { schedule, kv, padded, flash: Choice::new(flash), pending: None }
    }
}

impl Engine {
    pub fn new(options: EngineOptions) -> Self {
        Engine {
            options,
            cache: None,
            live: HashMap::new(),
            next: 0,
            aborted: vec![],
            idle: true,
            refresh: None,
            version: None,
        }
    }

    /// Weights that change while rows run (asynchronous RL): `refresh` is polled when a
    /// round starts (the engine was idle) and before every decode step. A version other
    /// than the last one means the model now holds new weights: cached rows are forgotten,
    /// running rows are recomputed whole with the new weights before their next token, and
    /// every token records the version that sampled it ([`Generation::versions`]).
    pub fn set_refresh(&mut self, refresh: Refresh) {
        self.refresh = Some(refresh);
    }

    pub fn stats(&self) -> EngineStats {
        let Some(c) = &self.cache else { return EngineStats::default() };
        let slots = &c.schedule.slots;
        EngineStats { peak_kv_bytes: slots.peak_bytes, kv_allocations: slots.allocations, ..c.schedule.stats.clone() }
    }

    /// Bytes the cache holds now.
    pub fn kv_bytes(&self) -> usize {
        self.cache.as_ref().map_or(0, |c| c.schedule.slots.bytes())
    }

    /// Requests waiting or being decoded.
    pub fn pending(&self) -> usize {
        self.live.len()
    }

    /// Forgets every cached sequence (the weights changed, or a new rollout starts) and,
    /// when no request is running, releases the memory; the figures stay.
    pub fn clear(&mut self) {
        let Some(c) = &mut self.cache else { return };
        if self.live.is_empty() {
            c.schedule.slots.clear();
            c.kv.clear();
        } else {
            c.schedule.forget_cached();
        }
    }

    /// Forgets every cached sequence not running and keeps the memory (and the CUDA graphs
    /// that read it): the next prompts are prefilled whole.
    pub fn forget_cached(&mut self) {
        if let Some(c) = &mut self.cache {
            c.schedule.forget_cached();
        }
    }

    /// Forgets every request it holds (unanswered) and every cached sequence, and releases
    /// the memory: a caller that gave up on a round (an error elsewhere) starts afresh.
    pub fn reset(&mut self) {
        self.forget_requests();
        self.clear();
    }

    /// Forgets every request it holds; the cached rows stay.
    fn forget_requests(&mut self) {
        self.live.clear();
        self.aborted.clear();
        self.idle = true;
        if let Some(c) = &mut self.cache {
            c.schedule.forget_requests();
            c.pending = None;
        }
    }

    /// Holds `request` until a step admits it (between any two steps: a running batch takes
    /// it in). `options` gives its sampling, stop strings, `top_logprobs` and a cap on
    /// `max_new_tokens` (its seed is unused: the request brings its own). A request that
    /// could never run (a bad prompt, a trajectory already running, a cap past the context,
    /// an unserved adapter, more memory than the budget) is refused here, alone.
    pub fn submit(&mut self, model: &Model, request: EngineRequest, options: &GenerateOptions) -> Result<RequestId> {
        self.enqueue(model, request, options, self.next)
    }

    /// [`Self::submit`], errors naming the request as prompt `which`.
    fn enqueue(
        &mut self,
        model: &Model,
        request: EngineRequest,
        options: &GenerateOptions,
        which: usize,
    ) -> Result<RequestId> {
        let lm = &model.lm;
        check_sampling(options)?;
        let cap = request.max_new_tokens.min(options.max_new_tokens);
        check_prompt(lm, which, &request.ids, cap)?;
        let served = lm.model.served_adapters();
        if request.adapter > served {
            return Err(Error::Invalid(format!(
                "adapter {} is not served here (this model serves {served})",
                request.adapter
            )));
        }
        let cache = self.cache.get_or_insert_with(|| Cache::new(model, &self.options));
        cache.schedule.set_limits(&self.options);
        if cache.schedule.holds_key(request.key) {
            return Err(Error::Invalid(format!("trajectory {} already has a request in the engine", request.key)));
        }
        cache.schedule.fits(request.ids.len(), cap)?;
        let mut prompted = Prompted::new(model.vision.as_ref(), &request)?;
        let content = std::mem::take(&mut prompted.content);
        let r = self.next;
        self.next += 1;
        cache.schedule.submit(r, Ask { key: request.key, content, cap, seed: request.seed });
        let sampler = Sampler::new(options.temperature, options.top_p, options.top_k, 0);
        let (stop, top_logprobs) = (options.stop.clone(), options.top_logprobs);
        self.live.insert(r, Live { request, prompted, sampler, stop, top_logprobs });
        Ok(RequestId(r))
    }

    /// Stops a request: a waiting one never runs, a running one leaves the batch before the
    /// next decode; either is reported finished ([`crate::FinishReason::Cancelled`]) by the
    /// next step. False when the engine does not hold it (it already finished).
    pub fn abort(&mut self, id: RequestId) -> bool {
        let Some(c) = &mut self.cache else { return false };
        if !self.live.contains_key(&id.0) {
            return false;
        }
        if !c.schedule.cancel(&[id.0]).is_empty() {
            self.aborted.push(id.0);
        }
        true
    }

    /// One step of the engine loop: waiting requests join the batch as far as its room and
    /// memory allow (their prompts prefilled, each sampling its first token), then every
    /// running row decodes one token; rows that end leave. An `Err` fails every request the
    /// engine held (they are forgotten and the cache cleared).
    pub fn step(&mut self, model: &Model) -> Result<StepOutput> {
        let _guard = tch::no_grad_guard();
        let mut out = StepOutput::default();
        let result = self.try_step(model, &mut out);
        if let Err(e) = result {
            // The schedule runs ahead of the tensors (a planned wave's rows already claim
            // their prompts): after a step that failed part-way no cached row is trusted.
            self.reset();
            return Err(e);
        }
        if self.live.is_empty() {
            self.idle = true;
        }
        Ok(out)
    }

    fn try_step(&mut self, model: &Model, out: &mut StepOutput) -> Result<()> {
        let Some(cache) = self.cache.as_mut() else { return Ok(()) };
        for r in std::mem::take(&mut self.aborted) {
            let live = self.live.remove(&r).expect("an aborted request is held");
            let row = Row { finish: Some(crate::FinishReason::Cancelled), ..Default::default() };
            out.finished.push((RequestId(r), row.finish(&model.tokenizer, &live.stop)?));
        }
        if cache.schedule.done() {
            return Ok(());
        }
        let mut weights = Weights { refresh: self.refresh.as_mut(), version: &mut self.version };
        if std::mem::take(&mut self.idle) {
            cache.schedule.now += 1;
            if weights.changed()? {
                cache.schedule.forget_cached();
            }
        }
        cache.schedule.set_limits(&self.options);
        let c = model.config();
        let heads = (c.num_key_value_heads as i64, c.num_attention_heads as i64, c.head_dim as i64);
        let flash = cache.flash.kernel(model.lm.model.device(), model.lm.model.kind(), heads);
        if flash.is_some() {
            // Flash reads any row: rows are slots, and moving one copies nothing.
            cache.kv.use_slots();
        }
        let mut runner = Runner {
            model,
            live: &self.live,
            kv: &mut cache.kv,
            padded: cache.padded.as_mut(),
            flash,
            version: *weights.version,
            out,
            pending: &mut cache.pending,
            ahead: self.options.step_ahead,
        };
        let schedule = &mut cache.schedule;
        runner.retire(schedule)?;
        if schedule.waiting() && schedule.active.len() < self.options.max_batch.get() {
            // Requests join a batch whose rows are all known to run.
            runner.flush(schedule)?;
            runner.retire(schedule)?;
        }
        if schedule.waiting()
            && let Some(moves) = schedule.reserve()?
        {
            runner.kv.apply(&moves)?;
            while let Some(wave) = schedule.admit()? {
                runner.kv.apply(&wave.moves)?;
                for p in &wave.prefills {
                    runner.prefill(schedule, p)?;
                }
            }
        }
        runner.retire(schedule)?;
        if !schedule.active.is_empty() {
            if weights.changed()? {
                // The step in flight sampled with the old weights.
                runner.flush(schedule)?;
                runner.retire(schedule)?;
                runner.version = *weights.version;
                if schedule.active.is_empty() {
                    // Every row ended with the step in flight: none to recompute, but the
                    // cached rows hold the old weights' keys all the same.
                    schedule.forget_cached();
                } else {
                    for p in &schedule.recompute() {
                        runner.prefill(schedule, p)?;
                    }
                }
            } else {
                runner.decode(schedule)?;
            }
            runner.retire(schedule)?;
        }
        for (id, _) in &out.finished {
            self.live.remove(&id.0);
        }
        Ok(())
    }

    /// Continues every request; the generations come back in request order. `options`
    /// gives sampling, stop strings and `max_new_tokens` (its seed is unused: each request
    /// brings its own). The engine must hold no other request (a server drives
    /// [`Self::submit`] and [`Self::step`] itself).
    pub fn generate(
        &mut self,
        model: &Model,
        requests: &[EngineRequest],
        options: &GenerateOptions,
    ) -> Result<Vec<Generation>> {
        if !self.live.is_empty() {
            return Err(Error::Invalid(format!("the engine is running {} other requests", self.live.len())));
        }
        let mut keys: Vec<u64> = requests.iter().map(|r| r.key).collect();
        keys.sort_unstable();
        if let Some(w) = keys.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::Invalid(format!("two requests of one call continue trajectory {}", w[0])));
        }
        let mut ids = Vec::with_capacity(requests.len());
        for (i, r) in requests.iter().enumerate() {
            let copy = EngineRequest { ids: r.ids.clone(), images: r.images.clone(), ..*r };
            match self.enqueue(model, copy, options, i) {
                Ok(id) => ids.push(id),
                Err(e) => {
                    self.forget_requests();
                    return Err(e);
                }
            }
        }
        let mut out: HashMap<RequestId, Generation> = HashMap::with_capacity(ids.len());
        while out.len() < ids.len() {
            out.extend(self.step(model)?.finished);
        }
        Ok(ids.iter().map(|id| out.remove(id).expect("every request ends")).collect())
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
        engine.generate(self, requests, options)
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
