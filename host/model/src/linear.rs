//! The linear layer the decoder and the vision tower are built from, with the LoRA
//! adapters it may carry: its own, trained ([`crate::LoraConfig`]), and the served ones a
//! batch picks per row ([`AdapterRows`]). `lora` attaches, saves and loads them; this is
//! what a forward pass computes with them.

use tch::nn::{Init, Path};
use tch::{Device, Tensor};

/// A variable of `p`'s store: the one already there under `name` (a base shared with
/// another model, see [`crate::Model::sharing_base`]), else a new one.
pub(crate) fn param(p: &Path, name: &str, dims: &[i64], init: Init) -> Tensor {
    p.get(name).unwrap_or_else(|| p.var(name, dims, init))
}

/// `x Wᵀ + b`, plus whatever adapters it carries.
pub(crate) struct Linear {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
    /// A LoRA adapter on this layer (see [`crate::LoraConfig`]).
    pub lora: Option<Lora>,
    /// Served adapters (`serve --lora`), by index − 1; `None` where one leaves this layer be.
    pub bank: Vec<Option<Lora>>,
}

impl Linear {
    pub fn new(p: Path, inputs: usize, outputs: usize, bias: bool) -> Self {
        let weight = param(&p, "weight", &[outputs as i64, inputs as i64], Init::Const(0.));
        let bias = bias.then(|| param(&p, "bias", &[outputs as i64], Init::Const(0.)));
        Linear { weight, bias, lora: None, bank: Vec::new() }
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.forward_rows(x, None)
    }

    /// Whether a forward with `rows` is `x Wᵀ + b` alone (no adapter applies).
    pub fn plain(&self, rows: Option<&AdapterRows>) -> bool {
        self.lora.is_none() && (rows.is_none() || self.bank.is_empty())
    }

    /// With `rows`, each row also through its served adapter.
    pub fn forward_rows(&self, x: &Tensor, rows: Option<&AdapterRows>) -> Tensor {
        let y = x.linear(&self.weight, self.bias.as_ref());
        let y = match &self.lora {
            Some(lora) => y + lora.delta(x),
            None => y,
        };
        match rows {
            Some(rows) if !self.bank.is_empty() => rows.apply(&self.bank, x, y),
            _ => y,
        }
    }
}

/// One adapted layer's low-rank pair.
pub(crate) struct Lora {
    pub a: Tensor,
    pub b: Tensor,
    pub scale: f64,
    /// Dropout on the adapter's input, in training forwards only.
    pub dropout: f64,
}

impl Lora {
    /// `s · B A dropout(x)` in `x`'s dtype.
    pub fn delta(&self, x: &Tensor) -> Tensor {
        let mut h = x.to_kind(self.a.kind());
        // Dropout only where gradients are recorded (training forwards): an op on a
        // trainable tensor records a gradient exactly then.
        if self.dropout > 0.0 && self.a.get(0).requires_grad() {
            h = h.dropout(self.dropout, true);
        }
        (h.linear::<Tensor>(&self.a, None).linear::<Tensor>(&self.b, None) * self.scale).to_kind(x.kind())
    }
}

/// A linear layer of a model with the names it goes by: ours (as the checkpoint's tensors
/// are named) and the module name transformers gives it, which PEFT matches and keys on.
pub(crate) struct Site<'m> {
    pub name: String,
    pub hf_name: String,
    pub layer: &'m mut Linear,
}

impl<'m> Site<'m> {
    pub fn new(name: String, vl: bool, layer: &'m mut Linear) -> Self {
        Site { hf_name: hf_module_name(&name, vl), name, layer }
    }
}

/// transformers 5's module name for one of ours: a VL model's language model sits under
/// `model.language_model.` and its vision tower under `model.visual.`.
pub(crate) fn hf_module_name(name: &str, vl: bool) -> String {
    match (vl, name.strip_prefix("model."), name.strip_prefix("visual.")) {
        (true, Some(rest), _) => format!("model.language_model.{rest}"),
        (true, _, Some(rest)) => format!("model.visual.{rest}"),
        _ => name.to_string(),
    }
}

/// Which rows of a batch use which served adapter (see [`crate::Model::add_served_adapter`]):
/// per adapter index (1-based; 0 is the model as it is), its rows.
pub struct AdapterRows {
    groups: Vec<(usize, Tensor)>,
}

impl AdapterRows {
    /// From each row's adapter index; `None` when every row is the model's own.
    pub fn new(per_row: &[usize], device: Device) -> Option<Self> {
        let mut adapters: Vec<usize> = per_row.iter().copied().filter(|&a| a > 0).collect();
        adapters.sort_unstable();
        adapters.dedup();
        if adapters.is_empty() {
            return None;
        }
        let groups = adapters
            .into_iter()
            .map(|a| {
                let rows: Vec<i64> = (0..per_row.len()).filter(|&i| per_row[i] == a).map(|i| i as i64).collect();
                (a, crate::device::upload(&rows, device))
            })
            .collect();
        Some(AdapterRows { groups })
    }

    /// `y` plus, on each group's rows, its adapter's `delta` of `x` (rows as `x`'s first
    /// dimension): each row gets exactly the sum a model holding only its adapter computes.
    pub(crate) fn apply(&self, bank: &[Option<Lora>], x: &Tensor, y: Tensor) -> Tensor {
        let mut y = y;
        for (a, rows) in &self.groups {
            if let Some(Some(lora)) = bank.get(a - 1) {
                let part = y.index_select(0, rows) + lora.delta(&x.index_select(0, rows));
                y = y.index_copy(0, rows, &part);
            }
        }
        y
    }
}
