//! Tensors derived from weights for forwards that record no gradients (the attention's
//! fused QKV projection): built on first use and rebuilt when any source changed, so an
//! optimizer step, a weight load, a refresh or a dtype change can never leave them stale.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use tch::Tensor;

/// Derived copies built or dropped so far, in the whole process.
static MOVES: AtomicU64 = AtomicU64::new(0);

/// Changes whenever any derived copy is built or dropped: a CUDA graph that captured one's
/// address is stale once this moves.
pub(crate) fn epoch() -> u64 {
    MOVES.load(Ordering::SeqCst)
}

unsafe extern "C" {
    fn vagen_grad_enabled() -> i32;
    fn vagen_tensor_version(t: *const torch_sys::C_tensor) -> i64;
}

/// Whether autograd records this thread's operations (a training forward).
pub(crate) fn grad_enabled() -> bool {
    // SAFETY: reads a thread-local flag.
    unsafe { vagen_grad_enabled() != 0 }
}

/// What a tensor holds, as far as a derived copy is concerned: its memory and dtype
/// (replaced by a dtype or device change, `set_data` included) and its version counter
/// (bumped by every in-place write).
fn stamp(t: &Tensor) -> (usize, tch::Kind, i64) {
    // SAFETY: `as_ptr` is the live `at::Tensor` behind `t`.
    (t.data_ptr() as usize, t.kind(), unsafe { vagen_tensor_version(t.as_ptr()) })
}

#[derive(Default)]
pub(crate) struct Derived {
    held: Mutex<Option<Held>>,
}

struct Held {
    stamps: Vec<(usize, tch::Kind, i64)>,
    /// The sources' memory, held by tensors of their own (`detach`: a new tensor on the same
    /// memory, which `set_data` on a source does not move): it cannot be freed and reused
    /// at the same address while the stamps name it.
    _memory: Vec<Tensor>,
    tensors: Vec<Tensor>,
}

impl Derived {
    /// What `make` derives from `sources`: the copy made before if no source changed since.
    pub fn get(&self, sources: &[&Tensor], make: impl FnOnce() -> Vec<Tensor>) -> Vec<Tensor> {
        let stamps: Vec<_> = sources.iter().map(|t| stamp(t)).collect();
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = &*held
            && h.stamps == stamps
        {
            return h.tensors.iter().map(Tensor::shallow_clone).collect();
        }
        // Released first: the old copy and the new one need not both fit.
        *held = None;
        MOVES.fetch_add(1, Ordering::SeqCst);
        let tensors = tch::no_grad(make);
        let out = tensors.iter().map(Tensor::shallow_clone).collect();
        *held = Some(Held { stamps, _memory: sources.iter().map(|t| t.detach()).collect(), tensors });
        out
    }

    /// Drops the copy (a training forward would leave it stale, and wants its memory).
    pub fn clear(&self) {
        if self.held.lock().unwrap_or_else(|e| e.into_inner()).take().is_some() {
            MOVES.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    #[test]
    fn a_derived_tensor_follows_every_change_of_its_sources() {
        let mut w = Tensor::ones([2, 2], (Kind::Float, Device::Cpu));
        let derived = Derived::default();
        let sum = |w: &Tensor, d: &Derived| d.get(&[w], || vec![w * 2.0])[0].sum(Kind::Float).double_value(&[]);
        assert_eq!(sum(&w, &derived), 8.0);
        let _ = w.get(0).fill_(3.0); // an in-place write through a view
        assert_eq!(sum(&w, &derived), 16.0);
        w = w.to_kind(Kind::Double) + 1.0; // replaced
        assert_eq!(sum(&w, &derived), 24.0);
        let _ = tch::no_grad(|| w.g_add_scalar_(1.0));
        assert_eq!(sum(&w, &derived), 32.0);
        // `set_data` (a VarStore's dtype change) keeps the tensor and moves its memory: to
        // f32 and back, the memory it had cannot come back under the same stamp.
        for (kind, value) in [(Kind::Float, 5.0), (Kind::Double, 6.0)] {
            let mut v = w.shallow_clone();
            tch::no_grad(|| v.set_data(&w.to_kind(kind).fill_(value)));
            assert_eq!(sum(&w, &derived), value * 8.0, "{kind:?}");
        }
        derived.clear();
        assert_eq!(sum(&w, &derived), 48.0);
        assert!(grad_enabled());
        assert!(!tch::no_grad(grad_enabled));
    }
}
