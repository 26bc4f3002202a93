//! The critic: the same decoder with a scalar head per token, laid out as transformers'
//! `Qwen2ForTokenClassification` with one label (`model.*` + `score.*`), as verl's critic.
//! A VL actor's critic keeps its vision tower (`visual.*`): the values are read over the
//! same image tokens the policy sees.

use crate::folder::write_json;
use crate::image_processor::{ImageProcessor, PixelValues};
use crate::linear::Linear;
use crate::lora::{self, Attached, LoraConfig, is_adapter_tensor};
use crate::vision::VisionTower;
use crate::vl::{Vision, hidden_states};
use crate::vl_config::Qwen2VlConfig;
use crate::{DType, Error, LoadOptions, Model, Qwen2Config, Qwen2Model, Result, weights};
use std::collections::HashMap;
use std::path::Path;
use tch::nn::VarStore;
use tch::{Kind, Tensor};

pub struct ValueModel {
    pub model: Qwen2Model,
    score: Linear,
    /// Owns the parameters, named as in the checkpoint.
    pub vs: VarStore,
    pub dtype: DType,
    /// The vision half, for a VL actor's critic.
    pub vision: Option<Vision>,
    /// With LoRA: the critic is its own adapter and head over the actor's frozen base.
    lora: Option<Attached>,
}

/// What a saved LoRA critic keeps whole beside its adapter.
const HEAD: &str = "score";

impl ValueModel {
    /// A critic from a model folder (a saved critic, or a policy checkpoint's decoder).
    pub fn load(dir: &Path, options: LoadOptions) -> Result<Self> {
        let folder = crate::folder::ModelFolder::open(dir)?;
        let (config, vl) = crate::checkpoint::read_configs(&folder)?;
        let tensors = weights::read_dir(&folder)?;
        weights::check_shapes(&config, vl.as_ref().map(|(v, _)| &v.vision), &tensors, dir)?;
        Self::assemble(config, vl, tensors, dir, options)
    }

    /// verl's critic: a copy of `actor`'s decoder, name for name (its own tensors, on the
    /// actor's device and in its dtype), with the head at zero. A LoRA actor's critic
    /// shares its frozen base and starts from a copy of its adapter.
    pub fn from_policy(actor: &Model) -> Result<Self> {
        if let Some(config) = actor.lora() {
            let critic = Self::sharing_base(actor, config)?;
            let vars = critic.vs.variables();
            let _guard = tch::no_grad_guard();
            for (name, t) in actor.vs.variables().into_iter().filter(|(n, _)| is_adapter_tensor(n)) {
                let mut mine = vars[&name].shallow_clone();
                mine.f_copy_(&t)?;
            }
            return Ok(critic);
        }
        let options = LoadOptions { device: actor.device(), dtype: actor.dtype, ..LoadOptions::default() };
        let vl = actor.vision.as_ref().map(|v| (v.config.clone(), v.processor.clone()));
        Self::assemble(actor.config().clone(), vl, actor.vs.variables(), Path::new("<actor>"), options)
    }

    /// A decoder of `config`'s shape drawn from `seed` as the embedded model's is, with the
    /// head at zero: a critic that shares no weights with any policy.
    pub fn random(config: Qwen2Config, seed: u64, options: LoadOptions) -> Result<Self> {
        let tensors = crate::default_model::initial_weights(&config, seed);
        Self::assemble(config, None, tensors, Path::new("<random>"), options)
    }

    /// A LoRA critic saved by [`Self::save`] over `actor`'s base.
    pub fn load_sharing(actor: &Model, dir: &Path) -> Result<Self> {
        let (mut config, _, tensors) = lora::read_folder(dir)?;
        if config.modules_to_save.last().map(String::as_str) != Some(HEAD) {
            return Err(Error::Config {
                path: dir.join(lora::ADAPTER_CONFIG),
                message: format!(
                    "modules_to_save = {:?}: a critic adapter saves \"{HEAD}\" last",
                    config.modules_to_save
                ),
            });
        }
        config.modules_to_save.pop();
        let critic = Self::sharing_base(actor, &config)?;
        lora::fill(&critic.vs.variables(), tensors, critic.saved_modules(), &dir.join(lora::ADAPTER_WEIGHTS))?;
        Ok(critic)
    }

    /// Over `actor`'s frozen base (its tensors, not copies): a new adapter as `config`
    /// says and a zero head.
    fn sharing_base(actor: &Model, config: &LoraConfig) -> Result<Self> {
        let options = LoadOptions { device: actor.device(), dtype: actor.dtype, ..LoadOptions::default() };
        let shared: HashMap<String, Tensor> =
            actor.base_to_share().into_iter().filter(|(n, _)| !n.starts_with("lm_head.")).collect();
        let vl = actor.vision.as_ref().map(|v| (v.config.clone(), v.processor.clone()));
        let mut critic = Self::build(actor.config().clone(), vl, options, shared);
        let shape = (critic.vision.is_some(), actor.config().tie_word_embeddings);
        let sites = lora::sites(&mut critic.model, critic.vision.as_mut());
        let (_, attached) = lora::attach_trainable(&critic.vs, sites, config, 0, shape, &[HEAD])?;
        critic.lora = Some(attached);
        Ok(critic)
    }

