//! What a data-parallel step shares, so that N ranks compute what one process with all the
//! groups would:
//!
//! - each rank plays its own block of the step's groups (`Ranks::share`, in rank order) and
//!   scores its own sequences;
//! - the batch is then gathered, images left behind ([`gather_batch`]): credit, the StarPO-S
//!   filter, the mini-batch order and every metric are computed over all ranks' data, on
//!   every rank alike;
//! - in the update each rank runs forward and backward only on its own sequences, weighted
//!   by the whole mini-batch's tokens, and the gradients are summed before each optimiser
//!   step ([`sum_grads`]): the sum is the one-process gradient, so every rank takes the same
//!   step from the same weights.

use crate::step_batch::StepBatch;
use crate::token_versions::TokenVersions;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Range;
use tch::{Kind, Tensor};
use vagen_dist::Ranks;
use vagen_rollout::{RolloutMetrics, RolloutTotals};

/// Gradients are summed (and ZeRO-1's moments sliced) in buckets of this many elements, as
/// f32: one collective per bucket, never a copy of every gradient at once.
pub(crate) const BUCKET: i64 = 1 << 24;

/// A rank's batch as the others receive it (images and credit stay behind).
#[derive(Serialize, Deserialize)]
struct Wire {
    batch: StepBatch,
    /// Trajectories the rank laid out (episode numbers count failed ones too).
    trajectories: usize,
}

/// Every rank's batch in rank order (one process's batch), and which of its sequences are
/// this rank's: it alone holds their images, and the update runs them here.
/// `trajectories`: how many this rank laid out.
pub(crate) fn gather_batch(ranks: &Ranks, local: StepBatch, trajectories: usize) -> Result<(StepBatch, Range<usize>)> {
    if ranks.world() == 1 {
        let n = local.len();
        return Ok((local, 0..n));
    }
    let mut wire = Wire { batch: local, trajectories };
    let mut images = Some(std::mem::take(&mut wire.batch.seqs.images));
    let (mut global, mut own, mut episodes) = (StepBatch::new(), 0..0, 0);
    for (k, mut w) in gather::<Wire>(ranks, &wire, "the step's batch")?.into_iter().enumerate() {
        let n = w.batch.len();
        if k == ranks.rank() {
            w.batch.seqs.images = images.take().expect("one part is this rank's");
            own = global.len()..global.len() + n;
        }
        global.append(w.batch, episodes).with_context(|| format!("joining rank {k}'s batch"))?;
        episodes += w.trajectories;
    }
    Ok((global, own))
}

/// The rollout figures over every rank's episodes.
pub(crate) fn rollout_metrics(ranks: &Ranks, totals: RolloutTotals) -> Result<RolloutMetrics> {
    let mut all = RolloutTotals::default();
    for t in gather::<RolloutTotals>(ranks, &totals, "rollout totals")? {
        all.add(&t);
    }
    Ok(all.metrics())
}

/// The versions of every rank's sampled tokens.
pub(crate) fn token_versions(ranks: &Ranks, local: TokenVersions) -> Result<TokenVersions> {
    let mut all = TokenVersions::default();
    for v in gather::<TokenVersions>(ranks, &local, "token versions")? {
        all.add(&v);
    }
    Ok(all)
}

/// Every rank's `value` (`what`, for messages), in rank order.
fn gather<T: serde::de::DeserializeOwned>(ranks: &Ranks, value: &impl Serialize, what: &str) -> Result<Vec<T>> {
    let bytes = postcard::to_stdvec(value).with_context(|| format!("encoding {what} for the other ranks"))?;
    let parts = ranks.gather_bytes(&bytes)?;
    parts
        .iter()
        .enumerate()
        .map(|(k, part)| postcard::from_bytes(part).with_context(|| format!("decoding rank {k}'s {what}")))
        .collect()
}

