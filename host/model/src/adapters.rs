//! A [`Model`]'s LoRA adapters: attached, saved and loaded in PEFT's layout, merged into the
//! weights, and a second model over the same frozen base (a KL reference, a critic) that
//! costs adapter memory, not another copy of the weights.

use crate::lora::{self, AdapterMeta, LoraConfig, is_adapter_tensor};
use crate::{Error, LoadOptions, Model, Result};
use std::collections::HashMap;
use std::path::Path;
use tch::Tensor;

impl Model {
    /// Adds a LoRA adapter to every linear layer `config` targets (A drawn from `seed`, B
    /// zero: the outputs are unchanged) and freezes everything else. Returns the number of
    /// adapted layers.
    pub fn attach_lora(&mut self, config: &LoraConfig, seed: u64) -> Result<usize> {
        if self.lora.is_some() {
            return Err(Error::Invalid("this model already has LoRA adapters".into()));
        }
        let shape = (self.vision.is_some(), self.config().tie_word_embeddings);
        let sites = lora::sites(&mut self.lm.model, self.vision.as_mut());
        let (count, attached) = lora::attach_trainable(&self.vs, sites, config, seed, shape, &[])?;
        self.lora = Some(attached);
        Ok(count)
    }

    /// The modules `modules_to_save` trains whole (our names).
    fn saved_modules(&self) -> &[String] {
        self.lora.as_ref().map_or(&[], |a| &a.whole)
    }

    /// The adapters' settings, when LoRA is attached.
    pub fn lora(&self) -> Option<&LoraConfig> {
        self.lora.as_ref().map(|a| &a.config)
    }

    /// The variables training updates (by checkpoint name): all of them for full-parameter
    /// training, less a frozen vision tower; only the adapters with LoRA.
    pub fn trainable(&self) -> HashMap<String, Tensor> {
        self.vs.variables().into_iter().filter(|(_, t)| t.requires_grad()).collect()
    }

    /// `adapter_config.json` and `adapter_model.safetensors`, as PEFT's `save_pretrained`
    /// writes them; `base_model_name_or_path` is what loaded the base.
    pub fn save_adapter(&self, dir: &Path) -> Result<()> {
        let config = self.lora().ok_or_else(|| Error::Invalid("this model has no LoRA adapters".into()))?;
        let json = config.to_peft_json(&self.name_or_path, "CAUSAL_LM", &[]);
        let tensors = lora::saved_tensors(self.vs.variables(), self.vision.is_some(), self.saved_modules());
        lora::write_folder(dir, &json, &tensors)
    }

    /// Attaches the adapter saved in `dir` (ours or PEFT's) to this base model.
    pub fn load_adapter(&mut self, dir: &Path) -> Result<AdapterMeta> {
        let (config, meta, tensors) = lora::read_folder(dir)?;
        self.attach_lora(&config, 0)?;
        lora::fill(&self.vs.variables(), tensors, self.saved_modules(), &dir.join(lora::ADAPTER_WEIGHTS))?;
        Ok(meta)
    }

    /// Loads the adapter saved in `dir` as one more served adapter and returns its index
    /// (from 1): a request picks it per row ([`crate::EngineRequest::adapter`]) and is
    /// batched with the base's and other adapters' requests, each row getting what a model
    /// holding only its adapter computes. Adapters of the language model only (the vision
    /// tower runs once for every row's images).
    pub fn add_served_adapter(&mut self, dir: &Path) -> Result<usize> {
        if self.lora.is_some() {
            return Err(Error::Invalid("a model with an adapter of its own cannot serve others: load the base".into()));
        }
        let (config, _, tensors) = lora::read_folder(dir)?;
        let bad = |message: String| Error::Config { path: dir.join(lora::ADAPTER_CONFIG), message };
        if !config.modules_to_save.is_empty() {
            return Err(bad(format!(
                "modules_to_save = {:?}: whole modules are not servable beside others (serve it alone with --adapter)",
                config.modules_to_save
            )));
        }
        if let Some(v) = self.vision.as_mut()
            && let Some(site) = v.tower.sites().into_iter().find(|s| config.targets(&s.hf_name))
        {
            return Err(bad(format!(
                "it adapts the vision tower ({}): serve it alone (`--model BASE --adapter DIR`)",
                site.hf_name
            )));
        }
        let store = tch::nn::VarStore::new(self.device());
        let sites = self.lm.model.sites(self.vision.is_some());
        lora::attach_served(&store.root(), sites, &config)?;
        lora::fill::<&str>(&store.variables(), tensors, &[], &dir.join(lora::ADAPTER_WEIGHTS))?;
        Ok(self.lm.model.served_adapters())
    }

