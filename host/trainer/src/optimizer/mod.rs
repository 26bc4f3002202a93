//! AdamW whose state is plain tensors, so a checkpoint can hold it and a resumed run
//! continues exactly (tch's optimizers do not expose their state). Its ZeRO-1 sharding
//! over data-parallel ranks is [`shard`]'s.

mod shard;

use std::collections::BTreeMap;
use std::path::Path;
use tch::{Kind, Tensor};

pub struct AdamW {
    /// Parameters by checkpoint name, in name order.
    pub(crate) params: Vec<(String, Tensor)>,
    /// Per parameter; empty when sharded (`shards` holds this rank's slices instead).
    pub(crate) m: Vec<Tensor>,
    pub(crate) v: Vec<Tensor>,
    /// `optim.shard` over several ranks (ZeRO-1): this rank's slices of the moments.
    pub(crate) shards: Option<shard::Shards>,
    pub step: u64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// What one optimizer step did.
#[derive(Debug, Clone, Copy)]
pub struct StepReport {
    /// Global L2 norm of the gradients before clipping.
    pub grad_norm: f64,
    /// False when the norm was not finite: the step was skipped and the gradients dropped.
    pub applied: bool,
}

impl AdamW {
    pub fn new(vars: std::collections::HashMap<String, Tensor>, weight_decay: f64) -> Self {
        let params: Vec<(String, Tensor)> = vars.into_iter().collect::<BTreeMap<_, _>>().into_iter().collect();
        let zeros = |p: &Tensor| Tensor::zeros_like(p).to_kind(Kind::Float);
        let m = params.iter().map(|(_, p)| zeros(p)).collect();
        let v = params.iter().map(|(_, p)| zeros(p)).collect();
        AdamW { params, m, v, shards: None, step: 0, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay }
    }

    /// The parameters it steps, by checkpoint name in name order.
    pub fn params(&self) -> &[(String, Tensor)] {
        &self.params
    }

    pub fn zero_grad(&mut self) {
        for (_, p) in &mut self.params {
            p.zero_grad();
        }
    }

    /// Clips the global gradient norm to `max_norm`, then applies one AdamW update at `lr`
    /// (moments in f32 whatever the parameter dtype). A non-finite norm skips the update.
    pub fn step(&mut self, lr: f64, max_norm: f64) -> StepReport {
        let _guard = tch::no_grad_guard();
        let grads: Vec<Option<Tensor>> =
            self.params.iter().map(|(_, p)| Some(p.grad()).filter(|g| g.defined())).collect();
        let sq: f64 =
            grads.iter().flatten().map(|g| g.to_kind(Kind::Float).square().sum(Kind::Float).double_value(&[])).sum();
        let grad_norm = sq.sqrt();
        if !grad_norm.is_finite() {
            self.zero_grad();
            return StepReport { grad_norm, applied: false };
        }
        let scale = if max_norm > 0.0 && grad_norm > max_norm { max_norm / (grad_norm + 1e-6) } else { 1.0 };
        self.step += 1;
        let t = self.step as f64;
        let (c1, c2) = (1.0 - self.beta1.powf(t), 1.0 - self.beta2.powf(t));
        // In place, one parameter's temporaries at a time (the same arithmetic, in the same
        // order, as the out-of-place formulas in the comments): a full-size copy of every
        // moment per step would double the optimiser's peak memory.
        for (i, ((_, p), g)) in self.params.iter_mut().zip(&grads).enumerate() {
            let Some(g) = g else { continue };
            let g = g.to_kind(Kind::Float) * scale;
            // m = m·β1 + g·(1 − β1); v = v·β2 + g²·(1 − β2)
            let _ = self.m[i].g_mul_scalar_(self.beta1).g_add_(&(&g * (1.0 - self.beta1)));
            let _ = self.v[i].g_mul_scalar_(self.beta2).g_add_(&(g.square() * (1.0 - self.beta2)));
            drop(g);
            // update = (m / c1) / (√(v / c2) + ε), then + p·wd, times lr
            let mut update = &self.m[i] / c1;
            let mut denominator = &self.v[i] / c2;
            let _ = denominator.sqrt_().g_add_scalar_(self.eps);
            let _ = update.g_div_(&denominator);
            drop(denominator);
            let p32 = p.to_kind(Kind::Float);
            let _ = update.g_add_(&(&p32 * self.weight_decay)).g_mul_scalar_(lr);
            if p.kind() == Kind::Float {
                let _ = p.g_sub_(&update);
            } else {
                p.copy_(&(p32 - update).to_kind(p.kind()));
            }
        }
        self.zero_grad();
        StepReport { grad_norm, applied: true }
    }