/// The generation engines' counters summed over ranks (`EngineStats::add`).
pub(crate) fn engine_stats(
    ranks: &Ranks,
    stats: Option<vagen_model::EngineStats>,
) -> Result<Option<vagen_model::EngineStats>> {
    if ranks.world() == 1 {
        return Ok(stats);
    }
    let all = gather::<Option<vagen_model::EngineStats>>(ranks, &stats, "engine counters")?;
    Ok(all.into_iter().flatten().reduce(|mut a, b| {
        a.add(&b);
        a
    }))
}

/// Figures averaged over turns or episodes on each rank, averaged over ranks by `weight`
/// (the reward functions' means, weighted by each rank's episodes).
pub(crate) fn weighted_means(
    ranks: &Ranks,
    values: &BTreeMap<String, f64>,
    weight: f64,
) -> Result<BTreeMap<String, f64>> {
    if ranks.world() == 1 {
        return Ok(values.clone());
    }
    let mut sums: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for (v, w) in gather::<(BTreeMap<String, f64>, f64)>(ranks, &(values, weight), "reward figures")? {
        for (key, x) in v {
            let e = sums.entry(key).or_insert((0.0, 0.0));
            (e.0, e.1) = (e.0 + x * w, e.1 + w);
        }
    }
    Ok(sums.into_iter().map(|(k, (s, w))| (k, if w > 0.0 { s / w } else { 0.0 })).collect())
}

/// Consecutive tensors of `sizes` elements in runs of up to [`BUCKET`] elements (a larger
/// one alone): one collective each.
pub(crate) fn buckets(sizes: impl IntoIterator<Item = i64>) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = vec![];
    let mut size = 0;
    for (i, n) in sizes.into_iter().enumerate() {
        match out.last_mut() {
            Some(r) if size + n <= BUCKET => {
                r.end = i + 1;
                size += n;
            }
            _ => {
                out.push(i..i + 1);
                size = n;
            }
        }
    }
    out
}

/// Per parameter: whether any rank has a gradient for it (one that none has is left alone,
/// as one process's AdamW leaves it).
pub(crate) fn grads_anywhere(ranks: &Ranks, params: &[(String, Tensor)]) -> Result<Vec<bool>> {
    let mut has: Vec<f64> = params.iter().map(|(_, p)| p.grad().defined() as u8 as f64).collect();
    ranks.sum(&mut has)?;
    Ok(has.into_iter().map(|h| h > 0.0).collect())
}

/// Sums `params`' gradients over the ranks, in place. A parameter no rank has a gradient
/// for keeps none (AdamW leaves it alone, as one process would); one that some rank lacks
/// gets zeros there first.
pub(crate) fn sum_grads(ranks: &Ranks, params: &[(String, Tensor)]) -> Result<()> {
    if ranks.world() == 1 {
        return Ok(());
    }
    let has = grads_anywhere(ranks, params)?;
    let missing: Vec<&Tensor> =
        params.iter().zip(&has).filter(|((_, p), h)| **h && !p.grad().defined()).map(|((_, p), _)| p).collect();
    if !missing.is_empty() {
        // A gradient tensor of zeros where this rank's sequences never reached the
        // parameter (tch cannot set `.grad` directly).
        let zero: Tensor = missing.iter().map(|p| p.sum(Kind::Float)).sum::<Tensor>() * 0.0;
        zero.backward();
    }
    let grads: Vec<Tensor> = params.iter().zip(&has).filter(|(_, h)| **h).map(|((_, p), _)| p.grad()).collect();
    // A large f32 gradient is summed where it lies (no copy); the rest in flat buckets.
    let (mut large, grads): (Vec<Tensor>, Vec<Tensor>) =
        grads.into_iter().partition(|g| g.kind() == Kind::Float && g.is_contiguous() && g.numel() as i64 >= BUCKET / 4);
    for g in &mut large {
        ranks.sum_tensor(g, "summing gradients")?;
    }
    for r in buckets(grads.iter().map(|g| g.numel() as i64)) {
        let bucket = &grads[r];
        let flat: Vec<Tensor> = bucket.iter().map(|g| g.flatten(0, -1).to_kind(Kind::Float)).collect();
        let mut flat = Tensor::cat(&flat, 0);
        ranks.sum_tensor(&mut flat, "summing gradients")?;
        let mut at = 0;
        for g in bucket {
            let n = g.numel() as i64;
            let mut g = g.shallow_clone();
            g.copy_(&flat.narrow(0, at, n).view_as(&g));
            at += n;
        }
    }
    Ok(())
}

