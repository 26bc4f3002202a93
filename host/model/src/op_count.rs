//! How many ATen operators a piece of work dispatches (top-level ones: those our code calls),
//! and how many of them make the host wait for the device: `bench model --json` prints them
//! per decode step, so a regression shows on a CPU as well as on a GPU.

unsafe extern "C" {
    fn vagen_op_count_start();
    fn vagen_op_count_stop(ops: *mut i64, waits: *mut i64);
}

/// What [`count_ops`] counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct OpCount {
    /// Operators dispatched from this thread's own calls into libtorch.
    pub ops: u64,
    /// Of every operator (inner ones included), those that wait for the device (a scalar
    /// read, `nonzero`, `masked_select`).
    pub waits: u64,
}

/// Runs `f`, counting the operators this thread dispatches meanwhile.
pub fn count_ops<R>(f: impl FnOnce() -> R) -> (R, OpCount) {
    // SAFETY: the counter's state is thread-local on the C++ side; start and stop pair up here.
    unsafe { vagen_op_count_start() };
    let out = f();
    let (mut ops, mut waits) = (0i64, 0i64);
    // SAFETY: both pointers are to live locals.
    unsafe { vagen_op_count_stop(&mut ops, &mut waits) };
    (out, OpCount { ops: ops as u64, waits: waits as u64 })
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
        assert_eq!(three.ops, 3);
        let (v, read) = count_ops(|| a.sum(Kind::Float).double_value(&[]));
        assert_eq!(v, 16.0);
        assert!(read.waits >= 1, "{read:?}");
    }
}
