//! The engine's attention (prefill and decode) through variable-length flash attention
//! (`cpp/flash.cpp`: `aten::_flash_attention_forward` with `seqused_k`, which tch does not
//! bind). Each (row, key/value head) of the batch is a sequence of its own with one key/value
//! head, attended by that head's group of query heads: its keys start where that row and head
//! sit in the engine's `[rows, kv_heads, capacity, head_dim]` tensors (viewed flat) and run
//! for the row's length. So no mask is built, grouped heads are read as stored, and a step may read any
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

/// Whether an engine's attention runs through [`Kernel::Flash`]: wanted, then checked
/// against SDPA at the engine's first step on the model's device and dtype (the kernel has
/// bf16 and f16 forms only); where the check fails, said once, SDPA from then on.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Choice {
    Off,
    Unchecked(Kernel),
    On(Kernel),
}

impl Choice {
    pub fn new(wanted: Option<Kernel>) -> Self {
        wanted.map_or(Choice::Off, Choice::Unchecked)
    }

    /// The kernel a forward of a model on `device` in `kind` attends with, if not SDPA;
    /// `heads`: its (key/value heads, query heads, head dimension).
    pub fn kernel(&mut self, device: Device, kind: Kind, heads: (i64, i64, i64)) -> Option<Kernel> {
        if let Choice::Unchecked(kernel) = *self {
            *self = match kernel {
                Kernel::Emulated => Choice::On(kernel),
                Kernel::Flash if !matches!(kind, Kind::BFloat16 | Kind::Half) => Choice::Off,
                Kernel::Flash => match self_check(device, kind, heads) {
                    Ok(()) => Choice::On(kernel),
                    Err(e) => {
                        eprintln!("vagen: {e}; attending with SDPA (engine.flash_attention = false skips the check)");
                        Choice::Off
                    }
                },
            };
        }
        match *self {
            Choice::On(kernel) => Some(kernel),
            _ => None,
        }
    }
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
        causal: std::ffi::c_int,
        out: *mut *mut torch_sys::C_tensor,
        err: *mut std::ffi::c_char,
        len: usize,
    ) -> std::ffi::c_int;
}

/// Where each sequence's queries and keys are, for one forward over a cache of `[rows,
/// kv_heads, capacity, head_dim]`: computed once a forward, read by every layer (all have
/// that shape). Sequence (i, h) is batch row i's key/value head h.
pub(crate) struct Sequences {
    /// int32 `[b·kv + 1]`: where sequence e's queries start in the packed queries.
    cu_q: Tensor,
    /// int32 `[b·kv + 1]`: where sequence e's keys start in the flattened cache (the last
    /// entry is the cache's end, never read: `seqused_k` gives each length).
    cu_k: Tensor,
    /// int32 `[b·kv]`: each sequence's keys, its row's length after this forward.
    seqused: Tensor,
    /// Which of the `b·kv·t` (row, head, query) places are real queries, in packed order;
    /// `None` when every one is (a decode step).
    packed: Option<Tensor>,
    /// Queries and keys of a sequence at most (the kernel's work split depends on them; a
    /// CUDA graph holds them).
    max_q: i64,
    max_k: i64,
    /// `Some` where SDPA computes the attention ([`Kernel::Emulated`]): per packed query,
    /// its sequence and the last key it sees. `None`: the flash kernel.
    emulated: Option<(Tensor, Tensor)>,
}

impl Sequences {
    /// One new query per batch row: row i is cache row `rows[i]`, whose first `lens[i]`
    /// positions it reads (i64 `[b]`, on the cache's device, so a CUDA graph computes this
    /// from its inputs), `max_k` at most, over a cache of `shape` `[rows, kv, capacity, d]`.
    pub fn decode(kernel: Kernel, rows: &Tensor, lens: &Tensor, shape: [i64; 4], max_k: i64) -> Self {
        let kv = shape[1];
        let b = rows.size()[0];
        let device = rows.device();
        let seqused = lens.view([b, 1]).expand([b, kv], false).reshape([b * kv]);
        let cu_q = Tensor::arange(b * kv + 1, (Kind::Int, device));
        let emulated =
            (kernel == Kernel::Emulated).then(|| (Tensor::arange(b * kv, (Kind::Int64, device)), &seqused - 1));
        let cu_k = key_starts(rows, shape);
        Sequences { cu_q, cu_k, seqused: seqused.to_kind(Kind::Int), packed: None, max_q: 1, max_k, emulated }
    }