/// The update's per-micro-batch sums (value × weight, weight) summed over ranks.
pub(crate) fn sum_pairs(ranks: &Ranks, sums: &mut BTreeMap<String, (f64, f64)>) -> Result<()> {
    if ranks.world() == 1 {
        return Ok(());
    }
    let mut all: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for m in gather::<BTreeMap<String, (f64, f64)>>(ranks, &*sums, "update figures")? {
        for (key, (s, w)) in m {
            let e = all.entry(key).or_insert((0.0, 0.0));
            (e.0, e.1) = (e.0 + s, e.1 + w);
        }
    }
    *sums = all;
    Ok(())
}

/// Fails when the ranks' configs differ: every rank must run the same maths.
pub(crate) fn same_config(ranks: &Ranks, toml: &str) -> Result<()> {
    let parts = ranks.gather_bytes(toml.as_bytes())?;
    if let Some(k) = parts.iter().position(|p| p.as_slice() != toml.as_bytes()) {
        bail!(
            "rank {k}'s training config differs from rank {}'s: every rank must be started with the same config and --set values",
            ranks.rank()
        );
    }
    Ok(())
}

/// Fails when the ranks resumed from different checkpoints (a rank saw another folder):
/// `(step, sft_steps_done)` is this rank's checkpoint's.
pub(crate) fn same_state(ranks: &Ranks, (step, sft_steps_done): (usize, usize), ckpt: &std::path::Path) -> Result<()> {
    let mine = (step as u64, sft_steps_done as u64);
    for (k, theirs) in gather::<(u64, u64)>(ranks, &mine, "checkpoint step")?.into_iter().enumerate() {
        if theirs != mine {
            bail!(
                "rank {k} resumed at step {} ({} SFT steps), this rank at step {} ({}) from {}: the run folder must be the same (shared) folder on every rank",
                theirs.0,
                theirs.1,
                mine.0,
                mine.1,
                ckpt.display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two ranks (threads) sum gradients: a large one in place, small ones through buckets,
    /// one only rank 1 has, one neither has.
    #[test]
    fn gradients_are_summed_in_place_and_in_buckets() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let threads: Vec<_> = (0..2usize)
            .map(|rank| {
                std::thread::spawn(move || {
                    let rdzv = vagen_dist::Rendezvous::local(rank, 2, port, "test");
                    let ranks = Ranks::join(&rdzv, &Default::default(), tch::Device::Cpu).unwrap();
                    let f = (Kind::Float, tch::Device::Cpu);
                    let sizes = [BUCKET, 10, 7, 5];
                    let params: Vec<(String, Tensor)> = sizes
                        .iter()
                        .enumerate()
                        .map(|(i, &n)| (format!("p{i}"), Tensor::zeros([n], f).set_requires_grad(true)))
                        .collect();
                    // Gradient (rank + 1) on the first two; the third only on rank 1.
                    let mut loss = (&params[0].1.sum(Kind::Float) + params[1].1.sum(Kind::Float)) * (rank + 1) as f64;
                    if rank == 1 {
                        loss += params[2].1.sum(Kind::Float) * 5.0;
                    }
                    loss.backward();
                    sum_grads(&ranks, &params).unwrap();
                    ranks.finish();
                    let first = |p: &Tensor| p.grad().defined().then(|| p.grad().double_value(&[0]));
                    params.iter().map(|(_, p)| first(p)).collect::<Vec<_>>()
                })
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap(), vec![Some(3.0), Some(3.0), Some(5.0), None]);
        }
    }
}
