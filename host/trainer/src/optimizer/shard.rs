//! `optim.shard = true` (ZeRO-1): each rank keeps AdamW's moments for 1/N of the parameters.
//! The parameters are laid end to end in buckets (in name order, as the moments are saved);
//! each bucket is cut into N equal slices (zero padding at its end), and rank r owns slice r
//! of every bucket. A step reduce-scatters the gradients (each rank receives the sum over
//! ranks of its slice), takes the global norm from the slices, applies AdamW to its slice
//! with the arithmetic of [`AdamW::step`], element for element, and all-gathers the new
//! parameters. Checkpoints hold the whole moments ([`AdamW::unsharded`]), so a run resumes
//! with any world size.

use super::{AdamW, StepReport};
use crate::data_parallel::{buckets, grads_anywhere, sum_grads};
use anyhow::Result;
use std::ops::Range;
use tch::{Kind, Tensor};
use vagen_dist::Ranks;

pub(crate) struct Shards {
    buckets: Vec<Bucket>,
    rank: i64,
    world: i64,
}

struct Bucket {
    /// Indices into the optimiser's parameters.
    params: Range<usize>,
    /// Elements per rank: the bucket's, padded to a multiple of the world size, ÷ world.
    per_rank: i64,
    m: Tensor,
    v: Tensor,
}

/// The tensors flattened end to end as f32, zero-padded to `len`.
fn flat(ts: impl Iterator<Item = Tensor>, len: i64, device: tch::Device) -> Tensor {
    let mut parts: Vec<Tensor> = ts.map(|t| t.flatten(0, -1).to_kind(Kind::Float)).collect();
    let n: i64 = parts.iter().map(|t| t.numel() as i64).sum();
    if n < len {
        parts.push(Tensor::zeros([len - n], (Kind::Float, device)));
    }
    Tensor::cat(&parts, 0)
}

impl AdamW {
    /// A fresh optimiser over `vars` whose moments are sharded over `ranks` from the start,
    /// never whole (one rank: [`AdamW::new`]).
    pub fn new_sharded(vars: std::collections::HashMap<String, Tensor>, weight_decay: f64, ranks: &Ranks) -> Self {
        if ranks.world() == 1 {
            return AdamW::new(vars, weight_decay);
        }
        let mut opt = AdamW::new(std::collections::HashMap::new(), weight_decay);
        opt.params = vars.into_iter().collect::<std::collections::BTreeMap<_, _>>().into_iter().collect();
        let device = opt.params.first().map_or(tch::Device::Cpu, |(_, p)| p.device());
        let zeros = |_: &AdamW, _: &Range<usize>, n: i64| {
            (Tensor::zeros([n], (Kind::Float, device)), Tensor::zeros([n], (Kind::Float, device)))
        };
        opt.shards = Some(opt.layout(ranks, zeros));
        opt
    }

    /// Keeps only this rank's slices of the moments (cut from the whole ones it holds now,
    /// e.g. a checkpoint's). One rank: nothing to share.
    pub fn shard(&mut self, ranks: &Ranks) {
        if ranks.world() == 1 || self.shards.is_some() {
            return;
        }
        let (rank, world) = (ranks.rank() as i64, ranks.world() as i64);
        let device = self.params.first().map_or(tch::Device::Cpu, |(_, p)| p.device());
        let cut = |opt: &AdamW, r: &Range<usize>, per_rank: i64| {
            let slice = |ts: &[Tensor]| {
                let whole = flat(ts[r.clone()].iter().map(Tensor::shallow_clone), per_rank * world, device);
                whole.narrow(0, rank * per_rank, per_rank).copy()
            };
            (slice(&opt.m), slice(&opt.v))
        };
        let shards = self.layout(ranks, cut);
        self.m.clear();
        self.v.clear();
        self.shards = Some(shards);
    }

    /// The buckets over the parameters, this rank's moment slices from `moments(self,
    /// bucket's parameters, elements per rank)`.
    fn layout(&self, ranks: &Ranks, moments: impl Fn(&AdamW, &Range<usize>, i64) -> (Tensor, Tensor)) -> Shards {
        let (rank, world) = (ranks.rank() as i64, ranks.world() as i64);
        let buckets = buckets(self.params.iter().map(|(_, p)| p.numel() as i64))
            .into_iter()
            .map(|r| {
                let numel: i64 = self.params[r.clone()].iter().map(|(_, p)| p.numel() as i64).sum();
                let per_rank = (numel + world - 1) / world;
                let (m, v) = moments(self, &r, per_rank);
                Bucket { params: r, per_rank, m, v }
            })
            .collect();
        Shards { buckets, rank, world }
    }

