//! How many ATen operators a piece of work dispatches (top-level ones: those our code calls),
//! and how many of them make the host wait for the device: `bench model --json` prints them
//! per decode step, so a regression shows on a CPU as well as on a GPU.

unsafe extern "C" {
    fn vagen_op_count_start();
    fn vagen_op_count_stop(ops: *mut i64, computing: *mut i64, waits: *mut i64);
}

/// What [`count_ops`] counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct OpCount {
    /// Operators dispatched from this thread's own calls into libtorch.
    pub ops: u64,
    /// Of those, the ones that compute: all but views (`view`, `narrow`, `transpose`, ...,
    /// which only re-describe memory: no kernel, no allocation, nothing a CUDA graph holds).
    pub computing: u64,
    /// Of every operator (inner ones included), those that wait for the device (a scalar
    /// read, `nonzero`, `masked_select`).
    pub waits: u64,
}

impl OpCount {
    /// Each count divided by `n` (per step of `n` counted together).
    pub fn per(self, n: u64) -> OpCount {
        OpCount { ops: self.ops / n, computing: self.computing / n, waits: self.waits / n }
    }
}

/// Runs `f`, counting the operators this thread dispatches meanwhile.
pub fn count_ops<R>(f: impl FnOnce() -> R) -> (R, OpCount) {
    // SAFETY: the counter's state is thread-local on the C++ side; start and stop pair up here.
    unsafe { vagen_op_count_start() };
    let out = f();
    let (mut ops, mut computing, mut waits) = (0i64, 0i64, 0i64);
    // SAFETY: the pointers are to live locals.
    unsafe { vagen_op_count_stop(&mut ops, &mut computing, &mut waits) };
    (out, OpCount { ops: ops as u64, computing: computing as u64, waits: waits as u64 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Kind, Tensor};

    #[test]
    fn counts_the_operators_called_not_their_insides() {
        let a = Tensor::ones([4, 4], (Kind::Float, tch::Device::Cpu));
        let (_, none) = count_ops(|| ());
        assert_eq!(none, OpCount::default());
        // `linear` runs `matmul`/`addmm` inside: one call, one operator.
        let (_, one) = count_ops(|| a.linear::<Tensor>(&a, None));
        assert_eq!(one.ops, 1);
        let (_, three) = count_ops(|| (&a + 1.0).relu().sum(Kind::Float));
        assert_eq!((three.ops, three.computing), (3, 3));
        // Views compute nothing; `reshape` and `to` compute exactly when they copy.
        let (_, views) = count_ops(|| a.narrow(0, 1, 2).transpose(0, 1).reshape([8]).to_kind(Kind::Float));
        assert_eq!((views.ops, views.computing), (4, 1), "the reshape of a transposed view copies");
        let (_, none) = count_ops(|| a.view([16]).reshape([2, 8]).to_kind(Kind::Float));
        assert_eq!((none.ops, none.computing), (3, 0));
        let (v, read) = count_ops(|| a.sum(Kind::Float).double_value(&[]));
        assert_eq!(v, 16.0);
        assert!(read.waits >= 1, "{read:?}");
    }
}
