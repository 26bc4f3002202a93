//! The decode forward on static shapes, as CUDA graphs want it: the batch padded to a bucket
//! (1, 2, 4, …, 256, and `max_batch`), the keys read up to a bucket of positions (256, 512,
//! 1024, …, the cache's capacity), and the step's inputs (ids, places, rows written, a VL
//! model's M-RoPE deltas) in one `[4, batch]` buffer the forward reads. Padding rows write
//! into a row of their own and read one key. When every row samples alike, sampling is part of the step too (each row's
//! uniform in a `[batch]` buffer) and the step's output is what the host reads: tokens,
//! log-probs, top log-probs. On CUDA each (batch, keys, sampling) bucket is captured once and
//! replayed; a graph is captured again when the cache's tensors were reallocated or a weight
//! copy it reads (fused QKV, f32 head) was rebuilt. On the CPU the same step runs eagerly, so
//! its arithmetic is tested where no GPU is.

use super::kv::KvRows;
use super::schedule::Decode;
use crate::cuda_graph::{Capturer, CudaGraph};
use crate::device::upload;
use crate::flash::Kernel;
use crate::sampling::{Sampler, draw_f32};
use crate::{EngineStats, Model, Result};
use std::collections::HashMap;
use std::time::Instant;
use tch::{Device, Tensor};

const BATCH_BUCKETS: [usize; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

/// The padded batch for `m` rows: the smallest bucket that holds them, never past
/// `max_batch` (itself a bucket).
pub(super) fn batch_bucket(m: usize, max_batch: usize) -> usize {
    BATCH_BUCKETS.iter().copied().find(|&b| b >= m).unwrap_or(max_batch).min(max_batch.max(m))
}

/// The keys read for a step whose longest row needs `keys`: a power of two from 256 on,
/// within the cache's `capacity`.
fn keys_bucket(keys: usize, capacity: usize) -> usize {
    keys.max(256).next_power_of_two().min(capacity).max(keys)
}

pub(super) struct Padded {
    max_batch: usize,
    /// A VL model's placeholder tokens (and their ids), on its device: what the graphs read.
    placeholders: Option<([u32; 4], Tensor)>,
    /// `None` on the CPU: the padded forward runs eagerly.
    graphs: Option<Graphs>,
    /// A capture failed: this engine decodes without padding from then on.
    failed: bool,
}

/// Sampling in the padded step: every row's sampler (they sample alike), each row's
/// uniform, the top log-probs a row gets.
pub(super) struct Sampling<'a> {
    pub sampler: &'a Sampler,
    pub draws: &'a [f64],
    pub k: usize,
}

/// What a padded step gives for its rows: the sampled columns ([`Sampler::columns`]'s) or,
/// when rows sample differently, the logits.
pub(super) enum PaddedOut {
    Columns(Tensor),
    Logits(Tensor),
}

/// A graph's bucket: batch, keys, and what it samples (the setting, `k`), if it does.
type Bucket = (usize, usize, Option<((u64, u64, usize), usize)>);

struct Graphs {
    /// Dropped before the capturer, whose pool they draw on.
    captured: HashMap<Bucket, Captured>,
    capturer: Capturer,
    /// What the graphs read: the cache tensors' generation, the derived weight copies'
    /// epoch, the model's parameters' memory (another model, this one converted, adapters
    /// attached), and which head.
    reads: (u64, u64, u64, bool),
}

struct Captured {
    graph: CudaGraph,
    inputs: Tensor,
    /// Each row's uniform, where the step samples with temperature.
    draws: Option<Tensor>,
    output: Tensor,
}

impl Padded {
    /// The padded decode for a model on `device` with `max_batch` rows at most: with CUDA
    /// graphs on CUDA, eager elsewhere.
    pub fn new(device: Device, max_batch: usize) -> Result<Self> {
        let graphs = match device {
            Device::Cuda(i) => {
                Some(Graphs { captured: HashMap::new(), capturer: Capturer::new(i)?, reads: (0, 0, 0, false) })
            }
            _ => None,
        };
        Ok(Padded { max_batch, placeholders: None, graphs, failed: false })
    }