    /// One optimiser step of every rank together: the gradients summed over the ranks, then
    /// [`AdamW::step`], or its sharded form with `optim.shard`.
    pub fn step_across(&mut self, ranks: &Ranks, lr: f64, max_norm: f64) -> Result<StepReport> {
        if self.shards.is_none() {
            sum_grads(ranks, &self.params)?;
            return Ok(self.step(lr, max_norm));
        }
        let _guard = tch::no_grad_guard();
        // A parameter no rank has a gradient for is left alone, as `step` leaves it.
        let has = grads_anywhere(ranks, &self.params)?;
        let shards = self.shards.as_ref().expect("checked above");
        let (rank, world) = (shards.rank, shards.world);
        let mut grads = Vec::with_capacity(shards.buckets.len());
        let mut masks = Vec::with_capacity(shards.buckets.len());
        for b in &shards.buckets {
            let device = self.params[b.params.start].1.device();
            let g = self.params[b.params.clone()].iter().map(|(_, p)| {
                let g = p.grad();
                if g.defined() { g } else { Tensor::zeros([p.numel() as i64], (Kind::Float, device)) }
            });
            let whole = flat(g, b.per_rank * world, device);
            let mut mine = Tensor::zeros([b.per_rank], (Kind::Float, device));
            ranks.reduce_scatter(&mut mine, &whole, "reduce-scattering gradients (optim.shard)")?;
            grads.push(mine);
            let all = has[b.params.clone()].iter().all(|&h| h);
            masks.push((!all).then(|| {
                let m = self.params[b.params.clone()]
                    .iter()
                    .zip(&has[b.params.clone()])
                    .map(|((_, p), &h)| Tensor::full([p.numel() as i64], h as u8 as f64, (Kind::Float, device)));
                flat(m, b.per_rank * world, device).narrow(0, rank * b.per_rank, b.per_rank).gt(0.5)
            }));
        }
        let mut sq = [grads.iter().map(|g| g.square().sum(Kind::Float).double_value(&[])).sum::<f64>()];
        ranks.sum(&mut sq)?;
        let grad_norm = sq[0].sqrt();
        if !grad_norm.is_finite() {
            self.zero_grad();
            return Ok(StepReport { grad_norm, applied: false });
        }
        let scale = if max_norm > 0.0 && grad_norm > max_norm { max_norm / (grad_norm + 1e-6) } else { 1.0 };
        self.step += 1;
        let t = self.step as f64;
        let (b1, b2, eps, wd) = (self.beta1, self.beta2, self.eps, self.weight_decay);
        let (c1, c2) = (1.0 - b1.powf(t), 1.0 - b2.powf(t));
        let shards = self.shards.as_mut().expect("checked above");
        for ((b, g), mask) in shards.buckets.iter_mut().zip(grads).zip(masks) {
            let device = self.params[b.params.start].1.device();
            let whole = flat(self.params[b.params.clone()].iter().map(|(_, p)| p.detach()), b.per_rank * world, device);
            let p32 = whole.narrow(0, rank * b.per_rank, b.per_rank);
            let old = mask.as_ref().map(|_| (b.m.copy(), b.v.copy()));
            // The arithmetic of `AdamW::step`, in the same order.
            let g = g * scale;
            let _ = b.m.g_mul_scalar_(b1).g_add_(&(&g * (1.0 - b1)));
            let _ = b.v.g_mul_scalar_(b2).g_add_(&(g.square() * (1.0 - b2)));
            let mut update = &b.m / c1;
            let mut denominator = &b.v / c2;
            let _ = denominator.sqrt_().g_add_scalar_(eps);
            let _ = update.g_div_(&denominator);
            let _ = update.g_add_(&(&p32 * wd)).g_mul_scalar_(lr);
            let mut new = &p32 - update;
            if let (Some(mask), Some((m0, v0))) = (&mask, old) {
                new = new.where_self(mask, &p32);
                b.m = b.m.where_self(mask, &m0);
                b.v = b.v.where_self(mask, &v0);
            }
            let mut gathered = Tensor::zeros([b.per_rank * world], (Kind::Float, device));
            ranks.all_gather(&mut gathered, &new, "all-gathering parameters (optim.shard)")?;
            let mut at = 0;
            for (_, p) in &mut self.params[b.params.clone()] {
                let n = p.numel() as i64;
                p.copy_(&gathered.narrow(0, at, n).view_as(p));
                at += n;
            }
        }
        self.zero_grad();
        Ok(StepReport { grad_norm, applied: true })
    }

    /// The whole moments, from every rank's slices (every rank calls it): for a checkpoint
    /// that any world size resumes. `None` when not sharded (this one is whole).
    pub fn unsharded(&self, ranks: &Ranks) -> Result<Option<AdamW>> {
        let Some(shards) = &self.shards else {
            return Ok(None);
        };
        let (mut m, mut v) = (vec![], vec![]);
        for b in &shards.buckets {
            for (slice, out) in [(&b.m, &mut m), (&b.v, &mut v)] {
                let mut whole = Tensor::zeros([b.per_rank * shards.world], (Kind::Float, slice.device()));
                ranks.all_gather(&mut whole, slice, "gathering the optimiser state for a checkpoint")?;
                let mut at = 0;
                for (_, p) in &self.params[b.params.clone()] {
                    let n = p.numel() as i64;
                    out.push(whole.narrow(0, at, n).view_as(p).to_kind(Kind::Float));
                    at += n;
                }
            }
        }
        let params = self.params.iter().map(|(k, p)| (k.clone(), p.shallow_clone())).collect();
        let (beta1, beta2, eps, weight_decay) = (self.beta1, self.beta2, self.eps, self.weight_decay);
        Ok(Some(AdamW { params, m, v, shards: None, step: self.step, beta1, beta2, eps, weight_decay }))
    }

    /// Bytes of optimiser state this rank holds (the moments).
    pub fn state_bytes(&self) -> usize {
        let bytes = |t: &Tensor| t.numel() * t.kind().elt_size_in_bytes();
        match &self.shards {
            Some(s) => s.buckets.iter().map(|b| bytes(&b.m) + bytes(&b.v)).sum(),
            None => self.m.iter().chain(&self.v).map(bytes).sum(),
        }
    }
}
