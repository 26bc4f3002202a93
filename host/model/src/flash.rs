//! A decode step's attention through variable-length flash attention (`cpp/flash.cpp`:
//! `aten::_flash_attention_forward` with `seqused_k`, which tch does not bind). Each (row,
//! key/value head) of the batch is a sequence of its own with one key/value head, attended by
//! that head's group of query heads: its keys start where that row and head sit in the
//! engine's `[rows, kv_heads, capacity, head_dim]` tensors (viewed flat) and run for the row's
//! length. So no mask is built, grouped heads are read as stored, and a step may read any
//! rows of the cache, not only its first ones. The kernel exists on CUDA in bf16 and f16;
//! [`Kernel::Emulated`] computes the same contract with SDPA on any device, so the index
//! arithmetic is tested where no GPU is, and [`self_check`] compares the two on the GPU before
//! an engine trusts the kernel.

use crate::{Error, Result};
use tch::{Device, Kind, Tensor};

/// What computes the attention: the flash kernel, or SDPA over the same sequences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kernel {
    Flash,
    Emulated,
}

unsafe extern "C" {
    fn vagen_flash_varlen(
        q: *const torch_sys::C_tensor,
        k: *const torch_sys::C_tensor,
        v: *const torch_sys::C_tensor,
        cu_q: *const torch_sys::C_tensor,
        cu_k: *const torch_sys::C_tensor,
        seqused_k: *const torch_sys::C_tensor,
        max_q: i64,
        max_k: i64,
        out: *mut *mut torch_sys::C_tensor,
        err: *mut std::ffi::c_char,
        len: usize,
    ) -> std::ffi::c_int;
}

/// Where each sequence's keys are, for one step over a cache of `[rows, kv_heads, capacity,
/// head_dim]`: computed once a step, read by every layer (all have that shape).
pub(crate) struct Sequences {
    kernel: Kernel,
    /// int32 `[b·kv + 1]`: sequence i's query is row i of the flattened queries.
    cu_q: Tensor,
    /// int32 `[b·kv + 1]`: where sequence i's keys start in the flattened cache (the last
    /// entry is the cache's end, never read: `seqused_k` gives each length).
    cu_k: Tensor,
    /// int32 `[b·kv]`: each sequence's length, its row's.
    seqused: Tensor,
    /// Keys read at most (the kernel's work split depends on it; a CUDA graph holds it).
    max_k: i64,
}

impl Sequences {
    /// Batch row i reads cache row `rows[i]`'s first `lens[i]` positions (i64 `[b]`, on the
    /// cache's device), `max_k` at most, over a cache of `shape` `[rows, kv, capacity, d]`.
    pub fn new(kernel: Kernel, rows: &Tensor, lens: &Tensor, shape: [i64; 4], max_k: i64) -> Self {
        let [cache_rows, kv, capacity, _] = shape;
        let b = rows.size()[0];
        let device = rows.device();
        let heads = Tensor::arange(kv, (Kind::Int64, device)).view([1, kv]);
        let starts = ((rows.view([b, 1]) * kv + heads) * capacity).view([b * kv]);
        let end = Tensor::full([1], cache_rows * kv * capacity, (Kind::Int64, device));
        let cu_k = Tensor::cat(&[starts, end], 0).to_kind(Kind::Int);
        let seqused = lens.view([b, 1]).expand([b, kv], false).reshape([b * kv]).to_kind(Kind::Int);
        let cu_q = Tensor::arange(b * kv + 1, (Kind::Int, device));
        Sequences { kernel, cu_q, cu_k, seqused, max_k }
    }

    /// Attention of `q` `[b, heads, 1, d]` over one layer's `keys` and `values` `[rows, kv,
    /// capacity, d]`: `[b, heads, 1, d]`. Query head h reads key/value head h / (heads / kv).
    pub fn attend(&self, q: &Tensor, keys: &Tensor, values: &Tensor) -> Result<Tensor> {
        let [b, heads, _, d] = q.size()[..] else { return Err(Error::Invalid("a query of 4 dimensions".into())) };
        let kv = keys.size()[1];
        let q = q.reshape([b * kv, heads / kv, d]);
        let (k, v) = (keys.view([-1, 1, d]), values.view([-1, 1, d]));
        let out = match self.kernel {
            Kernel::Flash => varlen(&q, &k, &v, &self.cu_q, &self.cu_k, &self.seqused, 1, self.max_k)?,
            Kernel::Emulated => self.emulated(&q, &k, &v),
        };
        Ok(out.reshape([b, heads, 1, d]))
    }