    /// Rows the cache keeps for the largest bucket (`max_batch` is one).
    pub fn rows(&self) -> usize {
        self.max_batch
    }

    /// Whether this step can run padded: a model without served adapters, a batch within
    /// the cache's padded rows.
    pub fn takes(&self, model: &Model, kv: &KvRows, rows: usize) -> bool {
        let bucket = batch_bucket(rows, self.max_batch);
        !self.failed && model.lm.model.served_adapters() == 0 && (bucket as i64) <= kv.padding_row()
    }

    /// One decode step's output for its rows; `None` when its graph could not be captured
    /// (said once on stderr; the engine decodes without padding from then on). `feed`: the
    /// rows' ids on the device, where the step's are not known on the host (`ahead.rs`);
    /// `deltas`: each row's M-RoPE delta (0 for text).
    #[allow(clippy::too_many_arguments)]
    pub fn step(
        &mut self,
        model: &Model,
        kv: &KvRows,
        step: &Decode,
        feed: Option<&Tensor>,
        deltas: &[i64],
        sampling: Option<Sampling<'_>>,
        flash: Option<Kernel>,
        stats: &mut EngineStats,
    ) -> Result<Option<PaddedOut>> {
        let m = step.past.len();
        let b = batch_bucket(m, self.max_batch);
        let needed = step.past.iter().max().map_or(1, |p| p + 1);
        let keys = keys_bucket(needed, kv.shape().1);
        let device = model.lm.model.device();
        let (inputs, draws) = inputs(step, b, kv, deltas, sampling.as_ref(), device);
        if let Some(feed) = feed {
            inputs.get(0).narrow(0, 0, m as i64).copy_(feed);
        }
        let placeholders = self.placeholders(model);
        let wrap = |t: Tensor| match sampling {
            Some(_) => PaddedOut::Columns(t.narrow(0, 0, m as i64)),
            None => PaddedOut::Logits(t.narrow(0, 0, m as i64)),
        };
        let run = |inputs: &Tensor, draws: &Option<Tensor>| {
            let logits = forward(model, kv, inputs, keys as i64, flash, placeholders.as_ref());
            match &sampling {
                Some(s) => s.sampler.columns(&logits, || draws.as_ref().expect("drawn").shallow_clone(), s.k),
                None => logits,
            }
        };
        let Some(graphs) = &mut self.graphs else {
            stats.padded_steps += 1;
            return Ok(Some(wrap(run(&inputs, &draws))));
        };
        model.lm.prepare_generation();
        let reads = (kv.generation, crate::derived::epoch(), parameters_stamp(model), model.lm.lm_head_f32);
        if reads != graphs.reads {
            graphs.captured.clear();
            graphs.reads = reads;
        }
        let bucket = (b, keys, sampling.as_ref().map(|s| (s.sampler.setting(), s.k)));
        let entry = match graphs.captured.entry(bucket) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(slot) => {
                let start = Instant::now();
                let (inputs, draws) = (inputs.copy(), draws.as_ref().map(Tensor::copy));
                match graphs.capturer.capture(|| run(&inputs, &draws)) {
                    Ok((graph, output)) => {
                        stats.graph_captures += 1;
                        stats.graph_capture_seconds += start.elapsed().as_secs_f64();
                        slot.insert(Captured { graph, inputs, draws, output })
                    }
                    Err(e) => {
                        eprintln!(
                            "vagen: {e}; this engine decodes without CUDA graphs from now on \
                             (engine.cuda_graphs = false skips them)"
                        );
                        (self.graphs, self.failed) = (None, true);
                        return Ok(None);
                    }
                }
            }
        };
        entry.inputs.copy_(&inputs);
        if let (Some(to), Some(from)) = (&mut entry.draws, &draws) {
            to.copy_(from);
        }
        graphs.capturer.replay(&entry.graph)?;
        stats.padded_steps += 1;
        stats.graph_replays += 1;
        Ok(Some(wrap(entry.output.shallow_clone())))
    }

    /// The placeholder tokens of `model`'s vision (none for a text model) on its device,
    /// uploaded once: graphs captured with other ones are dropped.
    fn placeholders(&mut self, model: &Model) -> Option<Tensor> {
        let ids = model.vision.as_ref()?.placeholder_tokens();
        if self.placeholders.as_ref().is_none_or(|(held, _)| *held != ids) {
            let index: Vec<i64> = ids.iter().map(|&t| t as i64).collect();
            self.placeholders = Some((ids, upload(&index, model.lm.model.device())));
            if let Some(graphs) = &mut self.graphs {
                graphs.captured.clear();
            }
        }
        self.placeholders.as_ref().map(|(_, t)| t.shallow_clone())
    }
}

