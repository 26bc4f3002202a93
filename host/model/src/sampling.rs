//! Picking the next token from logits: greedy, or sampling with temperature, top-k and
//! top-p. The random draws come from a seeded ChaCha stream on the host (one uniform per
//! row per step), so a seed gives the same tokens on any device and libtorch build.

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use tch::{Kind, Tensor};

pub(crate) struct Sampler {
    temperature: f64,
    top_p: f64,
    top_k: usize,
    rng: ChaCha8Rng,
}

impl Sampler {
    pub fn new(temperature: f64, top_p: f64, top_k: usize, seed: u64) -> Self {
        Sampler { temperature, top_p, top_k, rng: ChaCha8Rng::seed_from_u64(seed) }
    }

    /// The temperature log-probs are taken at: the sampling temperature, or 1 for greedy.
    pub fn logprob_temperature(&self) -> f64 {
        if self.temperature > 0.0 { self.temperature } else { 1.0 }
    }

    /// Next tokens `[batch]` (i64) and their log-probs `[batch]` (f32) under the full
    /// temperature-scaled distribution (what a training forward recomputes; top-k / top-p
    /// only restrict which tokens can be drawn).
    pub fn step(&mut self, logits: &Tensor) -> (Tensor, Tensor) {
        // Drawn whether used or not, so greedy and sampled rows never shift each other's draws.
        let draws: Vec<f64> = (0..logits.size()[0]).map(|_| uniform(&mut self.rng)).collect();
        self.step_with(logits, &draws)
    }

    /// [`Self::step`] with each row's uniform draw given: rows that own their draw streams
    /// get the same tokens whichever rows they share a batch with.
    pub fn step_with(&self, logits: &Tensor, draws: &[f64]) -> (Tensor, Tensor) {
        let logp = self.logprobs(logits);
        let tokens = self.tokens(logits, &logp, || draws_tensor(draws, logits.device()));
        let chosen = logp.gather(-1, &tokens.unsqueeze(-1), false).squeeze_dim(-1);
        (tokens, chosen)
    }

    /// One step's columns `[rows, 2 + 2k]` (f64): each row's token, its log-prob (as
    /// [`Self::step_with`]'s), its `k` best log-probs, most likely first, and their ids (`k`
    /// at most the vocabulary). `draws` gives [`draws_tensor`]'s, on the logits' device (asked
    /// only when sampling): a pure function of tensors, so a CUDA graph holds it with the
    /// forward.
    pub fn columns(&self, logits: &Tensor, draws: impl FnOnce() -> Tensor, k: usize) -> Tensor {
        let logp = self.logprobs(logits);
        let tokens = self.tokens(logits, &logp, draws);
        let chosen = logp.gather(-1, &tokens.unsqueeze(-1), false);
        let mut parts = vec![tokens.to_kind(Kind::Double).unsqueeze(1), chosen.to_kind(Kind::Double)];
        if k > 0 {
            let (values, ids) = logp.topk(k.min(logp.size()[1] as usize) as i64, -1, true, true);
            parts.push(values.to_kind(Kind::Double));
            parts.push(ids.to_kind(Kind::Double));
        }
        Tensor::cat(&parts, 1)
    }

    /// Log-probs (f32) under the temperature-scaled distribution.
    fn logprobs(&self, logits: &Tensor) -> Tensor {
        (logits / self.logprob_temperature()).log_softmax(-1, Kind::Float)
    }

    fn tokens(&self, logits: &Tensor, logp: &Tensor, draws: impl FnOnce() -> Tensor) -> Tensor {
        if self.draws() { self.draw(logp, &draws()) } else { logits.argmax(-1, false) }
    }

    /// Whether a step reads the rows' uniforms (greedy does not).
    pub fn draws(&self) -> bool {
        self.temperature > 0.0
    }

    /// What decides a draw besides its uniform: rows with equal settings sample together.
    pub fn setting(&self) -> (u64, u64, usize) {
        (self.temperature.to_bits(), self.top_p.to_bits(), self.top_k)
    }

    fn draw(&self, logp: &Tensor, draws: &Tensor) -> Tensor {
        let probs = logp.exp();
        let vocab = probs.size()[1];
        // Candidates in descending probability when a filter needs the order.
        let (p, ids) = if self.top_k > 0 && (self.top_k as i64) < vocab {
            probs.topk(self.top_k as i64, -1, true, true)
        } else if self.top_p < 1.0 {
            probs.sort(-1, true)
        } else {
            let ids = Tensor::arange(vocab, (Kind::Int64, probs.device())).unsqueeze(0).expand_as(&probs);
            (probs.shallow_clone(), ids)
        };
        let p = if self.top_p < 1.0 {
            // Keep the smallest prefix whose mass reaches top_p: a token stays when the mass
            // before it is still below top_p (the first token always stays).
            let before = p.cumsum(-1, Kind::Float) - &p;
            p.where_self(&before.lt(self.top_p), &p.zeros_like())
        } else {
            p
        };
        let cumulative = p.cumsum(-1, Kind::Float);
        let total = cumulative.narrow(1, cumulative.size()[1] - 1, 1);
        let u = draws.unsqueeze(-1) * &total;
        let last = cumulative.size()[1] - 1;
        let index = cumulative.le_tensor(&u).sum_dim_intlist(-1, true, Kind::Int64).clamp_max(last);
        ids.gather(-1, &index, false).squeeze_dim(-1)
    }
}

/// Each row's uniform as the draw reads it, `[rows]` f32 on `device`, uploaded without
/// waiting: kept a few f32 ulps below 1 so u stays below the total mass after rounding, and
/// the first candidate whose cumulative mass exceeds u always has a non-zero probability.
pub(crate) fn draws_tensor(draws: &[f64], device: tch::Device) -> Tensor {
    crate::device::upload(&draws.iter().map(|&d| draw_f32(d)).collect::<Vec<_>>(), device)
}

/// One row's uniform as [`draws_tensor`] holds it.
pub(crate) fn draw_f32(d: f64) -> f32 {
    d.min(1.0 - 1.0 / (1u64 << 22) as f64) as f32
}

/// One uniform in [0, 1) from the top 53 bits of the stream's next word.
pub(crate) fn uniform(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// Standard normal by Box–Muller: portable, unlike libtorch's generator across devices.
pub(crate) fn gaussian(rng: &mut ChaCha8Rng) -> f64 {
    let u1 = ((rng.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    let u2 = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}