    /// The new parts of cache rows `rows`: row i's `lens[i]` new positions after its
    /// `past[i]` cached ones, its queries padded to `t`; each query sees the keys up to its
    /// own place.
    pub fn prefill(
        kernel: Kernel,
        rows: &[i64],
        past: &[usize],
        lens: &[usize],
        t: usize,
        shape: [i64; 4],
        device: Device,
    ) -> Self {
        let kv = shape[1] as usize;
        // With one query a row the kernel takes its decode path, which needs every row's.
        debug_assert!(lens.iter().all(|&l| l > 0), "a prefill row without new positions");
        let (mut packed, mut cu_q, mut seqused, mut entry, mut last) = (vec![], vec![0i32], vec![], vec![], vec![]);
        for (i, (&p, &l)) in past.iter().zip(lens).enumerate() {
            for h in 0..kv {
                let e = i * kv + h;
                packed.extend((0..l).map(|j| (e * t + j) as i64));
                entry.extend(std::iter::repeat_n(e as i64, l));
                last.extend((p..p + l).map(|k| k as i64));
                cu_q.push(cu_q[e] + l as i32);
                seqused.push((p + l) as i32);
            }
        }
        let upload = |x: &[i64]| crate::device::upload(x, device);
        let emulated = (kernel == Kernel::Emulated).then(|| (upload(&entry), upload(&last)));
        let max_q = lens.iter().copied().max().unwrap_or(1) as i64;
        let max_k = past.iter().zip(lens).map(|(p, l)| p + l).max().unwrap_or(1) as i64;
        Sequences {
            cu_q: crate::device::upload(&cu_q, device),
            cu_k: key_starts(&upload(rows), shape),
            seqused: crate::device::upload(&seqused, device),
            packed: Some(upload(&packed)),
            max_q,
            max_k,
            emulated,
        }
    }

    /// Attention of `q` `[b, heads, t, d]` over one layer's `keys` and `values` `[rows, kv,
    /// capacity, d]`: `[b, heads, t, d]` (padding queries zero). Query head h reads
    /// key/value head h / (heads / kv).
    pub fn attend(&self, q: &Tensor, keys: &Tensor, values: &Tensor) -> Result<Tensor> {
        let [b, heads, t, d] = q.size()[..] else { return Err(Error::Invalid("a query of 4 dimensions".into())) };
        let kv = keys.size()[1];
        let groups = heads / kv;
        // [b, kv, groups, t, d] → one row per (row, head, query): its `groups` query heads.
        let q = q.reshape([b, kv, groups, t, d]).permute([0, 1, 3, 2, 4]).reshape([b * kv * t, groups, d]);
        let q = self.packed.as_ref().map_or(q.shallow_clone(), |p| q.index_select(0, p));
        let (k, v) = (keys.view([-1, 1, d]), values.view([-1, 1, d]));
        let out = match &self.emulated {
            None => varlen(&q, &k, &v, self, self.max_q > 1)?,
            Some(queries) => self.emulate(queries, &q, &k, &v),
        };
        let out = match &self.packed {
            Some(p) => out.new_zeros([b * kv * t, groups, d], (out.kind(), out.device())).index_copy(0, p, &out),
            None => out,
        };
        Ok(out.reshape([b, kv, t, groups, d]).permute([0, 1, 3, 2, 4]).reshape([b, heads, t, d]))
    }

    /// The kernel's contract with SDPA: each packed query's sequence's keys gathered (up to
    /// `max_k`), those past its own place masked.
    fn emulate(&self, (entry, last): &(Tensor, Tensor), q: &Tensor, k: &Tensor, v: &Tensor) -> Tensor {
        let (n, groups, d) = (q.size()[0], q.size()[1], q.size()[2]);
        let device = q.device();
        let places = Tensor::arange(self.max_k, (Kind::Int64, device)).view([1, -1]);
        let first = self.cu_k.to_kind(Kind::Int64).index_select(0, entry).view([n, 1]);
        let index = (first + &places).clamp_max(k.size()[0] - 1).view([-1]);
        let gather = |t: &Tensor| t.view([-1, d]).index_select(0, &index).view([n, 1, self.max_k, d]);
        let mask = places.view([1, 1, 1, -1]).le_tensor(&last.view([n, 1, 1, 1]));
        let q = q.view([n, 1, groups, d]);
        Tensor::scaled_dot_product_attention(&q, &gather(k), &gather(v), Some(&mask), 0.0, false, None::<f64>, false)
            .view([n, groups, d])
    }
}

