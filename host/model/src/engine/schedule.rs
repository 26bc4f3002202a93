//! The engine's scheduler: which requests join the decode batch and where their prompts'
//! reusable prefixes come from, which rows are evicted, copied or moved, which tokens each
//! forward runs. It works on plain data (the rows' metadata in [`Slots`], the prompts'
//! content keys, the sampled rows) and hands the runner plans: a [`Wave`] (cache moves,
//! then prefill forwards) or a [`Decode`] step. The runner applies the moves to the
//! tensors, runs the forwards and gives back the sampled tokens ([`Scheduler::record`]).

use super::slots::{Move, Slot, Slots};
use super::{EngineOptions, EngineStats};
use crate::generate::{Ends, Row};
use crate::{FinishReason, Result};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::collections::{HashMap, VecDeque};

/// Prompt tokens a request must gain by waiting for a request of the same wave to be
/// prefilled (and copying it) rather than starting from what is cached: each wait is one
/// more prefill forward.
const MIN_WAIT_GAIN: usize = 16;

/// What the scheduler knows of a request.
pub(crate) struct Ask {
    /// The trajectory: its cached sequence is extended in place.
    pub key: u64,
    /// The prompt's content keys, one per position (what cached rows are compared with).
    pub content: Vec<u64>,
    /// Tokens it may generate.
    pub cap: usize,
    /// Seeds its draw stream.
    pub seed: u64,
}

/// A row being decoded; `active[i]` lives in cache row `i`.
pub(crate) struct Active {
    pub request: usize,
    pub row: Row,
    rng: ChaCha8Rng,
    cap: usize,
}

/// Where a prompt's reusable prefix comes from.
#[derive(Clone, Copy)]
struct Source {
    /// The cached row's serial, and how many of its positions the prompt shares.
    serial: u64,
    len: usize,
    own: bool,
}

/// Requests joining the decode batch: the cache moves that place them (rows claimed,
/// prefixes reused in place or copied, rows evicted), then their prompts' new parts in
/// forwards of at most `max_prefill_tokens` (rows × longest new part).
#[derive(Debug, PartialEq)]
pub(crate) struct Wave {
    pub moves: Vec<Move>,
    pub prefills: Vec<Prefill>,
}

/// One prefill forward over decode rows `start..start + rows.len()`.
#[derive(Debug, PartialEq)]
pub(crate) struct Prefill {
    pub start: usize,
    pub rows: Vec<PrefillRow>,
}

/// A row's new part: request `request`'s prompt from position `past` on, `len` tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PrefillRow {
    pub request: usize,
    pub past: usize,
    pub len: usize,
}

/// One decode forward over rows `0..feed.len()`: each feeds its last sampled token at
/// position `past[i]`.
#[derive(Debug, PartialEq)]
pub(crate) struct Decode {
    pub feed: Vec<u32>,
    pub past: Vec<usize>,
}

/// What retiring ended rows did: cache moves (ended rows go behind the active ones), and
/// each ended request with its row.
pub(crate) struct Retired {
    pub moves: Vec<Move>,
    pub done: Vec<(usize, Row)>,
}

/// The engine's schedule: the cached rows' metadata, the requests it holds (by the
/// engine's request number), those waiting and those being decoded.
pub(crate) struct Scheduler {
    asks: HashMap<usize, Ask>,
    /// The engine's limits, as of the last step.
    pub options: EngineOptions,
    pub slots: Slots,
    pub stats: EngineStats,
    /// The engine's round counter (a round: from idle to idle): when rows were last used.
    pub now: u64,
    pub active: Vec<Active>,
    queue: VecDeque<usize>,
}

impl Scheduler {
    pub fn new(options: EngineOptions, slots: Slots) -> Self {
        Scheduler {
            asks: HashMap::new(),
            options,
            slots,
            stats: EngineStats::default(),
            now: 0,
            active: vec![],
            queue: VecDeque::new(),
        }
    }

    /// The engine's limits as they are now (its options are the caller's to change):
    /// batch, prefill and reuse settings, and the cache's byte budget.
    pub fn set_limits(&mut self, options: &EngineOptions) {
        self.options = options.clone();
        self.slots.budget = options.kv_budget();
    }

