//! The Qwen2 decoder. The struct tree mirrors the HF weight names
//! (`model.layers.N.self_attn.q_proj.weight`, …) so loading is a name-for-name copy.

use crate::derived::{Derived, grad_enabled};
use crate::kv_cache::LayerCache;
use crate::linear::{AdapterRows, Linear, Site, param};
use crate::rope::{self, Rope};
use crate::{KvCache, Qwen2Config, Result};
use tch::nn::{Init, Path};
use tch::{Kind, Tensor};

/// Computed in f32 whatever the parameter dtype, as HF's `Qwen2RMSNorm`.
pub(crate) struct RmsNorm {
    weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    pub fn new(p: Path, size: usize, eps: f64) -> Self {
        RmsNorm { weight: param(&p, "weight", &[size as i64], Init::Const(1.)), eps }
    }

    /// HF's order: normalised in f32, cast back, then scaled by the weight in the
    /// activations' dtype. libtorch's fused `rms_norm` gives the bits of HF's four
    /// operators (`pow`, `mean`, `rsqrt`, `mul`; checked on the CPU in f32 and bf16), with
    /// the weight inside it in f32 only: in bf16 it scales before casting back.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let size = [x.size()[x.dim() - 1]];
        match x.kind() {
            Kind::Float => x.rms_norm(size, Some(&self.weight), self.eps),
            kind => &self.weight * x.to_kind(Kind::Float).rms_norm(size, None::<Tensor>, self.eps).to_kind(kind),
        }
    }
}

struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
    /// The three projections' weights and biases concatenated, for forwards that record
    /// no gradients: one matmul instead of three (the same bits on the CPU), and RoPE on
    /// the queries and keys at once.
    qkv: Derived,
}

impl Attention {
    fn new(p: Path, c: &Qwen2Config) -> Self {
        let (h, d) = (c.hidden_size, c.head_dim);
        Attention {
            q_proj: Linear::new(&p / "q_proj", h, c.num_attention_heads * d, true),
            k_proj: Linear::new(&p / "k_proj", h, c.num_key_value_heads * d, true),
            v_proj: Linear::new(&p / "v_proj", h, c.num_key_value_heads * d, true),
            o_proj: Linear::new(&p / "o_proj", c.num_attention_heads * d, h, false),
            heads: c.num_attention_heads as i64,
            kv_heads: c.num_key_value_heads as i64,
            head_dim: d as i64,
            qkv: Derived::default(),
        }
    }

    /// Queries, keys and values, `[batch, heads, seq, head_dim]`, RoPE applied. `generating`:
    /// a forward with a KV cache, which may take the fused projection; every other forward
    /// (training, and the old log-probs recomputed beside it) takes the three matmuls, so
    /// the two compute the same bits on any device.
    fn project(
        &self,
        x: &Tensor,
        rope: (&Tensor, &Tensor),
        rows: Option<&AdapterRows>,
        generating: bool,
    ) -> (Tensor, Tensor, Tensor) {
        let (b, t) = (x.size()[0], x.size()[1]);
        let split = |y: Tensor, heads: i64| y.view([b, t, heads, self.head_dim]).transpose(1, 2);
        let (q, k, v) = (&self.q_proj, &self.k_proj, &self.v_proj);
        let training = grad_enabled();
        if training {
            // The copy would go stale through the update; its memory serves the update.
            self.qkv.clear();
        }
        if training || !generating || !self.fuses(rows) {
            let q = rope::apply(&split(q.forward_rows(x, rows), self.heads), rope.0, rope.1);
            let k = rope::apply(&split(k.forward_rows(x, rows), self.kv_heads), rope.0, rope.1);
            return (q, k, split(v.forward_rows(x, rows), self.kv_heads));
        }
        let fused = self.fused_qkv();
        let (h, kv) = (self.heads, self.kv_heads);
        let all = split(x.linear(&fused[0], fused.get(1)), h + 2 * kv);
        let qk = rope::apply(&all.narrow(1, 0, h + kv), rope.0, rope.1);
        (qk.narrow(1, 0, h), qk.narrow(1, h, kv), all.narrow(1, h + kv, kv))
    }

