//! Qwen2.5-VL's vision tower (`visual.*` in HF checkpoints): patch embedding, blocks with
//! 2-D rotary attention inside windows (or over the whole image in the full-attention
//! blocks), and the 2 × 2 patch merger that projects to the language model's width.

use crate::linear::{Linear, Site, param};
use crate::qwen2::{Mlp, RmsNorm};
use crate::rope;
use crate::vl_config::VisionConfig;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use tch::nn::{Init, Path};
use tch::{Device, Kind, Tensor};

/// Nanoseconds this process has spent in [`VisionTower::forward`].
static FORWARD_NANOS: AtomicU64 = AtomicU64::new(0);

/// Seconds this process has spent in the vision tower's forward passes (on a GPU, waiting
/// for its kernels): read before and after a phase, the difference is the tower's share.
pub fn vision_forward_seconds() -> f64 {
    FORWARD_NANOS.load(Ordering::Relaxed) as f64 * 1e-9
}

/// Vision norms use a fixed epsilon in HF, whatever the config says.
const NORM_EPS: f64 = 1e-6;

struct Attention {
    qkv: Linear,
    proj: Linear,
    heads: i64,
}

struct Block {
    norm1: RmsNorm,
    norm2: RmsNorm,
    attn: Attention,
    mlp: Mlp,
}

struct Merger {
    ln_q: RmsNorm,
    fc1: Linear,
    fc2: Linear,
}

pub struct VisionTower {
    /// Conv3d kernel `[hidden, channels, temporal, patch, patch]` with stride = kernel.
    /// Applied as a Conv3d, as HF does: a matrix product is the same maths but sums in
    /// another order (4e-5 relative at the logits on the fixtures; the convolution gives 0).
    patch_embed: Tensor,
    blocks: Vec<Block>,
    merger: Merger,
    inv_freq: Tensor,
    config: VisionConfig,
}

impl VisionTower {
    pub(crate) fn new(p: Path, c: &VisionConfig) -> Self {
        let h = c.hidden_size;
        let patch_embed = param(
            &(&p / "patch_embed" / "proj"),
            "weight",
            &[h as i64, c.in_channels as i64, c.temporal_patch_size as i64, c.patch_size as i64, c.patch_size as i64],
            Init::Const(0.),
        );
        let blocks = (0..c.depth)
            .map(|i| {
                let b = &p / "blocks" / i;
                Block {
                    norm1: RmsNorm::new(&b / "norm1", h, NORM_EPS),
                    norm2: RmsNorm::new(&b / "norm2", h, NORM_EPS),
                    attn: Attention {
                        qkv: Linear::new(&b / "attn" / "qkv", h, 3 * h, true),
                        proj: Linear::new(&b / "attn" / "proj", h, h, true),
                        heads: c.num_heads as i64,
                    },
                    mlp: Mlp::sized(&b / "mlp", h, c.intermediate_size, true),
                }
            })
            .collect();
        let unit = h * c.spatial_merge_size * c.spatial_merge_size;
        let m = &p / "merger";
        let merger = Merger {
            ln_q: RmsNorm::new(&m / "ln_q", h, NORM_EPS),
            fc1: Linear::new(&m / "mlp" / 0, unit, unit, true),
            fc2: Linear::new(&m / "mlp" / 2, unit, c.out_hidden_size, true),
        };
        let inv_freq = rope::inverse_frequencies(c.head_dim() / 2, c.rope_theta, p.device());
        VisionTower { patch_embed, blocks, merger, inv_freq, config: c.clone() }
    }

    pub fn config(&self) -> &VisionConfig {
        &self.config
    }

