//! The critic: the same decoder with a scalar head per token, laid out as transformers'
//! `Qwen2ForTokenClassification` with one label (`model.*` + `score.*`), as verl's critic.
//! A VL actor's critic keeps its vision tower (`visual.*`): the values are read over the
//! same image tokens the policy sees.

use crate::checkpoint::write_json;
use crate::image_processor::{ImageProcessor, PixelValues};
use crate::qwen2::Linear;
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
}

impl ValueModel {
    /// A critic from a model spec (`default`, `default-vl`, a folder; see
    /// [`crate::ModelSource`]): the decoder's weights are copied, the head starts at zero
    /// (every value 0) unless the folder is a saved critic that has `score.weight`.
    pub fn from_spec(spec: &str, options: LoadOptions) -> Result<Self> {
        spec.parse::<crate::ModelSource>()?.load_critic(crate::DEFAULT_SEED, options)
    }

    /// A critic from a model folder (a saved critic, or a policy checkpoint's decoder).
    pub fn load(dir: &Path, options: LoadOptions) -> Result<Self> {
        let folder = crate::folder::ModelFolder::open(dir)?;
        let (config, vl) = crate::checkpoint::read_configs(&folder)?;
        let tensors = weights::read_dir(&folder)?;
        weights::check_shapes(&config, vl.as_ref().map(|(v, _)| &v.vision), &tensors, dir)?;
        Self::assemble(config, vl, tensors, dir, options)
    }

    /// verl's critic: a copy of `actor`'s decoder, name for name (its own tensors, on the
    /// actor's device and in its dtype), with the head at zero.
    pub fn from_policy(actor: &Model) -> Result<Self> {
        let options = LoadOptions { device: actor.device(), dtype: actor.dtype };
        let vl = actor.vision.as_ref().map(|v| (v.config.clone(), v.processor.clone()));
        Self::assemble(actor.config().clone(), vl, actor.vs.variables(), Path::new("<actor>"), options)
    }

    /// A decoder of `config`'s shape drawn from `seed` as the embedded model's is, with the
    /// head at zero: a critic that shares no weights with any policy.
    pub fn random(config: Qwen2Config, seed: u64, options: LoadOptions) -> Result<Self> {
        let tensors = crate::default_model::initial_weights(&config, seed);
        Self::assemble(config, None, tensors, Path::new("<random>"), options)
    }

    fn assemble(
        config: Qwen2Config,
        vl: Option<(Qwen2VlConfig, ImageProcessor)>,
        mut tensors: HashMap<String, Tensor>,
        source: &Path,
        options: LoadOptions,
    ) -> Result<Self> {
        let mut vs = VarStore::new(options.device);
        let root = vs.root();
        let model = Qwen2Model::new(&root / "model", &config);
        let score = Linear::new(&root / "score", config.hidden_size, 1, true);
        let vision = vl.map(|(config, processor)| Vision {
            tower: VisionTower::new(&root / "visual", &config.vision),
            config,
            processor,
        });
        vs.set_kind(options.dtype.kind());
        if !tensors.contains_key("score.weight") {
            tensors.insert("score.weight".into(), Tensor::zeros([1, config.hidden_size as i64], tch::kind::FLOAT_CPU));
            tensors.insert("score.bias".into(), Tensor::zeros([1], tch::kind::FLOAT_CPU));
        }
        if tensors.get("score.weight").map(Tensor::size) != Some(vec![1, config.hidden_size as i64]) {
            return Err(Error::Weights { path: source.into(), message: "score.weight is not a one-label head".into() });
        }
        weights::fill(&vs, &tensors, source)?;
        Ok(ValueModel { model, score, vs, dtype: options.dtype, vision })
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
    pub fn save(&self, dir: &Path) -> Result<()> {
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
