//! A micro-batch: some of a [`StepBatch`]'s sequences as right-padded tensors on the "next
//! token" grid: column j is token j + 1, predicted from position j. Masks, advantages, old
//! log-probs and values are shifted the same way, so every tensor lines up with the logits.
//! A VL model's micro-batch also holds its sequences' pixel values and M-RoPE positions.

use crate::step_batch::StepBatch;
use anyhow::{Context, Result};
use tch::{Device, Kind, Tensor};
use vagen_model::{Model, PixelValues, Qwen2Model, Vision, hidden_states};

/// `[rows, longest - 1]` tensors (ids `[rows, longest]`); the scored and credited columns
/// are there when the batch has them.
pub struct Micro {
    pub ids: Tensor,
    /// `[rows, longest]`, or `[3, rows, longest]` (M-RoPE) for a VL model.
    pub positions: Tensor,
    /// The rows' images as the vision tower takes them, row by row in token order.
    pub images: Vec<PixelValues>,
    pub targets: Tensor,
    pub loss_mask: Tensor,
    pub old_logprobs: Option<Tensor>,
    /// Generation's log-probs where the model sampled the token, else the old ones (w = 1):
    /// the behaviour policy of the off-policy corrections.
    pub behaviour_logprobs: Option<Tensor>,
    pub ref_logprobs: Option<Tensor>,
    pub old_values: Option<Tensor>,
    pub advantages: Option<Tensor>,
    pub returns: Option<Tensor>,
    pub value_mask: Option<Tensor>,
    /// Assistant tokens in it.
    pub tokens: usize,
}

impl Micro {
    /// Sequences `seqs` of `batch`, on `device`; their images through `vision`'s processor
    /// (a text-only model's batch holds none).
    pub fn new(batch: &StepBatch, seqs: &[usize], vision: Option<&Vision>, device: Device) -> Result<Self> {
        let spans: Vec<_> = seqs.iter().map(|&k| batch.tokens_of(k)).collect();
        let longest = spans.iter().map(|r| r.len()).max().unwrap_or(2).max(2);
        let b = seqs.len() as i64;
        let ids: Vec<i64> = spans
            .iter()
            .flat_map(|r| {
                batch.tokens.ids[r.clone()].iter().map(|&i| i as i64).chain(std::iter::repeat(0)).take(longest)
            })
            .collect();
        let ids = Tensor::from_slice(&ids).view([b, longest as i64]).to_device(device);
        let (positions, images) = match vision {
            Some(v) => {
                let mut images = vec![];
                let mut grids = vec![];
                for &k in seqs {
                    let pixels: Vec<PixelValues> = batch.seqs.images[k]
                        .iter()
                        .enumerate()
                        .map(|(i, img)| v.processor.process(img).with_context(|| format!("sequence {k}, image {i}")))
                        .collect::<Result<_>>()?;
                    grids.push(pixels.iter().map(|p| p.grid).collect::<Vec<_>>());
                    images.extend(pixels);
                }
                let rows: Vec<&[u32]> = spans.iter().map(|r| &batch.tokens.ids[r.clone()]).collect();
                (v.right_padded_positions(&rows, &grids, longest, device)?, images)
            }
            None => {
                if let Some(&k) = seqs.iter().find(|&&k| !batch.seqs.images[k].is_empty()) {
                    anyhow::bail!("sequence {k} holds images but the model has no vision tower");
                }
                let arange = Tensor::arange(longest as i64, (Kind::Int64, device)).unsqueeze(0);
                (arange.expand([b, longest as i64], false), vec![])
            }
        };
        // Token j + 1 of each sequence, as f32 columns of width longest - 1.
        let shifted = |f: &dyn Fn(usize) -> f32| {
            let data: Vec<f32> = spans
                .iter()
                .flat_map(|r| (1..longest).map(move |j| if j < r.len() { f(r.start + j) } else { 0.0 }))
                .collect();
            Tensor::from_slice(&data).view([b, longest as i64 - 1]).to_device(device)
        };
        let flag = |m: &[bool]| shifted(&|i| m[i] as u8 as f32);
        let scores = batch.scores.as_ref();
        let credit = batch.credit.as_ref();
        let by_model = &batch.tokens.by_model;
        Ok(Micro {
            targets: ids.narrow(1, 1, longest as i64 - 1),
            loss_mask: flag(&batch.tokens.loss_mask),
            old_logprobs: scores.map(|s| shifted(&|i| s.old_logprobs[i])),
            behaviour_logprobs: scores
                .map(|s| shifted(&|i| if by_model[i] { batch.tokens.sampled_logprobs[i] } else { s.old_logprobs[i] })),
            ref_logprobs: scores.and_then(|s| s.ref_logprobs.as_ref()).map(|r| shifted(&|i| r[i])),
            old_values: scores.and_then(|s| s.values.as_ref()).map(|v| shifted(&|i| v[i] as f32)),
            advantages: credit.map(|c| shifted(&|i| c.advantages[i])),
            returns: credit.map(|c| shifted(&|i| c.returns[i])),
            value_mask: credit.map(|c| flag(&c.value_mask)),
            tokens: seqs.iter().map(|&k| batch.loss_tokens(k)).sum(),
            ids,
            positions,
            images,
        })
    }

    /// The decoder's last hidden states over the rows (with their images).
    pub fn hidden(&self, model: &Qwen2Model, vision: Option<&Vision>) -> Result<Tensor> {
        let images: Vec<&PixelValues> = self.images.iter().collect();
        Ok(hidden_states(model, vision, &self.ids, &self.positions, &images)?)
    }
}

/// A column the micro-batch must have: its batch went through the phase that adds it.
pub fn column<'a>(t: &'a Option<Tensor>, name: &str) -> Result<&'a Tensor> {
    t.as_ref().with_context(|| format!("the micro-batch has no {name}: its batch skipped the phase that adds it"))
}

/// Log-probs of the targets and per-token entropy, `[rows, longest - 1]`, under the policy
/// at `temperature`; with gradients unless called under `no_grad`. Only positions inside the
/// loss mask are computed (the rest are 0): the LM head, softmax and entropy over the whole
/// vocabulary at every prompt position would cost more than the assistant tokens need.
pub fn logprobs_and_entropy(model: &Model, m: &Micro, temperature: f64) -> Result<(Tensor, Tensor)> {
    let lm = &model.lm;
    let hidden = m.hidden(&lm.model, model.vision.as_ref())?;
    let (b, n) = (m.targets.size()[0], m.targets.size()[1]);
    let hidden = hidden.narrow(1, 0, n).reshape([b * n, -1]);
    let at = m.loss_mask.reshape([b * n]).nonzero().squeeze_dim(1);
    let mut logits = lm.logits(&hidden.index_select(0, &at));
    if let Some(v) = &model.vision {
        logits = v.suppress_placeholders(&logits);
    }
    let logits = logits / temperature.max(1e-6);
    let logp_all = logits.log_softmax(-1, Kind::Float);
    let targets = m.targets.reshape([b * n]).index_select(0, &at);
    let logp = logp_all.gather(-1, &targets.unsqueeze(-1), false).squeeze_dim(-1);
    let entropy = -(logp_all.exp() * &logp_all).sum_dim_intlist([-1i64].as_slice(), false, Kind::Float);
    let spread = |x: Tensor| Tensor::zeros([b * n], (Kind::Float, x.device())).index_copy(0, &at, &x).view([b, n]);
    Ok((spread(logp), spread(entropy)))
}
