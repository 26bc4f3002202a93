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

mod slots;

use crate::generate::{Ends, Row, validate};
use crate::image_processor::PixelValues;
use crate::sampling::{Sampler, uniform};
use crate::vl::MropePositions;
use crate::{Error, GenerateOptions, Generation, Qwen2ForCausalLM, Result, Tokenizer, Vision};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use serde::{Deserialize, Serialize};
use slots::SlotStore;
use std::collections::VecDeque;
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
    pub max_batch: usize,
    /// Prompt tokens one prefill forward takes at most (rows × longest new part, padding
    /// included): bounds the activations of a wave of long prompts.
    pub max_prefill_tokens: usize,
    /// Memory for cached keys and values, in MiB. Past it, the least recently used cached
    /// sequences not being decoded are evicted (their next turn is prefilled whole).
    pub kv_cache_mib: usize,
    /// Reuse cached keys and values. Off, every prompt is prefilled whole: the baseline the
    /// tests compare reuse against.
    pub reuse: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            kind: EngineKind::Continuous,
            max_batch: 64,
            max_prefill_tokens: 16384,
            kv_cache_mib: 4096,
            reuse: true,
        }
    }
}

impl EngineOptions {
    pub fn check(&self) -> Result<()> {
        for (name, v) in [
            ("max_batch", self.max_batch),
            ("max_prefill_tokens", self.max_prefill_tokens),
            ("kv_cache_mib", self.kv_cache_mib),
        ] {
            if v == 0 {
                return Err(Error::Invalid(format!("engine {name} must be at least 1")));
            }
        }
        Ok(())
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
}

/// What the engine did, summed over its calls since it was created or cleared.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
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
}

impl EngineStats {
    /// Prompt tokens not run through the model.
    pub fn saved_tokens(&self) -> usize {
        self.reused_tokens + self.shared_tokens
    }
}

/// A row being decoded; `active[i]` lives in store row `i`.
struct Active {
    request: usize,
    row: Row,
    rng: ChaCha8Rng,
    cap: usize,
}

/// Prompt tokens a request must gain by waiting for a request of the same wave to be
/// prefilled (and copying it) rather than starting from what is cached: each wait is one
/// more prefill forward.
const MIN_WAIT_GAIN: usize = 16;

/// Where a prompt's reusable prefix comes from.
#[derive(Clone, Copy)]
struct Source {
    /// The cached row's serial, and how many of its positions the prompt shares.
    serial: u64,
    len: usize,
    own: bool,
}

pub struct Engine {
    pub options: EngineOptions,
    store: Option<SlotStore>,
    stats: EngineStats,
    calls: u64,
}

impl Engine {
    pub fn new(options: EngineOptions) -> Result<Self> {
        options.check()?;
        Ok(Engine { options, store: None, stats: EngineStats::default(), calls: 0 })
    }

    pub fn stats(&self) -> EngineStats {
        let mut s = self.stats.clone();
        s.peak_kv_bytes = self.store.as_ref().map_or(0, |st| st.peak_bytes);
        s
    }

    /// Bytes the cache holds now.
    pub fn kv_bytes(&self) -> usize {
        self.store.as_ref().map_or(0, SlotStore::bytes)
    }