    /// A request to run, numbered `r` by the engine; it waits until [`Self::admit`] places it.
    pub fn submit(&mut self, r: usize, ask: Ask) {
        self.asks.insert(r, ask);
        self.queue.push_back(r);
    }

    /// Whether a request continues trajectory `key` now.
    pub fn holds_key(&self, key: u64) -> bool {
        self.asks.values().any(|a| a.key == key)
    }

    /// No request waits or decodes.
    pub fn done(&self) -> bool {
        self.active.is_empty() && self.queue.is_empty()
    }

    /// Some request waits for a row.
    pub fn waiting(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Forgets every request (a step failed part-way; the cached rows are cleared beside).
    pub fn forget_requests(&mut self) {
        self.asks.clear();
        self.active.clear();
        self.queue.clear();
    }

    /// Room for the waiting requests: rows for as many as the batch takes, each its longest
    /// prompt and answer. `None` while the rows being decoded leave too little memory (the
    /// requests wait until some end).
    pub fn reserve(&mut self) -> Result<Option<Vec<Move>>> {
        let need = self.queue.iter().map(|r| self.asks[r].content.len() + self.asks[r].cap).max().unwrap_or(0);
        let rows = (self.active.len() + self.queue.len()).min(self.options.max_batch.get());
        let keep = self.active.len();
        let cap = self.slots.positions_for(need);
        if keep > 0 && self.slots.bytes_for(keep + 1, cap) > self.slots.budget {
            return Ok(None);
        }
        self.make_room(keep, need, rows)?;
        Ok(Some(self.slots.take_moves()))
    }

    /// Refuses a prompt of `len` tokens and `cap` new ones that no row could ever hold.
    pub fn fits(&self, len: usize, cap: usize) -> Result<()> {
        let positions = (len + cap).next_multiple_of(64);
        if self.slots.bytes_for(1, positions) > self.slots.budget {
            return Err(self.slots.over_budget(1, positions));
        }
        Ok(())
    }

    /// The reusable prefix of request `r`'s prompt among the cached rows (at least one
    /// prompt token is always left to prefill: its logits start the answer).
    fn source(&self, r: usize) -> Option<Source> {
        if !self.options.reuse {
            return None;
        }
        let ask = &self.asks[&r];
        let limit = ask.content.len() - 1;
        let mut best: Option<Source> = None;
        for slot in self.slots.slots.iter().filter(|s| s.owner.is_some()) {
            let len = common_prefix(&slot.ids, &ask.content).min(limit);
            let own = slot.owner == Some(ask.key);
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

    /// The next wave of waiting requests while the decode batch has room; `None` when none
    /// can join now. A request whose prompt shares more with one already in the wave than
    /// with anything cached waits for the next wave and copies it.
    pub fn admit(&mut self) -> Result<Option<Wave>> {
        if self.queue.is_empty() || self.active.len() >= self.options.max_batch.get() {
            return Ok(None);
        }
        let mut wave = self.next_wave();
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
                return Err(self.slots.over_budget(self.slots.rows() + 1, self.slots.capacity()));
            }
            // No memory until a running row ends.
            for &(r, _) in wave.iter().rev() {
                self.queue.push_front(r);
            }
            return Ok(None);
        }
        for &(r, _) in wave[placed..].iter().rev() {
            self.queue.push_front(r);
        }
        if running {
            self.stats.joined_running += placed;
        }
        let prefills = self.prefills(self.active.len() - placed);
        Ok(Some(Wave { moves: self.slots.take_moves(), prefills }))
    }

    /// Waiting requests, in order, up to the batch's room, each with its cached source;
    /// those better served by copying a member of this wave stay queued.
    fn next_wave(&mut self) -> Vec<(usize, Option<Source>)> {
        let room = self.options.max_batch.get() - self.active.len();
        let mut wave: Vec<(usize, Option<Source>)> = vec![];
        let mut deferred = VecDeque::new();
        while let Some(r) = self.queue.pop_front() {
            if wave.len() == room {
                deferred.push_back(r);
                continue;
            }
            let cached = self.source(r);
            let content = &self.asks[&r].content;
            let in_wave = wave
                .iter()
                .map(|&(q, _)| common_prefix(&self.asks[&q].content, content))
                .max()
                .unwrap_or(0)
                .min(content.len() - 1);
            if self.options.reuse && in_wave >= cached.map_or(0, |s| s.len) + MIN_WAIT_GAIN {
                deferred.push_back(r);
            } else {
                wave.push((r, cached));
            }
        }
        self.queue = deferred;
        wave
    }

    /// Puts the wave's prompts (as many as memory allows, in order) in rows after the
    /// active ones, their reusable prefixes in place; returns how many were placed.
    fn place(&mut self, wave: &[(usize, Option<Source>)]) -> Result<usize> {
        // Rows a later member of the wave still reads.
        let needed: Vec<Option<u64>> = wave.iter().map(|&(_, s)| s.map(|s| s.serial)).collect();
        for (j, &(r, source)) in wave.iter().enumerate() {
            let target = self.active.len();
            let placed = match source {
                Some(s) if s.own => {
                    self.reuse_own(target, r, s);
                    true
                }
                _ => self.place_new(target, r, source, &needed[j..])?,
            };
            if !placed {
                return Ok(j);
            }
            let ask = &self.asks[&r];
            self.stats.requests += 1;
            self.stats.prompt_tokens += ask.content.len();
            let rng = ChaCha8Rng::seed_from_u64(ask.seed);
            self.active.push(Active { request: r, row: Row::default(), rng, cap: ask.cap });
        }
        Ok(wave.len())
    }

    /// The trajectory's own cached row, cut back to what the prompt shares with it.
    fn reuse_own(&mut self, target: usize, r: usize, s: Source) {
        let at = self.slots.find(s.serial).expect("a source row is kept");
        self.slots.swap(at, target);
        let slot = &mut self.slots.slots[target];
        if common_prefix(&slot.ids, &self.asks[&r].content) < slot.ids.len() {
            self.stats.fallbacks += 1;
        }
        slot.ids.truncate(s.len);
        slot.used = self.now;
        self.stats.reused_tokens += s.len;
    }

    /// A new sequence in row `target`, starting with a copy of `source`'s shared prefix;
    /// false when no row is free. `needed[0]` is this request's source, the rest those of
    /// later members of the wave (kept from eviction).
    fn place_new(&mut self, target: usize, r: usize, source: Option<Source>, needed: &[Option<u64>]) -> Result<bool> {
        let key = self.asks[&r].key;
        let own = self.slots.slots.iter().position(|s| s.owner == Some(key));
        if let Some(o) = own
            && self.options.reuse
        {
            // The trajectory's cached sequence shares nothing it can use.
            self.stats.fallbacks += usize::from(!self.slots.slots[o].ids.is_empty());
        }
        let reserved = |slot: &Slot| needed.contains(&Some(slot.serial));
        match (self.free_row(target, own, &reserved)?, source) {
            (Some(row), _) => {
                self.slots.swap(row, target);
                self.slots.claim(target, key, self.now);
                if let Some(s) = source {
                    let from = self.slots.find(s.serial).expect("a source row is kept");
                    let len = self.still_shared(from, r, s.len);
                    self.slots.copy_prefix(from, target, len);
                    self.stats.shared_tokens += len;
                }
                Ok(true)
            }
            // No row to copy into: the request takes the cached row it shares a prefix
            // with (its owner's next turn starts over).
            (None, Some(s))
                if !needed[1..].contains(&Some(s.serial))
                    && self.slots.find(s.serial).is_some_and(|at| at >= target) =>
            {
                let at = self.slots.find(s.serial).expect("just found");
                let len = self.still_shared(at, r, s.len);
                self.slots.swap(at, target);
                let mut held = std::mem::take(&mut self.slots.slots[target].ids);
                held.truncate(len);
                self.slots.claim(target, key, self.now);
                self.slots.slots[target].ids = held;
                self.stats.shared_tokens += len;
                self.stats.evictions += 1;
                Ok(true)
            }
            (None, _) => Ok(false),
        }
    }

    /// What row `row` still shares with request `r`'s prompt, at most `planned`: an earlier
    /// member of the wave may have cut the row back to its own shared part since.
    fn still_shared(&self, row: usize, r: usize, planned: usize) -> usize {
        common_prefix(&self.slots.slots[row].ids, &self.asks[&r].content).min(planned)
    }

    /// A row at or after `first` for a new sequence: the request's own old row, a free
    /// one, a new one within the budget, or the least recently used cached one.
    fn free_row(
        &mut self,
        first: usize,
        own: Option<usize>,
        reserved: &dyn Fn(&Slot) -> bool,
    ) -> Result<Option<usize>> {
        let slots = &mut self.slots;
        if let Some(o) = own.filter(|&o| o >= first && !reserved(&slots.slots[o])) {
            return Ok(Some(o));
        }
        if let Some(f) = (first..slots.rows()).find(|&i| slots.slots[i].owner.is_none()) {
            return Ok(Some(f));
        }
        let (rows, cap) = (slots.rows(), slots.capacity());
        if slots.bytes_for(rows + 1, cap) <= slots.budget {
            let grown = (rows * 2).max(rows + 1).min(slots.budget / slots.bytes_for(1, cap).max(1));
            slots.grow(grown, cap)?;
            return Ok(Some(rows));
        }
        let victim = (first..rows).filter(|&i| !reserved(&slots.slots[i])).min_by_key(|&i| slots.slots[i].used);
        if let Some(v) = victim {
            slots.slots[v].owner = None;
            self.stats.evictions += 1;
        }
        Ok(victim)
    }

    /// Capacity for `cap` positions a row and `rows` rows: more room when the budget allows
    /// it for every row, else fewer rows, the least recently used cached ones evicted
    /// (never the first `keep`, which are being decoded).
    fn make_room(&mut self, keep: usize, cap: usize, rows: usize) -> Result<()> {
        let slots = &mut self.slots;
        let cap = slots.positions_for(cap);
        let roomy = if cap > slots.capacity() { (cap + cap / 2).next_multiple_of(64) } else { cap };
        let rows = slots.rows().max(keep).max(rows);
        if slots.bytes_for(rows, roomy) <= slots.budget {
            return slots.grow(rows, roomy);
        }
        let fit = slots.budget / slots.bytes_for(1, cap).max(1);
        if fit < keep.max(1) {
            return Err(slots.over_budget(keep.max(1), cap));
        }
        if fit < rows {
            // Keep the most recently used cached rows in front, then drop the rest.
            let mut cached: Vec<usize> = (keep..slots.rows()).collect();
            cached.sort_by_key(|&i| std::cmp::Reverse(slots.slots[i].used));
            let order: Vec<u64> = cached.iter().map(|&i| slots.slots[i].serial).collect();
            for (k, serial) in order.iter().enumerate() {
                if let Some(at) = slots.slots.iter().position(|s| s.serial == *serial) {
                    slots.swap(at, keep + k);
                }
            }
            self.stats.evictions += slots.slots[fit..].iter().filter(|s| s.owner.is_some()).count();
            slots.truncate(fit);
        }
        slots.grow(fit.min(rows), cap)
    }

    /// The prefill forwards of rows `from..` of the decode batch, at most
    /// `max_prefill_tokens` each; the rows' metadata then holds their whole prompts.
    fn prefills(&mut self, from: usize) -> Vec<Prefill> {
        let parts: Vec<PrefillRow> = (from..self.active.len())
            .map(|i| {
                let (request, past) = (self.active[i].request, self.slots.slots[i].ids.len());
                PrefillRow { request, past, len: self.asks[&request].content.len() - past }
            })
            .collect();
        let out = self.forwards(from, parts);
        for p in &out {
            for (i, part) in (p.start..).zip(&p.rows) {
                let new = &self.asks[&part.request].content[part.past..];
                self.slots.slots[i].ids.extend_from_slice(new);
            }
            self.stats.prefilled_tokens += p.rows.iter().map(|r| r.len).sum::<usize>();
        }
        out
    }

    /// Rows `from..` cut into forwards of at most `max_prefill_tokens` (rows × longest part).
    fn forwards(&mut self, from: usize, parts: Vec<PrefillRow>) -> Vec<Prefill> {
        let mut out: Vec<Prefill> = vec![];
        let mut longest = 0;
        for (k, part) in parts.into_iter().enumerate() {
            let l = longest.max(part.len);
            match out.last_mut() {
                Some(p) if l * (p.rows.len() + 1) <= self.options.max_prefill_tokens.get() => {
                    p.rows.push(part);
                    longest = l;
                }
                _ => {
                    out.push(Prefill { start: from + k, rows: vec![part] });
                    longest = part.len;
                }
            }
        }
        self.stats.prefill_calls += out.len();
        out
    }

    /// Forgets the cached rows no request is decoding (their keys and values are stale).
    pub fn forget_cached(&mut self) {
        for slot in &mut self.slots.slots[self.active.len()..] {
            slot.owner = None;
            slot.ids.clear();
        }
    }

    /// New weights: the running rows' keys and values are the old ones', so each row is
    /// run again whole (its prompt and every token it sampled), that forward sampling its
    /// next token in place of a decode step; cached rows not running are forgotten. A row's
    /// part past its prompt is its own sampled ids (`PrefillRow::len` reaches into them).
    pub fn recompute(&mut self) -> Vec<Prefill> {
        self.forget_cached();
        let mut parts = vec![];
        for (i, a) in self.active.iter().enumerate() {
            let slot = &mut self.slots.slots[i];
            slot.ids.push(*a.row.ids.last().expect("a sampled token") as u64);
            parts.push(PrefillRow { request: a.request, past: 0, len: slot.ids.len() });
        }
        self.stats.weight_swaps += 1;
        self.stats.recomputed_tokens += parts.iter().map(|p| p.len).sum::<usize>();
        self.forwards(0, parts)
    }

    /// One token for every row of the decode batch: each feeds its last sampled one.
    pub fn decode(&mut self) -> Decode {
        let feed: Vec<u32> = self.active.iter().map(|a| *a.row.ids.last().expect("a sampled token")).collect();
        let past = self.places_ahead();
        for (slot, &t) in self.slots.slots.iter_mut().zip(&feed) {
            slot.ids.push(t as u64);
        }
        self.count_decode(feed.len());
        Decode { feed, past }
    }

    /// Each row's place for its next token: after its cached sequence, which holds every
    /// token fed so far (with a step in flight, the one it feeds). A step launched before
    /// the one in flight was read feeds the tokens that step samples, known later
    /// ([`Self::feed_ahead`]).
    pub fn places_ahead(&self) -> Vec<usize> {
        (0..self.active.len()).map(|i| self.slots.slots[i].ids.len()).collect()
    }

    /// Counts a decode step of `rows` rows.
    pub fn count_decode(&mut self, rows: usize) {
        self.stats.decode_steps += 1;
        self.stats.peak_batch = self.stats.peak_batch.max(rows);
    }

    /// Whether some row may sample past the token it has in flight (a row reaching its cap
    /// with it ends).
    pub fn may_continue(&self) -> bool {
        self.active.iter().any(|a| a.row.finish.is_none() && a.row.ids.len() + 1 < a.cap)
    }

    /// Rows `at` fed the token just recorded to a step launched before it was read: their
    /// cached sequences hold it (a row that ended with it does not: that step's token for
    /// it is discarded).
    pub fn feed_ahead(&mut self, at: &[usize]) {
        for &i in at {
            let a = &self.active[i];
            if a.row.finish.is_none() {
                let token = *a.row.ids.last().expect("a token just recorded");
                self.slots.slots[i].ids.push(token as u64);
            }
        }
    }

    /// The uniform draws of rows `start..end`, one each, from their own streams.
    pub fn draws(&mut self, start: usize, end: usize) -> Vec<f64> {
        self.active[start..end].iter_mut().map(|a| crate::sampling::uniform(&mut a.rng)).collect()
    }

    /// The decode rows' draw streams as they are now.
    pub fn streams(&self) -> Vec<ChaCha8Rng> {
        self.active.iter().map(|a| a.rng.clone()).collect()
    }

    /// Puts back the streams [`Self::streams`] saved (a step drew from them but did not run).
    pub fn rewind(&mut self, streams: Vec<ChaCha8Rng>) {
        for (a, rng) in self.active.iter_mut().zip(streams) {
            a.rng = rng;
        }
    }

    /// The tokens sampled for rows `start..`, one each, by weights `version` (when known);
    /// `ends(r)` says what ends request `r`.
    #[cfg(test)]
    pub fn record<'e>(
        &mut self,
        start: usize,
        tokens: &[i64],
        logprobs: &[f32],
        version: Option<u64>,
        ends: impl Fn(usize) -> Ends<'e>,
    ) -> Result<()> {
        let at: Vec<usize> = (start..start + tokens.len()).collect();
        self.record_at(&at, tokens, logprobs, version, ends)
    }

