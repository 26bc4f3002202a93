//! AdamW whose state is plain tensors, so a checkpoint can hold it and a resumed run
//! continues exactly (tch's optimizers do not expose their state).

use std::collections::BTreeMap;
use std::path::Path;
use tch::{Kind, Tensor};

pub struct AdamW {
    /// Parameters by checkpoint name, in name order.
    params: Vec<(String, Tensor)>,
    m: Vec<Tensor>,
    v: Vec<Tensor>,
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
        AdamW { params, m, v, step: 0, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay }
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
        for (i, ((_, p), g)) in self.params.iter_mut().zip(&grads).enumerate() {
            let Some(g) = g else { continue };
            let g = g.to_kind(Kind::Float) * scale;
            self.m[i] = &self.m[i] * self.beta1 + &g * (1.0 - self.beta1);
            self.v[i] = &self.v[i] * self.beta2 + g.square() * (1.0 - self.beta2);
            let update = (&self.m[i] / c1) / ((&self.v[i] / c2).sqrt() + self.eps);
            let p32 = p.to_kind(Kind::Float);
            let new = &p32 - (update + &p32 * self.weight_decay) * lr;
            p.copy_(&new.to_kind(p.kind()));
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