/// The step's inputs padded to `b` rows, uploaded without waiting: ids (0 where the step's
/// feed is on the device), places, rows written (each row's slot; padding rows write into the
/// padding row) and M-RoPE `deltas`, `[4, b]`, and each row's uniform `[b]` where the step
/// samples with temperature.
fn inputs(
    step: &Decode,
    b: usize,
    kv: &KvRows,
    deltas: &[i64],
    sampling: Option<&Sampling<'_>>,
    device: Device,
) -> (Tensor, Option<Tensor>) {
    let mut host = vec![0i64; 4 * b];
    host[2 * b..3 * b].fill(kv.padding_row());
    for (i, &p) in step.past.iter().enumerate() {
        let t = step.feed.get(i).map_or(0, |&t| t as i64);
        (host[i], host[b + i], host[2 * b + i]) = (t, p as i64, kv.slot(i) as i64);
    }
    host[3 * b..3 * b + deltas.len()].copy_from_slice(deltas);
    let draws = sampling.filter(|s| s.sampler.draws()).map(|s| {
        let mut uniforms = vec![0f32; b];
        for (u, &d) in uniforms.iter_mut().zip(s.draws) {
            *u = draw_f32(d);
        }
        upload(&uniforms, device)
    });
    (upload(&host, device).view([4, b as i64]), draws)
}

/// Where the model's parameters are: changes when any is replaced (a dtype conversion,
/// adapters attached), not when one is written in place (an update, a weight load), which a
/// graph reads anyway.
fn parameters_stamp(model: &Model) -> u64 {
    let vars = model.vs.variables_.lock().unwrap_or_else(|e| e.into_inner());
    vars.named_variables.values().fold(vars.named_variables.len() as u64, |acc, t| {
        acc.rotate_left(5) ^ (t.data_ptr() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    })
}

/// The decoder and head over one padded step (`inputs`: ids, places, rows written and
/// M-RoPE deltas, `[4, batch]`), attending over `keys` positions; a VL model's
/// `placeholders` out of reach.
fn forward(
    model: &Model,
    kv: &KvRows,
    inputs: &Tensor,
    keys: i64,
    flash: Option<Kernel>,
    placeholders: Option<&Tensor>,
) -> Tensor {
    let lm = &model.lm;
    let b = inputs.size()[1];
    let places = inputs.get(1);
    let mask = super::kv::decode_mask(&places, keys);
    let embeds = lm.model.embed(&inputs.get(0).view([b, 1]));
    let mut cache = kv.padded(inputs, keys, flash);
    // A VL model's generated token sits at its place plus its prompt's M-RoPE delta, on all
    // three axes.
    let positions = match &model.vision {
        None => places.view([b, 1]),
        Some(_) => (&places + inputs.get(3)).view([1, b, 1]).expand([3, b, 1], false),
    };
    let hidden = lm.model.forward_cached(embeds, &positions, &mask, &mut cache, None);
    let logits = lm.logits(&hidden.select(1, 0));
    match placeholders {
        Some(index) => crate::vl::suppress(&logits, index),
        None => logits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_hold_their_rows_and_keys_within_the_limits() {
        assert_eq!(batch_bucket(1, 64), 1);
        assert_eq!(batch_bucket(3, 64), 4);
        assert_eq!(batch_bucket(33, 64), 64);
        assert_eq!(batch_bucket(33, 48), 48);
        assert_eq!(batch_bucket(300, 300), 300);
        assert_eq!(batch_bucket(257, 512), 512);
        assert_eq!(keys_bucket(10, 4096), 256);
        assert_eq!(keys_bucket(257, 4096), 512);
        assert_eq!(keys_bucket(257, 320), 320);
        assert_eq!(keys_bucket(100, 128), 128);
    }
}
