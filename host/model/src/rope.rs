use tch::{Kind, Tensor};

/// Rotary position embedding tables for explicit positions, computed in f32 as HF does and
/// then cast to the activations' dtype.
pub(crate) struct Rope {
    /// `[head_dim / 2]`, f32, on the model's device.
    inv_freq: Tensor,
    /// M-RoPE sections (Qwen2.5-VL): frequency pairs driven by the t, h and w positions.
    sections: Option<Vec<i64>>,
    /// `[-1, …, -1, 1, …, 1]` (`head_dim`): the sign [`apply`] folds into the sine table.
    signs: Tensor,
}

impl Rope {
    pub fn new(head_dim: usize, theta: f64, sections: Option<&[usize]>, device: tch::Device) -> Self {
        let half = head_dim / 2;
        let signs: Vec<f32> = (0..2 * half).map(|i| if i < half { -1.0 } else { 1.0 }).collect();
        Rope {
            inv_freq: inverse_frequencies(head_dim, theta, device),
            sections: sections.map(|s| s.iter().map(|&n| n as i64).collect()),
            signs: Tensor::from_slice(&signs).to_device(device),
        }
    }

    /// `(cos, signed sin)`, each `[batch, 1, seq, head_dim]`, for `positions` `[batch, seq]`,
    /// or for M-RoPE positions `[3, batch, seq]` (t, h, w): frequency pair j turns with the
    /// position of the section it falls in, as HF's `mrope_section` split does. The sine's
    /// first half is negated, as [`apply`] wants it.
    pub fn tables(&self, positions: &Tensor, kind: Kind) -> (Tensor, Tensor) {
        let freqs = positions.to_kind(Kind::Float).unsqueeze(-1) * &self.inv_freq;
        let freqs = match (&self.sections, positions.dim()) {
            (Some(sections), 3) => {
                let parts = freqs.split_with_sizes(sections, -1);
                let picked: Vec<Tensor> = parts.iter().enumerate().map(|(i, p)| p.select(0, (i % 3) as i64)).collect();
                Tensor::cat(&picked, -1)
            }
            (None, 3) => freqs.select(0, 0),
            _ => freqs,
        };
        let emb = Tensor::cat(&[&freqs, &freqs], -1).unsqueeze(1);
        let cast = |t: Tensor| if kind == Kind::Float { t } else { t.to_kind(kind) };
        (cast(emb.cos()), cast(emb.sin() * &self.signs))
    }
}

/// `1 / theta^(2i / dim)` for i < dim / 2, in f32 as HF computes it.
pub(crate) fn inverse_frequencies(dim: usize, theta: f64, device: tch::Device) -> Tensor {
    let exponents =
        Tensor::arange_start_step(0, dim as i64, 2, (Kind::Int64, device)).to_kind(Kind::Float) / dim as f64;
    Tensor::from(theta).to_device(device).to_kind(Kind::Float).pow(&exponents).reciprocal()
}

/// HF's `x * cos + rotate_half(x) * sin` on `[batch, heads, seq, head_dim]`, from the
/// tables of [`Rope::tables`]: `rotate_half(x)` is `[-x2, x1]`, and `[x2, x1]` (a roll by
/// half) times the sine with its first half negated gives the same bits in four operators
/// instead of seven.
pub(crate) fn apply(x: &Tensor, cos: &Tensor, signed_sin: &Tensor) -> Tensor {
    let half = x.size()[x.dim() - 1] / 2;
    x * cos + x.roll([half], [-1]) * signed_sin
}

/// `[-x2, x1]` for the halves x1, x2 of the last dimension.
pub(crate) fn rotate_half(x: &Tensor) -> Tensor {
    let half = x.size()[x.dim() - 1] / 2;
    Tensor::cat(&[&x.narrow(-1, half, half).neg(), &x.narrow(-1, 0, half)], -1)
}