    /// A model whose weights are this one's tensors themselves (frozen, not copied; those
    /// of `modules_to_save`, which train, copied) and which has no adapter of its own yet.
    pub fn sharing_base(&self) -> Result<Model> {
        let shared = self.base_to_share();
        let options = LoadOptions { device: self.device(), dtype: self.dtype, lm_head_f32: self.lm.lm_head_f32 };
        let mut model = Model::assemble_with(self.parts(), options, |_| Ok(()), shared, |_| Ok(()))?;
        model.name_or_path = self.name_or_path.clone();
        Ok(model)
    }

    /// The base for another model over it: the frozen tensors themselves, copies of the
    /// ones `modules_to_save` trains.
    pub(crate) fn base_to_share(&self) -> HashMap<String, Tensor> {
        let whole = self.saved_modules();
        let mut shared = base_variables(&self.vs.variables());
        for (name, t) in shared.iter_mut() {
            if lora::in_modules(name, whole) {
                *t = t.detach().copy();
            }
            let _ = t.set_requires_grad(false);
        }
        shared
    }

    /// The weights with every adapter merged in (`W + s·B·A`), by checkpoint name: the
    /// adapted layers' weights and those of `modules_to_save` (as trained).
    pub fn merged_weights(&self) -> HashMap<String, Tensor> {
        let Some(attached) = &self.lora else { return HashMap::new() };
        let vars = self.vs.variables();
        let mut out = merged(&vars, attached.config.scale());
        let whole = &attached.whole;
        out.extend(
            vars.iter().filter(|(n, _)| lora::in_modules(n, whole)).map(|(n, t)| (n.clone(), t.detach().copy())),
        );
        out
    }

    /// A model without adapters whose weights are this one's merged: what `merge-lora`
    /// saves, and the engine's merged copy (a full second copy of the weights).
    pub fn merged(&self) -> Result<Model> {
        let vars = self.vs.variables();
        let mut tensors = base_variables(&vars);
        tensors.extend(self.merged_weights());
        let options = LoadOptions { device: self.device(), dtype: self.dtype, lm_head_f32: self.lm.lm_head_f32 };
        let mut model = Model::assemble(self.parts(), &tensors, Path::new("<merged>"), options)?;
        model.name_or_path = self.name_or_path.clone();
        Ok(model)
    }

    /// Writes this model's merged weights into `target` (a [`Self::merged`] copy), after
    /// the adapters changed.
    pub fn refresh_merged(&self, target: &Model) -> Result<()> {
        let _guard = tch::no_grad_guard();
        let vars = target.vs.variables();
        for (name, w) in self.merged_weights() {
            let mut t = vars
                .get(&name)
                .ok_or_else(|| Error::Invalid(format!("the merged copy has no {name}")))?
                .shallow_clone();
            t.f_copy_(&w)?;
        }
        Ok(())
    }
}

/// The variables that are not adapter tensors.
pub(crate) fn base_variables(vars: &HashMap<String, Tensor>) -> HashMap<String, Tensor> {
    vars.iter().filter(|(n, _)| !is_adapter_tensor(n)).map(|(n, t)| (n.clone(), t.shallow_clone())).collect()
}

/// `W + scale · B · A` for every adapted layer of `vars`, in the weight's dtype.
pub(crate) fn merged(vars: &HashMap<String, Tensor>, scale: f64) -> HashMap<String, Tensor> {
    let _guard = tch::no_grad_guard();
    let mut out = HashMap::new();
    for (name, a) in vars {
        let Some(layer) = name.strip_suffix(".lora_A.weight") else { continue };
        let (Some(b), Some(w)) = (vars.get(&format!("{layer}.lora_B.weight")), vars.get(&format!("{layer}.weight")))
        else {
            continue;
        };
        let delta = b.matmul(a) * scale;
        out.insert(format!("{layer}.weight"), (w.to_kind(tch::Kind::Float) + delta).to_kind(w.kind()));
    }
    out
}