    /// Moments as named tensors (`m.NAME`, `v.NAME`) and the step count.
    pub fn save(&self, path: &Path) -> Result<(), tch::TchError> {
        let mut named: Vec<(String, Tensor)> = Vec::new();
        for (i, (name, _)) in self.params.iter().enumerate() {
            named.push((format!("m.{name}"), self.m[i].to_device(tch::Device::Cpu)));
            named.push((format!("v.{name}"), self.v[i].to_device(tch::Device::Cpu)));
        }
        named.push(("step".into(), Tensor::from_slice(&[self.step as i64])));
        Tensor::write_safetensors(&named, path)
    }

    pub fn load(&mut self, path: &Path) -> Result<(), String> {
        let tensors: BTreeMap<String, Tensor> =
            vagen_model::read_safetensors(path).map_err(|e| e.to_string())?.into_iter().collect();
        for (i, (name, p)) in self.params.iter().enumerate() {
            for (prefix, slot) in [("m", &mut self.m[i]), ("v", &mut self.v[i])] {
                let t = tensors
                    .get(&format!("{prefix}.{name}"))
                    .ok_or_else(|| format!("{}: no {prefix}.{name}", path.display()))?;
                if t.size() != p.size() {
                    return Err(format!(
                        "{}: {prefix}.{name} has shape {:?}; the parameter has {:?}",
                        path.display(),
                        t.size(),
                        p.size()
                    ));
                }
                *slot = t.to_device(p.device()).to_kind(Kind::Float);
            }
        }
        let step = tensors.get("step").ok_or_else(|| format!("{}: no step", path.display()))?;
        let step = step.f_int64_value(&[0]).ok().filter(|s| *s >= 0);
        self.step = step.ok_or_else(|| format!("{}: step is not a count", path.display()))? as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The textbook formulas, out of place, for one parameter over `grads`.
    fn reference(p: &Tensor, grads: &[Tensor], lr: f64, wd: f64) -> Tensor {
        let (b1, b2, eps) = (0.9, 0.999, 1e-8);
        let mut p = p.copy();
        let mut m = Tensor::zeros_like(&p).to_kind(Kind::Float);
        let mut v = m.copy();
        for (t, g) in grads.iter().enumerate() {
            let t = (t + 1) as f64;
            let g = g.to_kind(Kind::Float) * 1.0;
            m = &m * b1 + &g * (1.0 - b1);
            v = &v * b2 + g.square() * (1.0 - b2);
            let update = (&m / (1.0 - b1.powf(t))) / ((&v / (1.0 - b2.powf(t))).sqrt() + eps);
            let p32 = p.to_kind(Kind::Float);
            p = (&p32 - (update + &p32 * wd) * lr).to_kind(p.kind());
        }
        p
    }

    #[test]
    fn the_in_place_update_is_the_textbook_formula_bit_for_bit() {
        tch::manual_seed(0);
        for kind in [Kind::Float, Kind::BFloat16] {
            let start = Tensor::randn([64, 33], (Kind::Float, tch::Device::Cpu)).to_kind(kind);
            let grads: Vec<Tensor> =
                (0..4).map(|_| Tensor::randn([64, 33], tch::kind::FLOAT_CPU).to_kind(kind)).collect();
            let p = start.copy().set_requires_grad(true);
            let mut opt = AdamW::new([("w".to_string(), p.shallow_clone())].into(), 0.01);
            for g in &grads {
                let mut grad = p.grad();
                if grad.defined() {
                    grad.copy_(g);
                } else {
                    (&p * g.detach()).sum(Kind::Float).backward();
                }
                assert!(opt.step(1e-3, 0.0).applied);
            }
            let want = reference(&start, &grads, 1e-3, 0.01);
            assert!(p.detach().equal(&want), "{kind:?}: differs from the formula");
        }
    }
}