    /// Whether a generating forward of `rows` takes the fused projection (no adapter on it).
    fn fuses(&self, rows: Option<&AdapterRows>) -> bool {
        [&self.q_proj, &self.k_proj, &self.v_proj].iter().all(|l| l.plain(rows))
    }

    /// The fused projection's weight and bias, built when a source changed.
    fn fused_qkv(&self) -> Vec<Tensor> {
        let (q, k, v) = (&self.q_proj, &self.k_proj, &self.v_proj);
        let biases: Vec<&Tensor> = [q, k, v].iter().filter_map(|l| l.bias.as_ref()).collect();
        let sources: Vec<&Tensor> =
            [&q.weight, &k.weight, &v.weight].into_iter().chain(biases.iter().copied()).collect();
        self.qkv.get(&sources, || {
            let mut out = vec![Tensor::cat(&[&q.weight, &k.weight, &v.weight], 0)];
            out.extend((biases.len() == 3).then(|| Tensor::cat(&biases, 0)));
            out
        })
    }

    fn forward<'c>(
        &self,
        x: &Tensor,
        rope: (&Tensor, &Tensor),
        mask: Option<&Tensor>,
        cache: Option<(&mut (dyn LayerCache + 'c), usize)>,
        rows: Option<&AdapterRows>,
    ) -> Tensor {
        let (b, t) = (x.size()[0], x.size()[1]);
        let (q, k, v) = self.project(x, rope, rows, cache.is_some());
        let mut fold = false;
        let mut attended = None;
        let (k, v) = match cache {
            Some((cache, layer)) => {
                fold = cache.fold_heads();
                let kept = cache.append(layer, &k, &v);
                attended = cache.attend(layer, &q);
                kept
            }
            None => (k, v),
        };
        let repeat = self.heads / self.kv_heads;
        let sdpa = |q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>| {
            Tensor::scaled_dot_product_attention(q, k, v, mask, 0.0, mask.is_none(), None::<f64>, false)
        };
        let out = if let Some(out) = attended {
            out
        } else if fold && repeat > 1 && mask.is_some() {
            // Query head h reads key/value head h / repeat: the `repeat` query heads of one
            // key/value head become `repeat × t` queries of it, so decoding reads the cache
            // as stored instead of copying it `repeat` times per layer and step.
            let mask = mask.map(|m| if t == 1 { m.shallow_clone() } else { m.repeat([1, 1, repeat, 1]) });
            let q = q.reshape([b, self.kv_heads, repeat * t, self.head_dim]);
            sdpa(&q, &k, &v, mask.as_ref()).reshape([b, self.heads, t, self.head_dim])
        } else {
            // Grouped-query attention: each key/value head serves `repeat` query heads.
            // Repeating them explicitly keeps every SDPA backend available.
            let expand = |y: Tensor| {
                if repeat == 1 {
                    return y;
                }
                let s = y.size()[2];
                y.unsqueeze(2).expand([b, self.kv_heads, repeat, s, self.head_dim], false).reshape([
                    b,
                    self.heads,
                    s,
                    self.head_dim,
                ])
            };
            sdpa(&q, &expand(k), &expand(v), mask)
        };
        self.o_proj.forward_rows(&out.transpose(1, 2).reshape([b, t, self.heads * self.head_dim]), rows)
    }
}

/// SwiGLU: `down(silu(gate(x)) · up(x))`; the vision tower's has biases, the LM's not.
pub(crate) struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

impl Mlp {
    fn new(p: Path, c: &Qwen2Config) -> Self {
        Self::sized(p, c.hidden_size, c.intermediate_size, false)
    }

    pub fn sized(p: Path, h: usize, i: usize, bias: bool) -> Self {
        Mlp {
            gate_proj: Linear::new(&p / "gate_proj", h, i, bias),
            up_proj: Linear::new(&p / "up_proj", h, i, bias),
            down_proj: Linear::new(&p / "down_proj", i, h, bias),
        }
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.forward_rows(x, None)
    }