    /// The kernel's contract with SDPA: each sequence's keys gathered (up to `max_k`, the
    /// rest masked), its query heads as the queries of one key/value head.
    fn emulated(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Tensor {
        let (n, groups, d) = (q.size()[0], q.size()[1], q.size()[2]);
        let device = q.device();
        let places = Tensor::arange(self.max_k, (Kind::Int64, device)).view([1, -1]);
        let first = self.cu_k.narrow(0, 0, n).to_kind(Kind::Int64).view([n, 1]);
        let index = (first + &places).clamp_max(k.size()[0] - 1).view([-1]);
        let gather = |t: &Tensor| t.view([-1, d]).index_select(0, &index).view([n, 1, self.max_k, d]);
        let mask = places.view([1, 1, 1, -1]).lt_tensor(&self.seqused.to_kind(Kind::Int64).view([n, 1, 1, 1]));
        let q = q.view([n, 1, groups, d]);
        Tensor::scaled_dot_product_attention(&q, &gather(k), &gather(v), Some(&mask), 0.0, false, None::<f64>, false)
            .view([n, groups, d])
    }
}

/// The kernel itself: `q` `[total_q, heads, d]`, `k` and `v` `[total_k, kv_heads, d]`.
#[allow(clippy::too_many_arguments)]
fn varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    cu_q: &Tensor,
    cu_k: &Tensor,
    seqused: &Tensor,
    max_q: i64,
    max_k: i64,
) -> Result<Tensor> {
    let mut out = std::ptr::null_mut();
    let mut err = [0 as std::ffi::c_char; 1024];
    // SAFETY: every pointer is a live tensor or local buffer for the call; on success the
    // shim hands over a new `at::Tensor`, which `from_ptr` owns.
    let failed = unsafe {
        vagen_flash_varlen(
            q.as_ptr(),
            k.as_ptr(),
            v.as_ptr(),
            cu_q.as_ptr(),
            cu_k.as_ptr(),
            seqused.as_ptr(),
            max_q,
            max_k,
            &mut out,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    if failed != 0 {
        // SAFETY: the shim wrote a NUL-terminated string within the buffer.
        let text = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) }.to_string_lossy();
        return Err(Error::Invalid(format!("flash attention: {}", text.lines().next().unwrap_or(""))));
    }
    // SAFETY: `out` is the new tensor the shim allocated.
    Ok(unsafe { Tensor::from_ptr(out) })
}

/// Whether the flash kernel computes on `device` in `kind` what [`Kernel::Emulated`] does, on
/// a small case with grouped heads, rows read out of order and lengths across its blocks.
pub(crate) fn self_check(device: Device, kind: Kind) -> Result<()> {
    let _guard = tch::no_grad_guard();
    let (rows, kv, capacity, d, heads) = (3, 2, 512, 64, 6);
    // Varied values without libtorch's generator, whose state a seeded run may rely on.
    let filled = |shape: [i64; 4], phase: f64| {
        let n = shape.iter().product::<i64>();
        (Tensor::arange(n, (Kind::Float, device)) * 0.731 + phase).sin().to_kind(kind).view(shape)
    };
    let keys = filled([rows, kv, capacity, d], 0.0);
    let values = filled([rows, kv, capacity, d], 1.0);
    let q = filled([2, heads, 1, d], 2.0) * 2.0;
    let upload = |x: &[i64]| Tensor::from_slice(x).to_device(device);
    let (read, lens) = (upload(&[2, 0]), upload(&[300, 7]));
    let run =
        |kernel| Sequences::new(kernel, &read, &lens, [rows, kv, capacity, d], capacity).attend(&q, &keys, &values);
    let flash = run(Kernel::Flash)?.to_kind(Kind::Float);
    let emulated = run(Kernel::Emulated)?.to_kind(Kind::Float);
    let gap = (flash - emulated).abs().max().double_value(&[]);
    if gap.is_finite() && gap < 2e-2 {
        Ok(())
    } else {
        Err(Error::Invalid(format!("flash attention differs from SDPA by {gap} on a test case")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulated_sequences_read_their_rows_heads_and_lengths() {
        let (rows, kv, capacity, d, heads) = (3, 2, 8, 4, 4);
        let keys = Tensor::randn([rows, kv, capacity, d], (Kind::Float, Device::Cpu));
        let values = Tensor::randn([rows, kv, capacity, d], (Kind::Float, Device::Cpu));
        let q = Tensor::randn([2, heads, 1, d], (Kind::Float, Device::Cpu));
        let (read, lens) = (Tensor::from_slice(&[2i64, 0]), Tensor::from_slice(&[5i64, 3]));
        let got = Sequences::new(Kernel::Emulated, &read, &lens, [rows, kv, capacity, d], 6).attend(&q, &keys, &values);
        let got = got.unwrap();
        for (i, (&row, &len)) in [2i64, 0].iter().zip(&[5i64, 3]).enumerate() {
            for h in 0..heads {
                let kh = h / (heads / kv);
                let k = keys.get(row).get(kh).narrow(0, 0, len);
                let v = values.get(row).get(kh).narrow(0, 0, len);
                let qh = q.get(i as i64).get(h);
                let weights = (k.matmul(&qh.view([d, 1])).view([len]) / (d as f64).sqrt()).softmax(0, Kind::Float);
                let want = weights.view([1, len]).matmul(&v).view([d]);
                let gap = (got.get(i as i64).get(h).get(0) - want).abs().max().double_value(&[]);
                assert!(gap < 1e-5, "row {i} head {h}: {gap}");
            }
        }
    }

    #[test]
    fn the_kernel_where_it_does_not_exist_is_an_error_that_names_it() {
        let err = self_check(Device::Cpu, Kind::Float).unwrap_err().to_string();
        assert!(err.contains("flash attention"), "{err}");
    }
}