    /// The tokens sampled for rows `at`, one each, by weights `version` (when known);
    /// `ends(r)` says what ends request `r`.
    pub fn record_at<'e>(
        &mut self,
        at: &[usize],
        tokens: &[i64],
        logprobs: &[f32],
        version: Option<u64>,
        ends: impl Fn(usize) -> Ends<'e>,
    ) -> Result<()> {
        for (&i, (&t, &l)) in at.iter().zip(tokens.iter().zip(logprobs)) {
            let a = &mut self.active[i];
            a.row.push(t as u32, l, a.cap, &ends(a.request))?;
            a.row.versions.extend(version);
        }
        self.stats.generated_tokens += tokens.len();
        Ok(())
    }

    /// Stops `requests`: running rows end now (they leave at the next retire), queued ones
    /// are never admitted and are returned.
    pub fn cancel(&mut self, requests: &[usize]) -> Vec<usize> {
        for a in self.active.iter_mut().filter(|a| requests.contains(&a.request) && a.row.finish.is_none()) {
            a.row.finish = Some(FinishReason::Cancelled);
        }
        let (dropped, kept): (Vec<usize>, Vec<usize>) = self.queue.iter().partition(|r| requests.contains(r));
        self.queue = kept.into();
        for r in &dropped {
            self.asks.remove(r);
        }
        dropped
    }

    /// Rows that ended leave the decode batch: the last active row takes their place, and
    /// their cached sequence stays behind the active ones.
    pub fn retire(&mut self) -> Retired {
        let mut done = vec![];
        let mut i = 0;
        while i < self.active.len() {
            if self.active[i].row.finish.is_none() {
                i += 1;
                continue;
            }
            let last = self.active.len() - 1;
            self.slots.swap(i, last);
            let ended = self.active.swap_remove(i);
            self.slots.slots[last].used = self.now;
            if !self.active.is_empty() || !self.queue.is_empty() {
                self.stats.rows_freed_early += 1;
                self.stats.freed_at_length += usize::from(ended.row.finish == Some(FinishReason::Length));
            }
            self.asks.remove(&ended.request);
            done.push((ended.request, ended.row));
        }
        Retired { moves: self.slots.take_moves(), done }
    }
}