    /// Every linear layer, named as in checkpoints (`visual.blocks.N.attn.qkv`).
    pub(crate) fn sites(&mut self) -> Vec<Site<'_>> {
        let mut out = Vec::new();
        for (i, b) in self.blocks.iter_mut().enumerate() {
            let p = format!("visual.blocks.{i}");
            out.push(Site::new(format!("{p}.attn.qkv"), true, &mut b.attn.qkv));
            out.push(Site::new(format!("{p}.attn.proj"), true, &mut b.attn.proj));
            out.extend(b.mlp.sites(&format!("{p}.mlp"), true));
        }
        out.push(Site::new("visual.merger.mlp.0".into(), true, &mut self.merger.fc1));
        out.push(Site::new("visual.merger.mlp.2".into(), true, &mut self.merger.fc2));
        out
    }

    /// Image features `[Σ tokens, out_hidden]` for `pixel_values` `[Σ patches, patch_dim]`
    /// of images with `grids` `[t, h, w]` (in patches), in image order and, within an image,
    /// in the order of its image-pad tokens.
    pub fn forward(&self, pixel_values: &Tensor, grids: &[[usize; 3]]) -> Tensor {
        let start = Instant::now();
        let out = self.features(pixel_values, grids);
        if let Device::Cuda(i) = out.device() {
            tch::Cuda::synchronize(i as i64);
        }
        FORWARD_NANOS.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        out
    }

    fn features(&self, pixel_values: &Tensor, grids: &[[usize; 3]]) -> Tensor {
        let c = &self.config;
        let device = self.patch_embed.device();
        let kind = self.patch_embed.kind();
        let plan = Plan::new(grids, c, device);
        let hidden = c.hidden_size as i64;
        let k = self.patch_embed.size();
        let x = pixel_values
            .to_device(device)
            .to_kind(kind)
            .view([-1, k[1], k[2], k[3], k[4]])
            .conv3d(&self.patch_embed, None::<&Tensor>, [k[2], k[3], k[4]], 0, 1, 1)
            .view([-1, hidden]);
        let x = plan.to_windows(&x);
        let (cos, sin) = plan.rotary(&self.inv_freq);
        let mut x = x;
        for (i, block) in self.blocks.iter().enumerate() {
            let groups = if c.fullatt_block_indexes.contains(&i) { &plan.full } else { &plan.windows };
            let a = block.attn.forward(&block.norm1.forward(&x), &cos, &sin, groups);
            x = &x + a;
            x = &x + block.mlp.forward(&block.norm2.forward(&x));
        }
        let unit = c.spatial_merge_size * c.spatial_merge_size;
        let merged = self.merger.ln_q.forward(&x).view([-1, hidden * unit as i64]);
        let merged = self.merger.fc2.forward(&self.merger.fc1.forward(&merged).gelu("none"));
        merged.index_select(0, &plan.unwindow)
    }
}

impl Attention {
    /// Attention of `x` `[n, hidden]` within each segment of `groups` (no attention across
    /// segments), q and k turned by the 2-D rotary tables in f32 as HF does.
    fn forward(&self, x: &Tensor, cos: &Tensor, sin: &Tensor, groups: &Groups) -> Tensor {
        let n = x.size()[0];
        let kind = x.kind();
        let qkv = self.qkv.forward(x).view([n, 3, self.heads, -1]);
        let turn = |t: Tensor| {
            let t = t.to_kind(Kind::Float);
            (&t * cos + rope::rotate_half(&t) * sin).to_kind(kind)
        };
        let q = turn(qkv.select(1, 0));
        let k = turn(qkv.select(1, 1));
        let v = qkv.select(1, 2);
        let out = groups.attend(&q, &k, &v);
        // Not `view`: on CUDA in bf16, SDPA pads a head size that is not a multiple of 8
        // and returns the unpadded slice, whose heads are not adjacent in memory.
        self.proj.forward(&out.reshape([n, -1]))
    }
}

/// Segments of the patch sequence that attend among themselves (windows or whole images),
/// batched by length so one SDPA call serves every segment of a length.
struct Groups {
    /// Per distinct length: the segments' patch indices `[count · length]`.
    by_length: Vec<(i64, Tensor)>,
    /// Puts the concatenated per-length outputs back in sequence order (`None`: one
    /// segment holding everything, already in order).
    restore: Option<Tensor>,
}

impl Groups {
    fn new(segments: &[(usize, usize)], device: Device) -> Self {
        let total: usize = segments.iter().map(|s| s.1).sum();
        if segments.len() == 1 {
            return Groups {
                by_length: vec![(total as i64, Tensor::arange(total as i64, (Kind::Int64, device)))],
                restore: None,
            };
        }
        let mut lengths: Vec<usize> = segments.iter().map(|s| s.1).collect();
        lengths.sort_unstable();
        lengths.dedup();
        let mut order: Vec<i64> = Vec::with_capacity(total);
        let by_length = lengths
            .into_iter()
            .map(|len| {
                let idx: Vec<i64> = segments
                    .iter()
                    .filter(|s| s.1 == len)
                    .flat_map(|&(start, l)| (start..start + l).map(|i| i as i64))
                    .collect();
                order.extend(&idx);
                (len as i64, Tensor::from_slice(&idx).to_device(device))
            })
            .collect();
        let mut restore = vec![0i64; total];
        for (pos, &i) in order.iter().enumerate() {
            restore[i as usize] = pos as i64;
        }
        Groups { by_length, restore: Some(Tensor::from_slice(&restore).to_device(device)) }
    }