/// int32 `[b·kv + 1]`: where each (row, head) sequence of cache rows `rows` (i64 `[b]`)
/// starts in the flattened cache of `shape`, then the cache's end.
fn key_starts(rows: &Tensor, shape: [i64; 4]) -> Tensor {
    let [cache_rows, kv, capacity, _] = shape;
    // The kernel's offsets are int32: 2^31 positions a layer is 256 GiB of keys in bf16.
    debug_assert!(cache_rows * kv * capacity <= i64::from(i32::MAX), "a cache past int32 offsets");
    let (b, device) = (rows.size()[0], rows.device());
    let heads = Tensor::arange(kv, (Kind::Int64, device)).view([1, kv]);
    let starts = ((rows.view([b, 1]) * kv + heads) * capacity).view([b * kv]);
    let end = Tensor::full([1], cache_rows * kv * capacity, (Kind::Int64, device));
    Tensor::cat(&[starts, end], 0).to_kind(Kind::Int)
}

/// The kernel itself over `s`'s sequences: `q` `[total_q, heads, d]`, `k` and `v`
/// `[total_k, 1, d]`; causal queries are aligned to their sequence's last keys.
fn varlen(q: &Tensor, k: &Tensor, v: &Tensor, s: &Sequences, causal: bool) -> Result<Tensor> {
    let mut out = std::ptr::null_mut();
    // SAFETY: every pointer is a live tensor or local for the call; on success the shim
    // hands over a new `at::Tensor`, which `from_ptr` owns.
    crate::error::shim_call(
        || "flash attention".into(),
        |err, len| unsafe {
            vagen_flash_varlen(
                q.as_ptr(),
                k.as_ptr(),
                v.as_ptr(),
                s.cu_q.as_ptr(),
                s.cu_k.as_ptr(),
                s.seqused.as_ptr(),
                s.max_q,
                s.max_k,
                std::ffi::c_int::from(causal),
                &mut out,
                err,
                len,
            )
        },
    )?;
    // SAFETY: `out` is the new tensor the shim allocated.
    Ok(unsafe { Tensor::from_ptr(out) })
}

/// Whether the flash kernel computes on `device` in `kind` what [`Kernel::Emulated`] does for
/// a model of `kv` key/value heads, `heads` query heads of `d` dimensions: a decode of two
/// rows read out of order, one of 256 sequences or more (the kernel's split-free path on
/// large GPUs) with lengths across its blocks, and a prefill of causal queries after cached
/// keys.
pub(crate) fn self_check(device: Device, kind: Kind, heads: (i64, i64, i64)) -> Result<()> {
    agrees(Kernel::Flash, device, kind, heads)
}