    fn forward_rows(&self, x: &Tensor, rows: Option<&AdapterRows>) -> Tensor {
        let h = self.gate_proj.forward_rows(x, rows).silu() * self.up_proj.forward_rows(x, rows);
        self.down_proj.forward_rows(&h, rows)
    }

    /// Its layers, named below `prefix` (`….mlp`).
    pub fn sites<'m>(&'m mut self, prefix: &str, vl: bool) -> [Site<'m>; 3] {
        [
            Site::new(format!("{prefix}.gate_proj"), vl, &mut self.gate_proj),
            Site::new(format!("{prefix}.up_proj"), vl, &mut self.up_proj),
            Site::new(format!("{prefix}.down_proj"), vl, &mut self.down_proj),
        ]
    }
}

struct DecoderLayer {
    self_attn: Attention,
    mlp: Mlp,
    input_layernorm: RmsNorm,
    post_attention_layernorm: RmsNorm,
}

impl DecoderLayer {
    fn new(p: Path, c: &Qwen2Config) -> Self {
        DecoderLayer {
            self_attn: Attention::new(&p / "self_attn", c),
            mlp: Mlp::new(&p / "mlp", c),
            input_layernorm: RmsNorm::new(&p / "input_layernorm", c.hidden_size, c.rms_norm_eps),
            post_attention_layernorm: RmsNorm::new(&p / "post_attention_layernorm", c.hidden_size, c.rms_norm_eps),
        }
    }
}

/// The decoder stack without a head (`model.*` in HF checkpoints).
pub struct Qwen2Model {
    embed_tokens: Tensor,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    rope: Rope,
    config: Qwen2Config,
}

impl Qwen2Model {
    pub(crate) fn new(p: Path, c: &Qwen2Config) -> Self {
        let embed_tokens =
            param(&(&p / "embed_tokens"), "weight", &[c.vocab_size as i64, c.hidden_size as i64], Init::Const(0.));
        let layers = (0..c.num_hidden_layers).map(|i| DecoderLayer::new(&p / "layers" / i, c)).collect();
        let norm = RmsNorm::new(&p / "norm", c.hidden_size, c.rms_norm_eps);
        Qwen2Model {
            embed_tokens,
            layers,
            norm,
            rope: Rope::new(c.head_dim, c.rope_theta, c.mrope_section.as_deref(), p.device()),
            config: c.clone(),
        }
    }

    pub fn config(&self) -> &Qwen2Config {
        &self.config
    }

    pub(crate) fn embed_weight(&self) -> &Tensor {
        &self.embed_tokens
    }

    /// How many served adapters its layers hold (`serve --lora`).
    pub fn served_adapters(&self) -> usize {
        self.layers.first().map_or(0, |l| l.self_attn.q_proj.bank.len())
    }