    /// q, k, v `[n, heads, head_dim]` → `[n, heads, head_dim]`.
    fn attend(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Tensor {
        let (heads, d) = (q.size()[1], q.size()[2]);
        let outs: Vec<Tensor> = self
            .by_length
            .iter()
            .map(|(len, idx)| {
                let take = |t: &Tensor| t.index_select(0, idx).view([-1, *len, heads, d]).transpose(1, 2);
                let o = Tensor::scaled_dot_product_attention(
                    &take(q),
                    &take(k),
                    &take(v),
                    None::<&Tensor>,
                    0.0,
                    false,
                    None::<f64>,
                    false,
                );
                o.transpose(1, 2).reshape([-1, heads, d])
            })
            .collect();
        let out = if outs.len() == 1 { outs.into_iter().next().expect("one group") } else { Tensor::cat(&outs, 0) };
        match &self.restore {
            Some(r) => out.index_select(0, r),
            None => out,
        }
    }
}

/// Where each patch goes: the window order, the segments each kind of block attends
/// within, and the rotary positions; all from the grids alone.
struct Plan {
    /// Patch `i` of the window order is patch `to_window[i]` of the input order.
    to_window: Tensor,
    /// Merged unit `i` of the input order is unit `unwindow[i]` of the window order.
    unwindow: Tensor,
    windows: Groups,
    full: Groups,
    /// (row, column) of each patch, in window order.
    positions: Tensor,
}

impl Plan {
    fn new(grids: &[[usize; 3]], c: &VisionConfig, device: Device) -> Self {
        let m = c.spatial_merge_size;
        let unit = m * m;
        let per_window = c.window_size / c.factor();
        let mut unit_order: Vec<usize> = vec![]; // merged units in window order
        let mut window_segments: Vec<(usize, usize)> = vec![];
        let mut full_segments: Vec<(usize, usize)> = vec![];
        let mut rows_cols: Vec<(i64, i64)> = vec![]; // per patch, input order
        let mut base = 0; // merged units before this image
        for &[t, h, w] in grids {
            let (mh, mw) = (h / m, w / m);
            for frame in 0..t {
                full_segments.push(((base + frame * mh * mw) * unit, mh * mw * unit));
                for wy in (0..mh).step_by(per_window) {
                    for wx in (0..mw).step_by(per_window) {
                        let start = unit_order.len();
                        for y in wy..(wy + per_window).min(mh) {
                            for x in wx..(wx + per_window).min(mw) {
                                unit_order.push(base + frame * mh * mw + y * mw + x);
                            }
                        }
                        window_segments.push((start * unit, (unit_order.len() - start) * unit));
                    }
                }
                for by in 0..mh {
                    for bx in 0..mw {
                        for dy in 0..m {
                            for dx in 0..m {
                                rows_cols.push(((by * m + dy) as i64, (bx * m + dx) as i64));
                            }
                        }
                    }
                }
            }
            base += t * mh * mw;
        }
        let to_window: Vec<i64> =
            unit_order.iter().flat_map(|&u| (0..unit).map(move |j| (u * unit + j) as i64)).collect();
        let mut unwindow = vec![0i64; unit_order.len()];
        for (pos, &u) in unit_order.iter().enumerate() {
            unwindow[u] = pos as i64;
        }
        let positions: Vec<i64> =
            to_window.iter().flat_map(|&i| [rows_cols[i as usize].0, rows_cols[i as usize].1]).collect();
        Plan {
            to_window: Tensor::from_slice(&to_window).to_device(device),
            unwindow: Tensor::from_slice(&unwindow).to_device(device),
            windows: Groups::new(&window_segments, device),
            full: Groups::new(&full_segments, device),
            positions: Tensor::from_slice(&positions).view([-1, 2]).to_device(device),
        }
    }

    fn to_windows(&self, x: &Tensor) -> Tensor {
        x.index_select(0, &self.to_window)
    }

    /// `(cos, sin)` `[n, 1, head_dim]` in f32: the first half of each head's frequencies
    /// turn with the row, the second with the column, the whole repeated once (HF's layout).
    fn rotary(&self, inv_freq: &Tensor) -> (Tensor, Tensor) {
        let freqs = self.positions.to_kind(Kind::Float).unsqueeze(-1) * inv_freq; // [n, 2, d/4]
        let n = freqs.size()[0];
        let hw = freqs.view([n, -1]);
        let emb = Tensor::cat(&[&hw, &hw], -1).unsqueeze(1);
        (emb.cos(), emb.sin())
    }
}