fn common_prefix(a: &[u64], b: &[u64]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tokenizer;
    use std::num::NonZeroUsize;

    const EOS: u32 = 0;

    fn tokenizer() -> Tokenizer {
        Tokenizer::from_bytes(include_bytes!("../../assets/tokenizer.json")).unwrap()
    }

    fn options() -> EngineOptions {
        EngineOptions { max_batch: NonZeroUsize::new(8).unwrap(), ..Default::default() }
    }

    /// Runs a schedule as `Call::run` does, every row sampling `token(row's request, step)`;
    /// returns the waves and decode steps planned, and the rows in request order.
    fn drive(s: &mut Scheduler, token: impl Fn(usize, usize) -> u32) -> (Vec<Wave>, Vec<Decode>, Vec<Row>) {
        let tok = tokenizer();
        let ends = Ends { eos: &[EOS], stop: &[], tokenizer: &tok };
        let (mut waves, mut decodes, mut rows) = (vec![], vec![], vec![]);
        let sample = |s: &mut Scheduler, start: usize, end: usize| {
            let tokens: Vec<i64> = (start..end)
                .map(|i| {
                    let a = &s.active[i];
                    token(a.request, a.row.ids.len()) as i64
                })
                .collect();
            s.draws(start, end);
            s.record(start, &tokens, &vec![-1.0; tokens.len()], None, |_| ends).unwrap();
        };
        s.now += 1;
        s.reserve().unwrap().expect("room");
        while !s.done() {
            while let Some(w) = s.admit().unwrap() {
                for p in &w.prefills {
                    sample(s, p.start, p.start + p.rows.len());
                }
                waves.push(w);
            }
            rows.extend(s.retire().done);
            if s.active.is_empty() {
                continue;
            }
            let d = s.decode();
            sample(s, 0, d.feed.len());
            decodes.push(d);
            rows.extend(s.retire().done);
        }
        rows.sort_by_key(|(r, _)| *r);
        (waves, decodes, rows.into_iter().map(|(_, row)| row).collect())
    }

    fn ask(key: u64, content: &[u64]) -> Ask {
        Ask { key, content: content.to_vec(), cap: 3, seed: key }
    }

    fn scheduler(asks: Vec<Ask>) -> Scheduler {
        let mut s = Scheduler::new(options(), Slots::new(1, 1 << 20));
        submit(&mut s, asks);
        s
    }

    fn submit(s: &mut Scheduler, asks: Vec<Ask>) {
        for (r, a) in asks.into_iter().enumerate() {
            s.submit(r, a);
        }
    }

    #[test]
    fn a_group_prompt_is_prefilled_once_and_copied_to_its_siblings() {
        let prompts: Vec<Vec<u64>> = (0..4).map(|i| (1..=40).chain([100 + i]).collect()).collect();
        let mut s = scheduler(prompts.iter().enumerate().map(|(i, p)| ask(i as u64, p)).collect());
        let (waves, decodes, rows) = drive(&mut s, |r, step| if step == 1 + r % 2 { EOS } else { 7 });
        // The first member alone, whole; then the three others copy its 40 shared
        // positions and prefill their own last token, in one forward.
        assert_eq!(waves.len(), 2);
        assert_eq!(waves[0].prefills, [Prefill { start: 0, rows: vec![PrefillRow { request: 0, past: 0, len: 41 }] }]);
        let copies: Vec<Move> = (1..4).map(|to| Move::CopyPrefix { from: 0, to, len: 40 }).collect();
        assert_eq!(waves[1].moves, copies);
        let joined = (1..4).map(|request| PrefillRow { request, past: 40, len: 1 }).collect();
        assert_eq!(waves[1].prefills, [Prefill { start: 1, rows: joined }]);
        // Every row decodes from where its prompt ends; even requests end a step sooner.
        assert_eq!(decodes[0].past, [41, 41, 41, 41]);
        assert_eq!(rows.iter().map(|r| r.ids.len()).collect::<Vec<_>>(), [2, 3, 2, 3]);
        assert_eq!((s.stats.prefilled_tokens, s.stats.shared_tokens, s.stats.prefill_calls), (44, 120, 2));
    }

    #[test]
    fn a_trajectorys_next_turn_extends_its_own_row_and_an_ended_row_leaves_the_batch() {
        let first: Vec<u64> = (1..=30).collect();
        let other: Vec<u64> = (200..=230).collect();
        let mut s = scheduler(vec![ask(5, &first), ask(6, &other)]);
        // Trajectory 5 ends at once; 6 decodes on and takes row 0, 5's row going behind it.
        let (_, decodes, rows) = drive(&mut s, |r, _| if r == 0 { EOS } else { 9 });
        assert_eq!(decodes[0].past, [31], "only trajectory 6 decodes, from row 0");
        assert_eq!(rows[0].finish, Some(FinishReason::Eos));
        let row_of = |slots: &Slots, key| slots.slots.iter().position(|r| r.owner == Some(key)).unwrap();
        assert_eq!((row_of(&s.slots, 6), row_of(&s.slots, 5)), (0, 1));
        // The next turn of trajectory 5: its prompt, its answer, and a new observation.
        let next: Vec<u64> = first.iter().copied().chain([EOS as u64, 50, 51]).collect();
        submit(&mut s, vec![ask(5, &next)]);
        let (waves, _, _) = drive(&mut s, |_, _| EOS);
        assert_eq!(waves[0].moves, [Move::Swap { a: 1, b: 0, positions: 33 }], "its own row to the front");
        // The answer's last token (EOS) was sampled, never fed: the row holds the prompt.
        assert_eq!(waves[0].prefills[0].rows, [PrefillRow { request: 0, past: 30, len: 3 }]);
        assert_eq!((s.stats.reused_tokens, s.stats.fallbacks), (30, 0));
    }
}
