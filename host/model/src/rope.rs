use tch::{Kind, Tensor};

/// Rotary position embedding tables for explicit positions, computed in f32 as HF does and
/// then cast to the activations' dtype.
pub(crate) struct Rope {
    /// `[head_dim / 2]`, f32, on the model's device.
    inv_freq: Tensor,
}

impl Rope {
    pub fn new(head_dim: usize, theta: f64, device: tch::Device) -> Self {
        let exponents = Tensor::arange_start_step(0, head_dim as i64, 2, (Kind::Int64, device)).to_kind(Kind::Float)
            / head_dim as f64;
        let inv_freq = Tensor::from(theta).to_device(device).to_kind(Kind::Float).pow(&exponents).reciprocal();
        Rope { inv_freq }
    }

    /// `(cos, sin)`, each `[batch, 1, seq, head_dim]`, for `positions` `[batch, seq]`.
    pub fn tables(&self, positions: &Tensor, kind: Kind) -> (Tensor, Tensor) {
        let freqs = positions.to_kind(Kind::Float).unsqueeze(-1) * self.inv_freq.view([1, 1, -1]);
        let emb = Tensor::cat(&[&freqs, &freqs], -1).unsqueeze(1);
        (emb.cos().to_kind(kind), emb.sin().to_kind(kind))
    }
}

/// `x * cos + rotate_half(x) * sin` on `[batch, heads, seq, head_dim]`.
pub(crate) fn apply(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    let half = x.size()[3] / 2;
    let x1 = x.narrow(3, 0, half);
    let x2 = x.narrow(3, half, half);
    let rotated = Tensor::cat(&[&x2.neg(), &x1], 3);
    x * cos + rotated * sin
}