    /// Forgets every cached sequence (the weights changed, or a new rollout starts) and
    /// releases its memory; the figures stay.
    pub fn clear(&mut self) {
        if let Some(s) = &mut self.store {
            s.clear();
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
        let prompts = requests.iter().map(|r| Prompted::new(vision, r)).collect::<Result<Vec<_>>>()?;
        let _guard = tch::no_grad_guard();
        self.calls += 1;
        let store = self.store.get_or_insert_with(|| {
            SlotStore::new(lm.config(), lm.model.kind(), lm.model.device(), self.options.kv_cache_mib << 20)
        });
        store.budget = self.options.kv_cache_mib << 20;
        let mut call = Call {
            lm,
            vision,
            prompts,
            ends: Ends { eos, stop: &options.stop, tokenizer },
            sampler: Sampler::new(options.temperature, options.top_p, options.top_k, 0),
            requests,
            caps,
            options: &self.options,
            store,
            stats: &mut self.stats,
            now: self.calls,
            active: vec![],
            queue: (0..requests.len()).collect(),
            out: (0..requests.len()).map(|_| None).collect(),
        };
        // Every row of this call fits: its prompt and answer (the store keeps cached rows
        // only as far as the budget allows).
        let need = requests.iter().zip(&call.caps).map(|(r, c)| r.ids.len() + c).max().unwrap_or(0);
        call.make_room(0, need, requests.len().min(self.options.max_batch))?;
        call.run()?;
        call.out.into_iter().map(|g| Ok(g.expect("every request ends"))).collect()
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
    fn new(vision: Option<&Vision>, r: &EngineRequest) -> Result<Self> {
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

/// A key of an image's pixels and grid.
fn image_key(image: &PixelValues) -> Result<u64> {
    use std::hash::{Hash, Hasher};
    let values = Vec::<f32>::try_from(image.values.flatten(0, -1).to_kind(Kind::Float))?;
    let mut h = std::hash::DefaultHasher::new();
    image.grid.hash(&mut h);
    values.iter().for_each(|v| v.to_bits().hash(&mut h));
    Ok(h.finish())
}

/// One `generate` call's state.
struct Call<'a> {
    lm: &'a Qwen2ForCausalLM,
    vision: Option<&'a Vision>,
    prompts: Vec<Prompted>,
    ends: Ends<'a>,
    sampler: Sampler,
    requests: &'a [EngineRequest],
    caps: Vec<usize>,
    options: &'a EngineOptions,
    store: &'a mut SlotStore,
    stats: &'a mut EngineStats,
    now: u64,
    active: Vec<Active>,
    queue: VecDeque<usize>,
    out: Vec<Option<Generation>>,
}

impl Call<'_> {
    fn run(&mut self) -> Result<()> {
        loop {
            self.admit()?;
            self.retire()?;
            if self.active.is_empty() {
                if self.queue.is_empty() {
                    return Ok(());
                }
                continue;
            }
            self.decode()?;
            self.retire()?;
        }
    }

    /// The reusable prefix of request `r`'s prompt among the cached rows (at least one
    /// prompt token is always left to prefill: its logits start the answer).
    fn source(&self, r: usize) -> Option<Source> {
        if !self.options.reuse {
            return None;
        }
        let req = &self.requests[r];
        let content = &self.prompts[r].content;
        let limit = content.len() - 1;
        let mut best: Option<Source> = None;
        for slot in self.store.slots.iter().filter(|s| s.owner.is_some()) {
            let len = common_prefix(&slot.ids, content).min(limit);
            let own = slot.owner == Some(req.key);
            let better = match best {
                None => len > 0 || own,
                Some(b) => len > b.len || (len == b.len && own && !b.own),
            };
            if better {
                best = Some(Source { serial: slot.serial, len, own });
            }
        }
        best
    }

    /// Moves waiting requests into the decode batch while there is room: a wave at a time,
    /// each prefilled in one or more forwards. A request whose prompt shares more with one
    /// already in the wave than with anything cached waits for the next wave and copies it.
    fn admit(&mut self) -> Result<()> {
        while !self.queue.is_empty() && self.active.len() < self.options.max_batch {
            let room = self.options.max_batch - self.active.len();
            let mut wave: Vec<(usize, Option<Source>)> = vec![];
            let mut deferred = VecDeque::new();
            while let Some(r) = self.queue.pop_front() {
                if wave.len() == room {
                    deferred.push_back(r);
                    continue;
                }
                let cached = self.source(r);
                let in_wave = wave
                    .iter()
                    .map(|&(q, _)| common_prefix(&self.prompts[q].content, &self.prompts[r].content))
                    .max()
                    .unwrap_or(0)
                    .min(self.requests[r].ids.len() - 1);
                if self.options.reuse && in_wave >= cached.map_or(0, |s| s.len) + MIN_WAIT_GAIN {
                    deferred.push_back(r);
                } else {
                    wave.push((r, cached));
                }
            }
            self.queue = deferred;
            let running = !self.active.is_empty();
            let mut placed = self.place(&wave)?;
            if placed == 0 && !running && wave.len() > 1 {
                // Later members' sources may hold the only rows: the first goes alone.
                for &(r, _) in wave[1..].iter().rev() {
                    self.queue.push_front(r);
                }
                wave.truncate(1);
                placed = self.place(&wave)?;
            }
            if placed == 0 {
                if !running {
                    return Err(self.store.over_budget(self.store.rows() + 1, self.store.capacity()));
                }
                // No memory until a running row ends.
                for &(r, _) in wave.iter().rev() {
                    self.queue.push_front(r);
                }
                return Ok(());
            }
            for &(r, _) in wave[placed..].iter().rev() {
                self.queue.push_front(r);
            }
            if running {
                self.stats.joined_running += placed;
            }
            self.prefill(self.active.len() - placed)?;
        }
        Ok(())
    }

    /// Puts the wave's prompts (as many as memory allows, in order) in rows after the
    /// active ones, their reusable prefixes in place; returns how many were placed.
    fn place(&mut self, wave: &[(usize, Option<Source>)]) -> Result<usize> {
        // Rows a later member of the wave still reads.
        let needed: Vec<Option<u64>> = wave.iter().map(|&(_, s)| s.map(|s| s.serial)).collect();
        for (j, &(r, source)) in wave.iter().enumerate() {
            let target = self.active.len();
            let req = &self.requests[r];
            match source {
                Some(s) if s.own => {
                    let at = self.store.find(s.serial).expect("a source row is kept");
                    self.store.swap(at, target);
                    let cached = self.store.slots[target].ids.len();
                    if common_prefix(&self.store.slots[target].ids, &self.prompts[r].content) < cached {
                        self.stats.fallbacks += 1;
                    }
                    self.store.slots[target].ids.truncate(s.len);
                    self.store.slots[target].used = self.now;
                    self.stats.reused_tokens += s.len;
                }
                _ => {
                    let own = self.store.slots.iter().position(|s| s.owner == Some(req.key));
                    if let Some(o) = own
                        && self.options.reuse
                    {
                        // The trajectory's cached sequence shares nothing it can use.
                        self.stats.fallbacks += usize::from(!self.store.slots[o].ids.is_empty());
                    }
                    let reserved = |slot: &slots::Slot| needed[j..].contains(&Some(slot.serial));
                    match (self.free_row(target, own, &reserved)?, source) {
                        (Some(row), _) => {
                            self.store.swap(row, target);
                            self.store.claim(target, req.key, self.now);
                            if let Some(s) = source {
                                let from = self.store.find(s.serial).expect("a source row is kept");
                                let len = self.still_shared(from, r, s.len);
                                self.store.copy_prefix(from, target, len);
                                self.stats.shared_tokens += len;
                            }
                        }
                        // No row to copy into: the request takes the cached row it shares a
                        // prefix with (its owner's next turn starts over).
                        (None, Some(s))
                            if !needed[j + 1..].contains(&Some(s.serial))
                                && self.store.find(s.serial).is_some_and(|at| at >= target) =>
                        {
                            let at = self.store.find(s.serial).expect("just found");
                            let len = self.still_shared(at, r, s.len);
                            self.store.swap(at, target);
                            let mut held = std::mem::take(&mut self.store.slots[target].ids);
                            held.truncate(len);
                            self.store.claim(target, req.key, self.now);
                            self.store.slots[target].ids = held;
                            self.stats.shared_tokens += len;
                            self.stats.evictions += 1;
                        }
                        (None, _) => return Ok(j),
                    }
                }
            }
            self.stats.requests += 1;
            self.stats.prompt_tokens += req.ids.len();
            self.active.push(Active {
                request: r,
                row: Row::default(),
                rng: ChaCha8Rng::seed_from_u64(req.seed),
                cap: self.caps[r],
            });
        }
        Ok(wave.len())
    }

    /// What row `row` still shares with request `r`'s prompt, at most `planned`: an earlier
    /// member of the wave may have cut the row back to its own shared part since.
    fn still_shared(&self, row: usize, r: usize, planned: usize) -> usize {
        common_prefix(&self.store.slots[row].ids, &self.prompts[r].content).min(planned)
    }

    /// A row at or after `first` for a new sequence: the request's own old row, a free
    /// one, a new one within the budget, or the least recently used cached one.
    fn free_row(
        &mut self,
        first: usize,
        own: Option<usize>,
        reserved: &dyn Fn(&slots::Slot) -> bool,
    ) -> Result<Option<usize>> {
        if let Some(o) = own.filter(|&o| o >= first && !reserved(&self.store.slots[o])) {
            return Ok(Some(o));
        }
        if let Some(f) = (first..self.store.rows()).find(|&i| self.store.slots[i].owner.is_none()) {
            return Ok(Some(f));
        }
        let (rows, cap) = (self.store.rows(), self.store.capacity());
        if self.store.bytes_for(rows + 1, cap) <= self.store.budget {
            let grown = (rows * 2).max(rows + 1).min(self.store.budget / self.store.bytes_for(1, cap).max(1));
            self.store.grow(grown, cap)?;
            return Ok(Some(rows));
        }
        let victim =
            (first..rows).filter(|&i| !reserved(&self.store.slots[i])).min_by_key(|&i| self.store.slots[i].used);
        if let Some(v) = victim {
            self.store.slots[v].owner = None;
            self.stats.evictions += 1;
        }
        Ok(victim)
    }

    /// Capacity for `cap` positions a row and `rows` rows: more room when the budget allows
    /// it for every row, else fewer rows, the least recently used cached ones evicted (never the first
    /// `keep`, which are being decoded).
    fn make_room(&mut self, keep: usize, cap: usize, rows: usize) -> Result<()> {
        let cap = cap.max(self.store.capacity()).next_multiple_of(64);
        let roomy = if cap > self.store.capacity() { (cap + cap / 2).next_multiple_of(64) } else { cap };
        let rows = self.store.rows().max(keep).max(rows);
        if self.store.bytes_for(rows, roomy) <= self.store.budget {
            return self.store.grow(rows, roomy);
        }
        let fit = self.store.budget / self.store.bytes_for(1, cap).max(1);
        if fit < keep.max(1) {
            return Err(self.store.over_budget(keep.max(1), cap));
        }
        if fit < rows {
            // Keep the most recently used cached rows in front, then drop the rest.
            let mut cached: Vec<usize> = (keep..rows).collect();
            cached.sort_by_key(|&i| std::cmp::Reverse(self.store.slots[i].used));
            let order: Vec<u64> = cached.iter().map(|&i| self.store.slots[i].serial).collect();
            for (k, serial) in order.iter().enumerate() {
                if let Some(at) = self.store.slots.iter().position(|s| s.serial == *serial) {
                    self.store.swap(at, keep + k);
                }
            }
            let dropped = self.store.slots[fit..].iter().filter(|s| s.owner.is_some()).count();
            self.stats.evictions += dropped;
            self.store.truncate(fit);
        }
        self.store.grow(fit.min(rows), cap)
    }

    /// Runs the new part of the prompts in rows `from..` of the decode batch and samples
    /// each row's first token, in forwards of at most `max_prefill_tokens`.
    fn prefill(&mut self, from: usize) -> Result<()> {
        let mut start = from;
        while start < self.active.len() {
            let mut end = start + 1;
            let new = |a: &Active, s: &SlotStore, i: usize| self.requests[a.request].ids.len() - s.slots[i].ids.len();
            let mut longest = new(&self.active[start], self.store, start);
            while end < self.active.len() {
                let l = longest.max(new(&self.active[end], self.store, end));
                if l * (end + 1 - start) > self.options.max_prefill_tokens {
                    break;
                }
                (longest, end) = (l, end + 1);
            }
            self.prefill_rows(start, end)?;
            start = end;
        }
        Ok(())
    }

    fn prefill_rows(&mut self, start: usize, end: usize) -> Result<()> {
        let device = self.lm.model.device();
        let requests = self.requests;
        let rows: Vec<usize> = (start..end).collect();
        let reqs: Vec<usize> = rows.iter().map(|&i| self.active[i].request).collect();
        let past: Vec<usize> = rows.iter().map(|&i| self.store.slots[i].ids.len()).collect();
        let parts: Vec<&[u32]> = reqs.iter().zip(&past).map(|(&r, &p)| &requests[r].ids[p..]).collect();
        let t = parts.iter().map(|p| p.len()).max().unwrap_or(1);
        let n = rows.len() as i64;
        let mut ids = Vec::with_capacity(rows.len() * t);
        for p in &parts {
            ids.extend(p.iter().map(|&x| x as i64).chain(std::iter::repeat_n(0, t - p.len())));
        }
        let ids = Tensor::from_slice(&ids).view([n, t as i64]).to_device(device);
        let starts = Tensor::from_slice(&past.iter().map(|&p| p as i64).collect::<Vec<_>>()).to_device(device);
        let steps = starts.view([n, 1]) + Tensor::arange(t as i64, (Kind::Int64, device)).view([1, -1]);
        let lens: Vec<usize> = parts.iter().map(|p| p.len()).collect();
        let keys = past.iter().zip(&lens).map(|(p, l)| p + l).max().unwrap_or(0);
        // Query i of a row sits at its place in the cache and sees every key up to it. A
        // padding query's keys are never kept; it sees real ones, so no attention row is
        // empty.
        let mask = Tensor::arange(keys as i64, (Kind::Int64, device))
            .view([1, 1, 1, -1])
            .le_tensor(&steps.unsqueeze(1).unsqueeze(-1));
        let (embeds, positions) = match self.vision {
            None => (self.lm.model.embed(&ids), steps),
            Some(v) => (self.vl_embeds(v, &ids, &reqs, &past)?, self.vl_positions(&reqs, &past, t)),
        };
        let hidden = {
            let mut view = self.store.view(start, &past, &lens, keys);
            self.lm.model.forward_cached(embeds, &positions, &mask, &mut view)
        };
        let last: Vec<i64> = lens.iter().map(|&l| l as i64 - 1).collect();
        let last = Tensor::from_slice(&last).to_device(device);
        let hidden = hidden.gather(1, &last.view([n, 1, 1]).expand([n, 1, hidden.size()[2]], false), false);
        let logits = self.logits(&hidden.squeeze_dim(1));
        for ((&i, &r), &p) in rows.iter().zip(&reqs).zip(&past) {
            let new = &self.prompts[r].content[p..];
            self.store.slots[i].ids.extend_from_slice(new);
        }
        self.stats.prefill_calls += 1;
        self.stats.prefilled_tokens += lens.iter().sum::<usize>();
        self.sample(start, end, &logits)
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

    /// `[3, rows, t]` M-RoPE positions of the new parts (padding at 0).
    fn vl_positions(&self, reqs: &[usize], past: &[usize], t: usize) -> Tensor {
        let n = reqs.len();
        let mut data = vec![0i64; 3 * n * t];
        for (row, (&r, &p)) in reqs.iter().zip(past).enumerate() {
            let m = self.prompts[r].mrope.as_ref().expect("a VL prompt has M-RoPE positions");
            for (j, pos) in m.positions[p..].iter().enumerate() {
                for (axis, &v) in pos.iter().enumerate() {
                    data[(axis * n + row) * t + j] = v;
                }
            }
        }
        Tensor::from_slice(&data).view([3, n as i64, t as i64]).to_device(self.lm.model.device())
    }

    /// One token for every row of the decode batch.
    fn decode(&mut self) -> Result<()> {
        let device = self.lm.model.device();
        let m = self.active.len();
        let feed: Vec<i64> = self.active.iter().map(|a| *a.row.ids.last().expect("a sampled token") as i64).collect();
        let past: Vec<usize> = (0..m).map(|i| self.store.slots[i].ids.len()).collect();
        let keys = past.iter().max().unwrap_or(&0) + 1;
        let pos = Tensor::from_slice(&past.iter().map(|&p| p as i64).collect::<Vec<_>>()).to_device(device);
        let mask = Tensor::arange(keys as i64, (Kind::Int64, device))
            .view([1, 1, 1, -1])
            .le_tensor(&pos.view([m as i64, 1, 1, 1]));
        // A generated token's position continues its prompt's: its place plus the M-RoPE
        // delta, on all three axes.
        let positions = match self.vision {
            None => pos.view([m as i64, 1]),
            Some(_) => {
                let delta = |a: &Active| self.prompts[a.request].mrope.as_ref().map_or(0, |p| p.delta);
                let deltas: Vec<i64> = self.active.iter().map(delta).collect();
                let with = pos + Tensor::from_slice(&deltas).to_device(device);
                with.view([1, m as i64, 1]).expand([3, m as i64, 1], false)
            }
        };
        let embeds = self.lm.model.embed(&Tensor::from_slice(&feed).view([m as i64, 1]).to_device(device));
        let hidden = {
            let mut view = self.store.view(0, &past, &vec![1; m], keys);
            self.lm.model.forward_cached(embeds, &positions, &mask, &mut view)
        };
        for (i, &t) in feed.iter().enumerate() {
            self.store.slots[i].ids.push(t as u64);
        }
        self.stats.decode_steps += 1;
        let logits = self.logits(&hidden.select(1, 0));
        self.sample(0, m, &logits)
    }

    /// A token for rows `start..end` from their logits `[end - start, vocab]`.
    fn sample(&mut self, start: usize, end: usize, logits: &Tensor) -> Result<()> {
        let draws: Vec<f64> = self.active[start..end].iter_mut().map(|a| uniform(&mut a.rng)).collect();
        let (tokens, logprobs) = self.sampler.step_with(logits, &draws);
        let tokens: Vec<i64> = Vec::try_from(&tokens)?;
        let logprobs: Vec<f32> = Vec::try_from(&logprobs.to_kind(Kind::Float))?;
        for (k, a) in self.active[start..end].iter_mut().enumerate() {
            a.row.push(tokens[k] as u32, logprobs[k], a.cap, &self.ends)?;
        }
        self.stats.generated_tokens += end - start;
        Ok(())
    }

    /// Rows that ended leave the decode batch: the last active row takes their place, and
    /// their cached sequence stays behind the active ones.
    fn retire(&mut self) -> Result<()> {
        let mut i = 0;
        while i < self.active.len() {
            if self.active[i].row.finish.is_none() {
                i += 1;
                continue;
            }
            let last = self.active.len() - 1;
            self.store.swap(i, last);
            let done = self.active.swap_remove(i);
            self.store.slots[last].used = self.now;
            if !self.active.is_empty() || !self.queue.is_empty() {
                self.stats.rows_freed_early += 1;
                self.stats.freed_at_length += usize::from(done.row.finish == Some(crate::FinishReason::Length));
            }
            self.out[done.request] = Some(done.row.finish(self.ends.tokenizer, self.ends.stop)?);
        }
        Ok(())
    }
}

fn common_prefix(a: &[u64], b: &[u64]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
