//! The critic: the same decoder with a scalar head per token, laid out as transformers'
//! `Qwen2ForTokenClassification` with one label (`model.*` + `score.*`), as verl's critic.

use crate::qwen2::Linear;
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
}

impl ValueModel {
    /// A critic from a policy checkpoint (`default` or a folder): the decoder's weights are
    /// copied, the head starts at zero (every value 0) unless the folder is a saved critic
    /// that has `score.weight`.
    pub fn from_spec(spec: &str, options: LoadOptions) -> Result<Self> {
        if spec == "default" {
            let config = crate::default_config();
            let tensors = crate::default_model::initial_weights(&config, crate::DEFAULT_SEED);
            return Self::assemble(config, tensors, Path::new("<default>"), options);
        }
        let dir = Path::new(spec);
        let config = Qwen2Config::from_file(&dir.join("config.json"))?;
        Self::assemble(config, weights::read_dir(dir)?, dir, options)
    }

    /// verl's critic: a copy of `actor`'s decoder, name for name (its own tensors, on the
    /// actor's device and in its dtype), with the head at zero.
    pub fn from_policy(actor: &Model) -> Result<Self> {
        let options = LoadOptions { device: actor.device(), dtype: actor.dtype };
        Self::assemble(actor.config().clone(), actor.vs.variables(), Path::new("<actor>"), options)
    }

    /// A decoder of `config`'s shape drawn from `seed` as the embedded model's is, with the
    /// head at zero: a critic that shares no weights with any policy.
    pub fn random(config: Qwen2Config, seed: u64, options: LoadOptions) -> Result<Self> {
        let tensors = crate::default_model::initial_weights(&config, seed);
        Self::assemble(config, tensors, Path::new("<random>"), options)
    }

    fn assemble(
        config: Qwen2Config,
        mut tensors: HashMap<String, Tensor>,
        source: &Path,
        options: LoadOptions,
    ) -> Result<Self> {
        let mut vs = VarStore::new(options.device);
        let root = vs.root();
        let model = Qwen2Model::new(&root / "model", &config);
        let score = Linear::new(&root / "score", config.hidden_size, 1, true);
        vs.set_kind(options.dtype.kind());
        if !tensors.contains_key("score.weight") {
            tensors.insert("score.weight".into(), Tensor::zeros([1, config.hidden_size as i64], tch::kind::FLOAT_CPU));
            tensors.insert("score.bias".into(), Tensor::zeros([1], tch::kind::FLOAT_CPU));
        }
        if tensors.get("score.weight").map(Tensor::size) != Some(vec![1, config.hidden_size as i64]) {
            return Err(Error::Weights { path: source.into(), message: "score.weight is not a one-label head".into() });
        }
        weights::fill(&vs, &tensors, source)?;
        Ok(ValueModel { model, score, vs, dtype: options.dtype })
    }

    /// Values `[batch, seq]` (f32), one per position, from the last hidden state. Arguments
    /// as [`Qwen2Model::forward`] without a cache.
    pub fn forward(&self, input_ids: &Tensor, positions: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
        let hidden = self.model.forward(input_ids, positions, mask, None)?;
        Ok(self.score.forward(&hidden).squeeze_dim(-1).to_kind(Kind::Float))
    }

    /// `config.json` (as `Qwen2ForTokenClassification`, one label) and `model.safetensors`.
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let mut config = self.model.config().to_json(self.dtype.hf_name());
        if let serde_json::Value::Object(m) = &mut config {
            m.insert("architectures".into(), serde_json::json!(["Qwen2ForTokenClassification"]));
            m.insert("num_labels".into(), 1.into());
            m.insert("id2label".into(), serde_json::json!({"0": "LABEL_0"}));
            m.insert("label2id".into(), serde_json::json!({"LABEL_0": 0}));
        }
        let path = dir.join("config.json");
        let text = serde_json::to_string_pretty(&config).expect("a JSON value serialises");
        std::fs::write(&path, text + "\n").map_err(|e| Error::io(&path, e))?;
        weights::write(&self.vs, &dir.join("model.safetensors"))
    }
}
