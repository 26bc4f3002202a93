//! Decode steps launched ahead (`engine.step_ahead`): a padded step that samples in the
//! graph leaves its tokens in flight (their copy to the host queued, not waited for), and
//! the next step is launched first, each row feeding its token from the device; only then
//! does the host wait for the earlier tokens, record them and check stops, while the device
//! runs the later step. A row that ended at the earlier step has one token computed for
//! nothing (`EngineStats::discarded_tokens`); every other row samples what it would have
//! sampled with its stop checked first.

use super::padded::{PaddedOut, Sampling};
use super::runner::{Runner, mrope_delta, one_sampler, top_logprobs};
use super::schedule::{Decode, Scheduler};
use crate::Result;
use crate::device::upload;
use crate::host_read::HostRead;
use std::collections::HashMap;
use tch::{Kind, Tensor};

/// A decode step whose tokens the host has not read.
pub(super) struct Pending {
    read: HostRead,
    /// The step's sampled columns on the device: its ids feed the next step.
    columns: Tensor,
    /// The requests of its rows, in row order.
    requests: Vec<usize>,
    /// Top log-probs a row.
    k: usize,
}

impl Pending {
    /// Starts reading the `columns` a step sampled for `requests`.
    pub fn start(columns: Tensor, requests: Vec<usize>, k: usize) -> Result<Self> {
        Ok(Pending { read: HostRead::start(&columns)?, columns, requests, k })
    }
}

impl Runner<'_> {
    /// Launches the next decode step before reading the one in flight, when the padded step
    /// takes the batch (every row sampling alike) and some row may go on past its token in
    /// flight; false (nothing launched) otherwise.
    pub(super) fn decode_ahead(&mut self, s: &mut Scheduler) -> Result<bool> {
        let m = s.active.len();
        let reqs: Vec<usize> = s.active.iter().map(|a| a.request).collect();
        let (Some(padded), Some(sampler)) = (self.padded.as_deref_mut(), one_sampler(self.live, &reqs)) else {
            return Ok(false);
        };
        if !self.ahead || !s.may_continue() || !padded.takes(self.model, self.kv, m) {
            return Ok(false);
        }
        let pending = self.pending.take().expect("a step in flight");
        let device = self.model.lm.model.device();
        // Every running row was in the step in flight (rows join only after it was read).
        let rows = rows_by_request(pending.requests.iter().copied());
        let index: Vec<i64> = reqs.iter().map(|r| rows[r] as i64).collect();
        let feed = pending.columns.select(1, 0).index_select(0, &upload(&index, device)).to_kind(Kind::Int64);
        let step = Decode { feed: vec![], past: s.places_ahead() };
        let streams = s.streams();
        let draws = s.draws(0, m);
        let deltas: Vec<i64> = reqs.iter().map(|&r| mrope_delta(self.live, r)).collect();
        let k = top_logprobs(self.live, &reqs, self.model.config().vocab_size);
        let sampling = Some(Sampling { sampler, draws: &draws, k });
        let out = padded.step(self.model, self.kv, &step, Some(&feed), &deltas, sampling, self.flash, &mut s.stats)?;
        let Some(PaddedOut::Columns(columns)) = out else {
            // The graph could not be captured: nothing ran, and the step read first draws
            // these rows' uniforms again.
            s.rewind(streams);
            *self.pending = Some(pending);
            return Ok(false);
        };
        let next = Pending::start(columns, reqs, k)?;
        s.count_decode(m);
        s.stats.steps_ahead += 1;
        s.stats.flash_steps += usize::from(self.flash.is_some());
        self.read(s, pending, true)?;
        *self.pending = Some(next);
        Ok(true)
    }

    /// Waits for the step in flight and records its tokens, if one is.
    pub(super) fn flush(&mut self, s: &mut Scheduler) -> Result<()> {
        match self.pending.take() {
            Some(pending) => self.read(s, pending, false),
            None => Ok(()),
        }
    }

    /// Records the tokens of step `p` for its rows still running (the others' are
    /// discarded). `fed`: a later step already runs, fed each row's token (a row that ends
    /// now has its token there discarded when that step is read).
    fn read(&mut self, s: &mut Scheduler, p: Pending, fed: bool) -> Result<()> {
        let columns = p.read.wait()?;
        let flat: Vec<f64> = Vec::try_from(columns.flatten(0, -1))?;
        let width = 2 + 2 * p.k;
        let running = rows_by_request(s.active.iter().map(|a| a.request));
        let (mut at, mut kept) = (vec![], vec![]);
        for (j, r) in p.requests.iter().enumerate() {
            if let Some(&i) = running.get(r)
                && s.active[i].row.finish.is_none()
            {
                at.push(i);
                kept.extend_from_slice(&flat[j * width..(j + 1) * width]);
            }
        }
        s.stats.host_reads += 1;
        s.stats.discarded_tokens += p.requests.len() - at.len();
        self.note(s, &at, &kept, p.k)?;
        if fed {
            s.feed_ahead(&at);
        }
        Ok(())
    }

    /// Drops the step in flight once no row of it runs.
    pub(super) fn drop_idle_pending(&mut self, s: &mut Scheduler) {
        if s.active.is_empty()
            && let Some(p) = self.pending.take()
        {
            s.stats.discarded_tokens += p.requests.len();
        }
    }
}

/// Each request's row, from the requests in row order: a step's rows matched by request in
/// one pass, not a search per row.
fn rows_by_request(requests: impl Iterator<Item = usize>) -> HashMap<usize, usize> {
    requests.enumerate().map(|(i, r)| (r, i)).collect()
}