    /// Every linear layer, named as in checkpoints (`model.layers.N.self_attn.q_proj`).
    pub(crate) fn sites(&mut self, vl: bool) -> Vec<Site<'_>> {
        let mut out = Vec::new();
        for (i, layer) in self.layers.iter_mut().enumerate() {
            let a = &mut layer.self_attn;
            let p = format!("model.layers.{i}");
            for (name, l) in [
                ("q_proj", &mut a.q_proj),
                ("k_proj", &mut a.k_proj),
                ("v_proj", &mut a.v_proj),
                ("o_proj", &mut a.o_proj),
            ] {
                out.push(Site::new(format!("{p}.self_attn.{name}"), vl, l));
            }
            out.extend(layer.mlp.sites(&format!("{p}.mlp"), vl));
        }
        out
    }

    pub fn device(&self) -> tch::Device {
        self.embed_tokens.device()
    }

    /// The parameters' dtype (activations and the KV cache use it too).
    pub fn kind(&self) -> Kind {
        self.embed_tokens.kind()
    }

    /// Token embeddings `[batch, seq, hidden]` of `input_ids` `[batch, seq]`.
    pub fn embed(&self, input_ids: &Tensor) -> Tensor {
        Tensor::embedding(&self.embed_tokens, input_ids, -1, false, false)
    }

    /// Last hidden states `[batch, seq, hidden]` for `input_ids` `[batch, seq]` at explicit
    /// `positions` `[batch, seq]` (or `[3, batch, seq]` for M-RoPE). `mask` is a boolean
    /// `[batch, 1, seq, past + seq]` (true = may attend), see [`attention_mask`]. With a
    /// cache, the new keys and values are written after the cached ones and the cache grows
    /// by `seq`. Without a mask, attention is causal over everything (right-padded training
    /// batches: padding only follows real tokens).
    pub fn forward(
        &self,
        input_ids: &Tensor,
        positions: &Tensor,
        mask: Option<&Tensor>,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor> {
        self.forward_embeds(self.embed(input_ids), positions, mask, cache)
    }

    /// [`Self::forward`] from input embeddings (e.g. with image features in place of the
    /// image-pad tokens' embeddings).
    pub fn forward_embeds(
        &self,
        embeds: Tensor,
        positions: &Tensor,
        mask: Option<&Tensor>,
        mut cache: Option<&mut KvCache>,
    ) -> Result<Tensor> {
        let (b, t) = (embeds.size()[0], embeds.size()[1] as usize);
        let device = embeds.device();
        let past = cache.as_deref().map_or(0, KvCache::len);
        if let Some(c) = cache.as_deref() {
            c.check_room(t)?;
        }
        let all_keys;
        let mask = match mask {
            None if past > 0 => {
                all_keys = attention_mask(&Tensor::ones([b, (past + t) as i64], (Kind::Bool, device)), past, t);
                Some(&all_keys)
            }
            m => m,
        };
        let x =
            self.layers_forward(embeds, positions, mask, cache.as_deref_mut().map(|c| c as &mut dyn LayerCache), None);
        if let Some(c) = cache {
            c.advance(t);
        }
        Ok(x)
    }

    /// The decoder over `embeds` with a cache of any layout: the caller's `mask`
    /// (`[batch, 1, seq, keys]`) says which of the keys the cache hands back each query sees.
    /// `rows` picks each row's served adapter.
    pub(crate) fn forward_cached(
        &self,
        embeds: Tensor,
        positions: &Tensor,
        mask: &Tensor,
        cache: &mut dyn LayerCache,
        rows: Option<&AdapterRows>,
    ) -> Tensor {
        self.layers_forward(embeds, positions, Some(mask), Some(cache), rows)
    }

    /// Builds, or checks against their sources, the copies a generating forward without
    /// served adapters reads (the fused QKV projections): a CUDA graph replays their
    /// addresses without running that check itself.
    pub(crate) fn prepare_generation(&self) {
        for layer in &self.layers {
            if layer.self_attn.fuses(None) {
                layer.self_attn.fused_qkv();
            }
        }
    }

    /// Every layer and the final norm.
    fn layers_forward<'c>(
        &self,
        embeds: Tensor,
        positions: &Tensor,
        mask: Option<&Tensor>,
        mut cache: Option<&mut (dyn LayerCache + 'c)>,
        rows: Option<&AdapterRows>,
    ) -> Tensor {
        let mut x = embeds;
        let (cos, sin) = self.rope.tables(positions, x.kind());
        for (i, layer) in self.layers.iter().enumerate() {
            let h = layer.input_layernorm.forward(&x);
            let c = cache.as_deref_mut().map(|c| (c, i));
            // Not `+=`: an in-place add would overwrite a tensor autograd saved for backward.
            #[allow(clippy::assign_op_pattern)]
            {
                x = x + layer.self_attn.forward(&h, (&cos, &sin), mask, c, rows);
            }
            x = &x + layer.mlp.forward_rows(&layer.post_attention_layernorm.forward(&x), rows);
        }
        self.norm.forward(&x)
    }
}

