//! The engine's runner: executes the scheduler's plans on the model and the cache tensors
//! (prefill and decode forwards), samples each row from its request's settings and draw
//! stream, and reads the step's tokens back in one transfer.

use super::ahead::Pending;
use super::kv::KvRows;
use super::padded::{Padded, PaddedOut, Sampling};
use super::schedule::{Prefill, Scheduler};
use super::{Live, RequestId, Sampled, StepOutput};
use crate::device::upload;
use crate::flash::Kernel;
use crate::generate::Ends;
use crate::image_processor::PixelValues;
use crate::linear::AdapterRows;
use crate::sampling::{Sampler, draws_tensor};
use crate::{Model, Result, Vision};
use std::collections::HashMap;
use tch::{Kind, Tensor};

pub(super) struct Runner<'a> {
    pub model: &'a Model,
    pub live: &'a HashMap<usize, Live>,
    pub kv: &'a mut KvRows,
    pub padded: Option<&'a mut Padded>,
    /// The kernel attention runs on, if not SDPA.
    pub flash: Option<Kernel>,
    /// The weights' version sampling now (when the engine is told versions).
    pub version: Option<u64>,
    pub out: &'a mut StepOutput,
    /// The decode step whose tokens the host has not read yet (`ahead.rs`).
    pub pending: &'a mut Option<Pending>,
    /// Whether a padded step that samples in the graph is left in flight.
    pub ahead: bool,
}