/// [`self_check`]'s cases through `kernel`, against [`Kernel::Emulated`].
fn agrees(kernel: Kernel, device: Device, kind: Kind, (kv, heads, d): (i64, i64, i64)) -> Result<()> {
    let _guard = tch::no_grad_guard();
    let (rows, capacity) = (3, 512);
    let shape = [rows, kv, capacity, d];
    // Varied values without libtorch's generator, whose state a seeded run may rely on.
    let filled = |shape: [i64; 4], phase: f64| {
        let n = shape.iter().product::<i64>();
        (Tensor::arange(n, (Kind::Float, device)) * 0.731 + phase).sin().to_kind(kind).view(shape)
    };
    let (keys, values) = (filled(shape, 0.0), filled(shape, 1.0));
    let upload = |x: &[i64]| Tensor::from_slice(x).to_device(device);
    let many = (256 + kv - 1) / kv;
    let (read, lens) = (upload(&[2, 0]), upload(&[300, 7]));
    let (read_many, lens_many): (Vec<i64>, Vec<i64>) = (0..many).map(|i| (i % rows, 1 + i * 37 % capacity)).unzip();
    let (read_many, lens_many) = (upload(&read_many), upload(&lens_many));
    let decode = |kernel| Sequences::decode(kernel, &read, &lens, shape, capacity);
    let decode_many = |kernel| Sequences::decode(kernel, &read_many, &lens_many, shape, capacity);
    let prefill = |kernel| Sequences::prefill(kernel, &[1, 0], &[3, 200], &[5, 2], 5, shape, device);
    type Case<'a> = (&'a str, &'a dyn Fn(Kernel) -> Sequences, i64, i64);
    let cases: [Case; 3] =
        [("decode", &decode, 2, 1), ("large decode", &decode_many, many, 1), ("prefill", &prefill, 2, 5)];
    for (case, sequences, b, t) in cases {
        let q = filled([b, heads, t, d], 2.0) * 2.0;
        let flash = sequences(kernel).attend(&q, &keys, &values)?.to_kind(Kind::Float);
        let emulated = sequences(Kernel::Emulated).attend(&q, &keys, &values)?.to_kind(Kind::Float);
        // Padding queries (the prefill's second row past its 2) are zero on both sides.
        let gap = (flash - emulated).abs().max().double_value(&[]);
        if !(gap.is_finite() && gap < 2e-2) {
            return Err(Error::Invalid(format!("flash attention differs from SDPA by {gap} on a {case} case")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attention computed by hand: `q` `[heads, d]` over positions `0..=last` of cache row
    /// `row`, query head h reading key/value head h / (heads / kv).
    fn by_hand(q: &Tensor, keys: &Tensor, values: &Tensor, row: i64, last: i64) -> Tensor {
        let (heads, d, kv) = (q.size()[0], q.size()[1], keys.size()[1]);
        let per_head: Vec<Tensor> = (0..heads)
            .map(|h| {
                let kh = h / (heads / kv);
                let k = keys.get(row).get(kh).narrow(0, 0, last + 1);
                let v = values.get(row).get(kh).narrow(0, 0, last + 1);
                let weights = (k.matmul(&q.get(h).view([d, 1])).view([-1]) / (d as f64).sqrt()).softmax(0, Kind::Float);
                weights.view([1, -1]).matmul(&v).view([d])
            })
            .collect();
        Tensor::stack(&per_head, 0)
    }

    #[test]
    fn emulated_sequences_read_their_rows_heads_lengths_and_causal_places() {
        let (rows, kv, capacity, d, heads) = (3, 2, 8, 4, 4);
        let cpu = (Kind::Float, Device::Cpu);
        let (keys, values) = (Tensor::randn([rows, kv, capacity, d], cpu), Tensor::randn([rows, kv, capacity, d], cpu));
        let shape = [rows, kv, capacity, d];
        // A decode step: batch row 0 reads cache row 2's first 5 positions, row 1 row 0's 3.
        let q = Tensor::randn([2, heads, 1, d], cpu);
        let (read, lens) = (Tensor::from_slice(&[2i64, 0]), Tensor::from_slice(&[5i64, 3]));
        let got = Sequences::decode(Kernel::Emulated, &read, &lens, shape, 6).attend(&q, &keys, &values).unwrap();
        for (i, (row, len)) in [(2, 5), (0, 3)].into_iter().enumerate() {
            let want = by_hand(&q.get(i as i64).select(1, 0), &keys, &values, row, len - 1);
            let gap = (got.get(i as i64).select(1, 0) - want).abs().max().double_value(&[]);
            assert!(gap < 1e-5, "decode row {i}: {gap}");
        }
        // A prefill of cache rows 2 and 0: 3 new positions after 2 cached, 1 after 4 (padded).
        let q = Tensor::randn([2, heads, 3, d], cpu);
        let sequences = Sequences::prefill(Kernel::Emulated, &[2, 0], &[2, 4], &[3, 1], 3, shape, Device::Cpu);
        let got = sequences.attend(&q, &keys, &values).unwrap();
        for (i, row, past, len) in [(0, 2, 2, 3), (1, 0, 4, 1)] {
            for j in 0..3 {
                let out = got.get(i).select(1, j);
                let want = if j < len {
                    by_hand(&q.get(i).select(1, j), &keys, &values, row, past + j)
                } else {
                    out.zeros_like()
                };
                let gap = (out - want).abs().max().double_value(&[]);
                assert!(gap < 1e-5, "prefill row {i} query {j}: {gap}");
            }
        }
    }

    #[test]
    fn the_kernel_where_it_does_not_exist_is_an_error_that_names_it() {
        let err = self_check(Device::Cpu, Kind::Float, (2, 14, 64)).unwrap_err().to_string();
        assert!(err.contains("flash attention"), "{err}");
        // The check's cases themselves are well formed (the kernel swapped for its emulation).
        agrees(Kernel::Emulated, Device::Cpu, Kind::Float, (2, 14, 64)).unwrap();
    }
}