/// Boolean attention mask `[batch, 1, new, past + new]` for `new` query positions after
/// `past` cached ones: a query attends to earlier-or-equal keys whose `key_mask`
/// (`[batch, past + new]`, true = real token) is set. A padding query always sees itself,
/// so no row is empty: an empty row would give NaN that later layers read through 0 × NaN.
pub fn attention_mask(key_mask: &Tensor, past: usize, new: usize) -> Tensor {
    let device = key_mask.device();
    let total = (past + new) as i64;
    let q = Tensor::arange_start(past as i64, total, (Kind::Int64, device)).view([-1, 1]);
    let k = Tensor::arange(total, (Kind::Int64, device)).view([1, -1]);
    let causal = k.le_tensor(&q);
    let diagonal = k.eq_tensor(&q);
    let keys = key_mask.to_kind(Kind::Bool).unsqueeze(1).unsqueeze(1);
    (causal.unsqueeze(0).unsqueeze(0).logical_and(&keys)).logical_or(&diagonal.unsqueeze(0).unsqueeze(0))
}

/// Ids `[batch, longest]`, padded with 0 on the right: a training batch, which
/// [`Qwen2Model::forward`] takes without a mask.
pub(crate) fn right_pad(rows: &[&[u32]], device: tch::Device) -> Tensor {
    let longest = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let mut ids = Vec::with_capacity(rows.len() * longest);
    for s in rows {
        ids.extend(s.iter().map(|&t| t as i64).chain(std::iter::repeat_n(0, longest - s.len())));
    }
    Tensor::from_slice(&ids).view([rows.len() as i64, longest as i64]).to_device(device)
}

/// `Qwen2ForCausalLM`: the decoder and the LM head (tied to the embeddings or not).
pub struct Qwen2ForCausalLM {
    pub model: Qwen2Model,
    lm_head: Option<Tensor>,
    /// See [`Self::logits`].
    pub lm_head_f32: bool,
    /// The head in f32, for forwards without gradients.
    head_f32: Derived,
}

impl Qwen2ForCausalLM {
    pub(crate) fn new(p: &Path, c: &Qwen2Config) -> Self {
        let model = Qwen2Model::new(p / "model", c);
        let lm_head = (!c.tie_word_embeddings)
            .then(|| param(&(p / "lm_head"), "weight", &[c.vocab_size as i64, c.hidden_size as i64], Init::Const(0.)));
        Qwen2ForCausalLM { model, lm_head, lm_head_f32: false, head_f32: Derived::default() }
    }

    pub fn config(&self) -> &Qwen2Config {
        self.model.config()
    }

    /// Logits `[batch, seq, vocab]` in f32 for hidden states from [`Qwen2Model::forward`]:
    /// in the parameters' dtype and then cast (as transformers), or with `lm_head_f32`
    /// computed in f32 from f32 copies of the hidden states and the head (generation keeps
    /// the copy of the head while the weights are unchanged; training casts it each forward,
    /// so its gradient reaches the weights).
    pub fn logits(&self, hidden: &Tensor) -> Tensor {
        let head = self.lm_head.as_ref().unwrap_or(self.model.embed_weight());
        if !self.lm_head_f32 || head.kind() == Kind::Float {
            return hidden.linear::<Tensor>(head, None).to_kind(Kind::Float);
        }
        let head_f32 = match grad_enabled() {
            true => {
                self.head_f32.clear();
                head.to_kind(Kind::Float)
            }
            false => self.head_f32_copy(head),
        };
        hidden.to_kind(Kind::Float).linear::<Tensor>(&head_f32, None)
    }

    fn head_f32_copy(&self, head: &Tensor) -> Tensor {
        self.head_f32.get(&[head], || vec![head.to_kind(Kind::Float)]).remove(0)
    }

    /// [`Qwen2Model::prepare_generation`], and the head's f32 copy where logits use it.
    pub(crate) fn prepare_generation(&self) {
        self.model.prepare_generation();
        let head = self.lm_head.as_ref().unwrap_or(self.model.embed_weight());
        if self.lm_head_f32 && head.kind() != Kind::Float {
            let _ = self.head_f32_copy(head);
        }
    }

    /// Forward and head in one call.
    pub fn forward(
        &self,
        input_ids: &Tensor,
        positions: &Tensor,
        mask: Option<&Tensor>,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor> {
        Ok(self.logits(&self.model.forward(input_ids, positions, mask, cache)?))
    }
}