    /// The whole modules a LoRA critic trains and saves: the actor's `modules_to_save` (of
    /// the decoder) and its head.
    fn saved_modules(&self) -> &[String] {
        self.lora.as_ref().map_or(&[], |a| &a.whole)
    }

    /// The modules on a new store holding `shared` as they are; the rest zero.
    fn build(
        config: Qwen2Config,
        vl: Option<(Qwen2VlConfig, ImageProcessor)>,
        options: LoadOptions,
        shared: HashMap<String, Tensor>,
    ) -> Self {
        let mut vs = VarStore::new(options.device);
        let root = vs.root();
        lora::add_shared(&root, shared);
        let model = Qwen2Model::new(&root / "model", &config);
        let score = Linear::new(&root / "score", config.hidden_size, 1, true);
        let vision = vl.map(|(config, processor)| Vision {
            tower: VisionTower::new(&root / "visual", &config.vision),
            config,
            processor,
        });
        vs.set_kind(options.dtype.kind());
        ValueModel { model, score, vs, dtype: options.dtype, vision, lora: None }
    }

    fn assemble(
        config: Qwen2Config,
        vl: Option<(Qwen2VlConfig, ImageProcessor)>,
        mut tensors: HashMap<String, Tensor>,
        source: &Path,
        options: LoadOptions,
    ) -> Result<Self> {
        let hidden = config.hidden_size as i64;
        let critic = Self::build(config, vl, options, HashMap::new());
        if !tensors.contains_key("score.weight") {
            tensors.insert("score.weight".into(), Tensor::zeros([1, hidden], tch::kind::FLOAT_CPU));
            tensors.insert("score.bias".into(), Tensor::zeros([1], tch::kind::FLOAT_CPU));
        }
        if tensors.get("score.weight").map(Tensor::size) != Some(vec![1, hidden]) {
            return Err(Error::Weights { path: source.into(), message: "score.weight is not a one-label head".into() });
        }
        weights::fill(&critic.vs, &tensors, source)?;
        Ok(critic)
    }

    /// The variables training updates: all of them, or with LoRA the adapter and the head.
    pub fn trainable(&self) -> HashMap<String, Tensor> {
        self.vs.variables().into_iter().filter(|(_, t)| t.requires_grad()).collect()
    }

    /// Values `[batch, seq]` (f32), one per position, from the last hidden state. Arguments
    /// as [`Qwen2Model::forward`] without a cache.
    pub fn forward(&self, input_ids: &Tensor, positions: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
        let hidden = self.model.forward(input_ids, positions, mask, None)?;
        Ok(self.score.forward(&hidden).squeeze_dim(-1).to_kind(Kind::Float))
    }

    /// [`Self::forward`] over right-padded sequences holding images (every row's, in
    /// order), at the M-RoPE `positions` a VL model takes.
    pub fn forward_images(&self, input_ids: &Tensor, positions: &Tensor, images: &[&PixelValues]) -> Result<Tensor> {
        let hidden = hidden_states(&self.model, self.vision.as_ref(), input_ids, positions, images)?;
        Ok(self.score.forward(&hidden).squeeze_dim(-1).to_kind(Kind::Float))
    }

    /// `config.json` (as `Qwen2ForTokenClassification`, one label) and `model.safetensors`.
    ///
    /// A LoRA critic saves its adapter and head in PEFT's layout (`TOKEN_CLS`, the head as
    /// `modules_to_save`); its base is the actor's.
    pub fn save(&self, dir: &Path) -> Result<()> {
        if let Some(attached) = &self.lora {
            let json = attached.config.to_peft_json("<the actor's base>", "TOKEN_CLS", &[HEAD]);
            let tensors = lora::saved_tensors(self.vs.variables(), self.vision.is_some(), self.saved_modules());
            return lora::write_folder(dir, &json, &tensors);
        }
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        // transformers has no VL token classifier: a VL critic's config is the VL model's,
        // named for what it holds (the decoder, the vision tower, the one-label head).
        let (mut config, architecture) = match &self.vision {
            Some(v) => (v.config.to_json(self.dtype.hf_name()), "Qwen2_5_VLForTokenClassification"),
            None => (self.model.config().to_json(self.dtype.hf_name()), "Qwen2ForTokenClassification"),
        };
        if let Some(v) = &self.vision {
            write_json(&dir.join("preprocessor_config.json"), &v.processor.to_json())?;
        }
        if let serde_json::Value::Object(m) = &mut config {
            m.insert("architectures".into(), serde_json::json!([architecture]));
            m.insert("num_labels".into(), 1.into());
            m.insert("id2label".into(), serde_json::json!({"0": "LABEL_0"}));
            m.insert("label2id".into(), serde_json::json!({"LABEL_0": 0}));
        }
        write_json(&dir.join("config.json"), &config)?;
        weights::write(&self.vs, &dir.join("model.safetensors"))
    }
}