impl Runner<'_> {
    fn vision(&self) -> Option<&Vision> {
        self.model.vision.as_ref()
    }

    fn live(&self, r: usize) -> &Live {
        &self.live[&r]
    }

    /// One prefill forward: each row's new part, padded to the longest, attending to its
    /// cached prefix; samples each row's first token.
    pub fn prefill(&mut self, s: &mut Scheduler, p: &Prefill) -> Result<()> {
        let lm = &self.model.lm;
        let device = lm.model.device();
        let reqs: Vec<usize> = p.rows.iter().map(|r| r.request).collect();
        let past: Vec<usize> = p.rows.iter().map(|r| r.past).collect();
        let lens: Vec<usize> = p.rows.iter().map(|r| r.len).collect();
        let t = lens.iter().copied().max().unwrap_or(1);
        let n = p.rows.len() as i64;
        let mut ids = Vec::with_capacity(p.rows.len() * t);
        for (i, r) in (p.start..).zip(&p.rows) {
            // Past the prompt (a row recomputed after new weights): what the row sampled.
            let sampled = &s.active[i].row.ids;
            let whole = self.live(r.request).request.ids.iter().chain(sampled);
            let part = whole.skip(r.past).take(r.len).map(|&x| x as i64);
            ids.extend(part.chain(std::iter::repeat_n(0, t - r.len)));
        }
        let ids = upload(&ids, device).view([n, t as i64]);
        let starts = upload(&past.iter().map(|&p| p as i64).collect::<Vec<_>>(), device);
        let steps = starts.view([n, 1]) + Tensor::arange(t as i64, (Kind::Int64, device)).view([1, -1]);
        let keys = past.iter().zip(&lens).map(|(p, l)| p + l).max().unwrap_or(0);
        // Query i of a row sits at its place in the cache and sees every key up to it. A
        // padding query's keys are never kept; it sees real ones, so no attention row is
        // empty.
        let mask = Tensor::arange(keys as i64, (Kind::Int64, device))
            .view([1, 1, 1, -1])
            .le_tensor(&steps.unsqueeze(1).unsqueeze(-1));
        let (embeds, positions) = match self.vision() {
            None => (lm.model.embed(&ids), steps),
            Some(v) => (self.vl_embeds(v, &ids, &reqs, &past)?, self.vl_positions(&reqs, &past, &lens, t)),
        };
        let adapters: Vec<usize> = reqs.iter().map(|&r| self.live(r).request.adapter).collect();
        let rows = AdapterRows::new(&adapters, device);
        let hidden = {
            let mut view = self.kv.view(p.start, &past, &lens, keys, self.flash);
            lm.model.forward_cached(embeds, &positions, &mask, &mut view, rows.as_ref())
        };
        let last: Vec<i64> = lens.iter().map(|&l| l as i64 - 1).collect();
        let last = upload(&last, device);
        let hidden = hidden.gather(1, &last.view([n, 1, 1]).expand([n, 1, hidden.size()[2]], false), false);
        let logits = self.logits(&hidden.squeeze_dim(1));
        let (start, end) = (p.start, p.start + p.rows.len());
        let draws = s.draws(start, end);
        self.sample(s, start, end, &draws, &logits)
    }

    /// The head, with a VL model's placeholder tokens out of reach.
    fn logits(&self, hidden: &Tensor) -> Tensor {
        let logits = self.model.lm.logits(hidden);
        match self.vision() {
            Some(v) => v.suppress_placeholders(&logits),
            None => logits,
        }
    }

    /// Embeddings of the new parts `ids` `[rows, t]` (request `reqs[i]` from position
    /// `past[i]` on), image tokens taking their features: every image with a token in a
    /// new part goes through the tower once, and its features past the cached part are used.
    fn vl_embeds(&self, v: &Vision, ids: &Tensor, reqs: &[usize], past: &[usize]) -> Result<Tensor> {
        let embeds = self.model.lm.model.embed(ids);
        let mut images: Vec<&PixelValues> = vec![];
        let mut slices: Vec<(usize, i64, i64)> = vec![];
        for (&r, &p) in reqs.iter().zip(past) {
            let live = self.live(r);
            for (k, &(a, b)) in live.prompted.runs.iter().enumerate() {
                if b > p {
                    slices.push((images.len(), (p.max(a) - a) as i64, (b - p.max(a)) as i64));
                    images.push(&live.request.images[k]);
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
            let m = self.live(r).prompted.mrope.as_ref().expect("a VL prompt has M-RoPE positions");
            for (j, at) in (p..p + len).enumerate() {
                let pos = m.positions.get(at).copied().unwrap_or([at as i64 + m.delta; 3]);
                for (axis, &v) in pos.iter().enumerate() {
                    data[(axis * n + row) * t + j] = v;
                }
            }
        }
        upload(&data, self.model.lm.model.device()).view([3, n as i64, t as i64])
    }

    /// One token for every row of the decode batch: launched before the step in flight is
    /// read where that can be (`ahead.rs`), else after it was read and its ended rows left.
    pub fn decode(&mut self, s: &mut Scheduler) -> Result<()> {
        if self.pending.is_some() {
            if self.decode_ahead(s)? {
                return Ok(());
            }
            self.flush(s)?;
            self.retire(s)?;
            if s.active.is_empty() {
                return Ok(());
            }
        }
        let step = s.decode();
        let m = step.feed.len();
        let draws = s.draws(0, m);
        s.stats.flash_steps += usize::from(self.flash.is_some());
        // A generated token's position continues its prompt's: its place plus the M-RoPE
        // delta (0 for text), on all three axes.
        let deltas: Vec<i64> = s.active.iter().map(|a| mrope_delta(self.live, a.request)).collect();
        if let Some(padded) = self.padded.as_deref_mut()
            && padded.takes(self.model, self.kv, m)
        {
            let reqs: Vec<usize> = s.active.iter().map(|a| a.request).collect();
            let k = top_logprobs(self.live, &reqs, self.model.config().vocab_size);
            let sampler = one_sampler(self.live, &reqs);
            let sampling = sampler.map(|sampler| Sampling { sampler, draws: &draws, k });
            match padded.step(self.model, self.kv, &step, None, &deltas, sampling, self.flash, &mut s.stats)? {
                Some(PaddedOut::Columns(c)) if self.ahead => {
                    *self.pending = Some(Pending::start(c, reqs, k)?);
                    return Ok(());
                }
                Some(PaddedOut::Columns(c)) => return self.record(s, 0, m, &c, k),
                Some(PaddedOut::Logits(logits)) => return self.sample(s, 0, m, &draws, &logits),
                None => {}
            }
        }
        let lm = &self.model.lm;
        let device = lm.model.device();
        let keys = step.past.iter().max().unwrap_or(&0) + 1;
        let pos = upload(&step.past.iter().map(|&p| p as i64).collect::<Vec<_>>(), device);
        let mask = super::kv::decode_mask(&pos, keys as i64);
        let positions = match self.vision() {
            None => pos.view([m as i64, 1]),
            Some(_) => {
                let with = pos + upload(&deltas, device);
                with.view([1, m as i64, 1]).expand([3, m as i64, 1], false)
            }
        };
        let feed: Vec<i64> = step.feed.iter().map(|&t| t as i64).collect();
        let embeds = lm.model.embed(&upload(&feed, device).view([m as i64, 1]));
        let adapters: Vec<usize> = s.active.iter().map(|a| self.live(a.request).request.adapter).collect();
        let rows = AdapterRows::new(&adapters, device);
        let hidden = {
            let mut view = self.kv.view(0, &step.past, &vec![1; m], keys, self.flash);
            lm.model.forward_cached(embeds, &positions, &mask, &mut view, rows.as_ref())
        };
        let logits = self.logits(&hidden.select(1, 0));
        self.sample(s, 0, m, &draws, &logits)
    }

    /// A token for rows `start..end` from their logits `[end - start, vocab]` and uniform
    /// `draws`: rows that sample alike are drawn together.
    fn sample(&mut self, s: &mut Scheduler, start: usize, end: usize, draws: &[f64], logits: &Tensor) -> Result<()> {
        let reqs: Vec<usize> = s.active[start..end].iter().map(|a| a.request).collect();
        let k = top_logprobs(self.live, &reqs, logits.size()[1] as usize);
        let columns = self.draw(&reqs, draws, logits, k);
        self.record(s, start, end, &columns, k)
    }

    /// Records rows `start..end`'s step from its columns ([`Sampler::columns`]'s, `k` top
    /// log-probs a row), read back to the host in one transfer.
    fn record(&mut self, s: &mut Scheduler, start: usize, end: usize, columns: &Tensor, k: usize) -> Result<()> {
        let flat: Vec<f64> = Vec::try_from(columns.flatten(0, -1))?;
        s.stats.host_reads += 1;
        self.note(s, &(start..end).collect::<Vec<_>>(), &flat, k)
    }

    /// Records a step's columns read to the host (`flat`, `2 + 2k` values a row), row `j`
    /// being the batch's row `at[j]`.
    pub(super) fn note(&mut self, s: &mut Scheduler, at: &[usize], flat: &[f64], k: usize) -> Result<()> {
        let rows: Vec<&[f64]> = flat.chunks(2 + 2 * k).collect();
        let tokens: Vec<i64> = rows.iter().map(|c| c[0] as i64).collect();
        let logprobs: Vec<f32> = rows.iter().map(|c| c[1] as f32).collect();
        let (eos, tokenizer) = (&self.model.eos_token_ids[..], &self.model.tokenizer);
        let live = self.live;
        let ends = |r: usize| Ends { eos, stop: &live[&r].stop, tokenizer };
        s.record_at(at, &tokens, &logprobs, self.version, ends)?;
        for (&i, (c, &token)) in at.iter().zip(rows.iter().zip(&tokens)) {
            let a = &mut s.active[i];
            let own = self.live[&a.request].top_logprobs.min(k);
            let top: Vec<(u32, f32)> = (0..own).map(|j| (c[2 + k + j] as u32, c[2 + j] as f32)).collect();
            if own > 0 {
                a.row.top.push(top.clone());
            }
            let key = self.live[&a.request].request.key;
            let sampled = Sampled { id: RequestId(a.request), key, token: token as u32, logprob: c[1] as f32, top };
            self.out.sampled.push(sampled);
        }
        Ok(())
    }

    /// `[rows, 2 + 2k]` f64 ([`Sampler::columns`]), rows drawn in groups of one sampling
    /// setting each.
    fn draw(&self, reqs: &[usize], draws: &[f64], logits: &Tensor, k: usize) -> Tensor {
        let setting = |r: usize| self.live(r).sampler.setting();
        let mut groups: Vec<(_, Vec<i64>)> = vec![];
        for (i, &r) in reqs.iter().enumerate() {
            match groups.iter_mut().find(|(g, _)| *g == setting(r)) {
                Some((_, rows)) => rows.push(i as i64),
                None => groups.push((setting(r), vec![i as i64])),
            }
        }
        let device = logits.device();
        let columns = |rows: &[i64], logits: &Tensor| {
            let sampler = &self.live(reqs[rows[0] as usize]).sampler;
            let d: Vec<f64> = rows.iter().map(|&i| draws[i as usize]).collect();
            sampler.columns(logits, || draws_tensor(&d, device), k)
        };
        if groups.len() == 1 {
            return columns(&groups[0].1, logits);
        }
        let mut out: Option<Tensor> = None;
        for (_, rows) in &groups {
            let index = upload(rows, device);
            let part = columns(rows, &logits.index_select(0, &index));
            let all =
                out.get_or_insert_with(|| part.new_zeros([reqs.len() as i64, part.size()[1]], (Kind::Double, device)));
            let _ = all.index_copy_(0, &index, &part);
        }
        out.expect("a step samples at least one row")
    }

    /// Ended rows leave the batch; their generations are reported.
    pub fn retire(&mut self, s: &mut Scheduler) -> Result<()> {
        let retired = s.retire();
        self.kv.apply(&retired.moves)?;
        for (request, row) in retired.done {
            let generation = row.finish(&self.model.tokenizer, &self.live[&request].stop)?;
            self.out.finished.push((RequestId(request), generation));
        }
        self.drop_idle_pending(s);
        Ok(())
    }
}

/// The top log-probs every row of `reqs` gets: the most any asks, at most the `vocab`.
pub(super) fn top_logprobs(live: &HashMap<usize, Live>, reqs: &[usize], vocab: usize) -> usize {
    reqs.iter().map(|r| live[r].top_logprobs).max().unwrap_or(0).min(vocab)
}

/// The sampler of every row of `reqs` when they all sample alike.
pub(super) fn one_sampler<'l>(live: &'l HashMap<usize, Live>, reqs: &[usize]) -> Option<&'l Sampler> {
    let first = &live[reqs.first()?].sampler;
    reqs.iter().all(|r| live[r].sampler.setting() == first.setting()).then_some(first)
}

/// What request `r`'s generated tokens add to their place for M-RoPE positions (0 for text).
pub(super) fn mrope_delta(live: &HashMap<usize, Live>, r: usize) -> i64 {
    live[&r].prompted.mrope.as_ref().map_or(0, |p| p.delta)
}
