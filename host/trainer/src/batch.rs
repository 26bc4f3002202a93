//! Training sequences as padded tensors on the "next token" grid: column j is token j + 1,
//! predicted from position j. Masks, advantages, old log-probs and values are shifted the
//! same way, so every tensor of a micro-batch lines up with the logits.

use tch::{Device, Kind, Tensor};
use vagen_model::Qwen2ForCausalLM;

/// One sequence's per-token data (index = token position), ready to be batched.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub ids: Vec<u32>,
    pub loss_mask: Vec<bool>,
    pub old_logprobs: Vec<f32>,
    /// Under the KL reference policy (zeros without one).
    pub ref_logprobs: Vec<f32>,
    pub advantages: Vec<f32>,
    pub returns: Vec<f32>,
    pub old_values: Vec<f32>,
    pub value_mask: Vec<bool>,
}

/// Right-padded tensors `[rows, longest - 1]` (ids `[rows, longest]`).
pub struct Micro {
    pub ids: Tensor,
    pub targets: Tensor,
    pub loss_mask: Tensor,
    pub old_logprobs: Tensor,
    pub ref_logprobs: Tensor,
    pub advantages: Tensor,
    pub returns: Tensor,
    pub old_values: Tensor,
    pub value_mask: Tensor,
    pub tokens: usize,
}

impl Micro {
    pub fn new(rows: &[&Row], device: Device) -> Self {
        let longest = rows.iter().map(|r| r.ids.len()).max().unwrap_or(2).max(2);
        let b = rows.len() as i64;
        let ids: Vec<i64> = rows
            .iter()
            .flat_map(|r| r.ids.iter().map(|&i| i as i64).chain(std::iter::repeat(0)).take(longest))
            .collect();
        let ids = Tensor::from_slice(&ids).view([b, longest as i64]).to_device(device);
        // Token j + 1 of each row, as f32 columns of width longest - 1.
        let shifted_f = |f: &dyn Fn(&Row, usize) -> f32| {
            let data: Vec<f32> = rows
                .iter()
                .flat_map(|r| (1..longest).map(move |j| if j < r.ids.len() { f(r, j) } else { 0.0 }))
                .collect();
            Tensor::from_slice(&data).view([b, longest as i64 - 1]).to_device(device)
        };
        Micro {
            targets: ids.narrow(1, 1, longest as i64 - 1),
            loss_mask: shifted_f(&|r, j| r.loss_mask[j] as u8 as f32),
            old_logprobs: shifted_f(&|r, j| r.old_logprobs[j]),
            ref_logprobs: shifted_f(&|r, j| r.ref_logprobs[j]),
            advantages: shifted_f(&|r, j| r.advantages[j]),
            returns: shifted_f(&|r, j| r.returns[j]),
            old_values: shifted_f(&|r, j| r.old_values[j]),
            value_mask: shifted_f(&|r, j| r.value_mask[j] as u8 as f32),
            tokens: rows.iter().map(|r| r.loss_mask.iter().filter(|&&m| m).count()).sum(),
            ids,
        }
    }

    /// Positions `[rows, longest]` for the right-padded ids.
    pub fn positions(&self) -> Tensor {
        let s = self.ids.size();
        Tensor::arange(s[1], (Kind::Int64, self.ids.device())).unsqueeze(0).expand([s[0], s[1]], false)
    }
}

/// Log-probs of the targets and per-token entropy, `[rows, longest - 1]`, under the policy
/// at `temperature`; with gradients unless called under `no_grad`. Only positions inside the
/// loss mask are computed (the rest are 0): the LM head, softmax and entropy over the whole
/// vocabulary at every prompt position would cost more than the assistant tokens need.
pub fn logprobs_and_entropy(lm: &Qwen2ForCausalLM, m: &Micro, temperature: f64) -> (Tensor, Tensor) {
    let hidden = lm.model.forward(&m.ids, &m.positions(), None, None).expect("no cache, no capacity limit");
    let (b, n) = (m.targets.size()[0], m.targets.size()[1]);
    let hidden = hidden.narrow(1, 0, n).reshape([b * n, -1]);
    let at = m.loss_mask.reshape([b * n]).nonzero().squeeze_dim(1);
    let logits = lm.logits(&hidden.index_select(0, &at)) / temperature.max(1e-6);
    let logp_all = logits.log_softmax(-1, Kind::Float);
    let targets = m.targets.reshape([b * n]).index_select(0, &at);
    let logp = logp_all.gather(-1, &targets.unsqueeze(-1), false).squeeze_dim(-1);
    let entropy = -(logp_all.exp() * &logp_all).sum_dim_intlist([-1i64].as_slice(), false, Kind::Float);
    let spread = |x: Tensor| Tensor::zeros([b * n], (Kind::Float, x.device())).index_copy(0, &at, &x).view([b, n]);
    (spread(logp), spread(entropy))
}
