//! A model folder in the Hugging Face layout, loaded and saved.

use crate::folder::{FileKind, ModelFolder, write_json};
use crate::image_processor::{ImageProcessor, PixelValues};
use crate::vision::VisionTower;
use crate::vl::{Prompt, Vision};
use crate::vl_config::{self, Qwen2VlConfig};
use crate::{ChatTemplate, DType, Error, Qwen2Config, Qwen2ForCausalLM, Result, Tokenizer, weights};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use tch::nn::VarStore;
use tch::{Device, Tensor};
use vagen_abi::Image;

/// Where the weights go and in which precision.
#[derive(Debug, Clone, Copy)]
pub struct LoadOptions {
    pub device: Device,
    pub dtype: DType,
    /// Logits from an f32 copy of the LM head over f32 hidden states, whatever `dtype`
    /// (see [`Qwen2ForCausalLM::logits`]).
    pub lm_head_f32: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions { device: Device::Cpu, dtype: DType::F32, lm_head_f32: false }
    }
}

/// A causal LM with its tokenizer and chat template: what `--model DIR` loads.
pub struct Model {
    pub lm: Qwen2ForCausalLM,
    /// Owns the parameters (named as in the checkpoint); optimizers take them from here.
    pub vs: VarStore,
    pub tokenizer: Tokenizer,
    pub chat: Option<ChatTemplate>,
    /// Ids that end a generation: the config's, `generation_config.json`'s and the
    /// tokenizer's `eos_token`.
    pub eos_token_ids: Vec<u32>,
    pub dtype: DType,
    /// The vision tower, its config and image processor: `Some` for Qwen2.5-VL.
    pub vision: Option<Vision>,
    tokenizer_config: Value,
    generation_config: Option<Value>,
    /// The adapters once LoRA is attached (the base is then frozen).
    pub(crate) lora: Option<crate::lora::Attached>,
    /// What loaded it (`default@0`, a folder): an adapter's `base_model_name_or_path`.
    pub name_or_path: String,
}

/// Everything of a model folder but the weights.
pub(crate) struct Parts {
    pub config: Qwen2Config,
    pub vl: Option<(Qwen2VlConfig, ImageProcessor)>,
    pub tokenizer: Tokenizer,
    pub tokenizer_config: Value,
    pub generation_config: Option<Value>,
    pub chat: Option<ChatTemplate>,
}

impl Parts {
    fn check_tokenizer(&self) -> Result<()> {
        if self.tokenizer.vocab_size() > self.config.vocab_size {
            return Err(Error::Invalid(format!(
                "the tokenizer has {} ids but the model's vocab_size is {}",
                self.tokenizer.vocab_size(),
                self.config.vocab_size
            )));
        }
        Ok(())
    }
}

impl Model {
    /// Loads `config.json`, `model.safetensors` (or its sharded index), `tokenizer.json`,
    /// `tokenizer_config.json` and the chat template of a HF model folder; for Qwen2.5-VL
    /// also the vision tower and the image processor's settings.
    pub fn load(dir: &Path, options: LoadOptions) -> Result<Self> {
        let folder = ModelFolder::open(dir)?;
        let (config, vl) = read_configs(&folder)?;
        let tokenizer = folder.read("tokenizer.json", FileKind::Tokenizer)?.ok_or_else(|| {
            Error::io(
                dir.join("tokenizer.json"),
                std::io::Error::new(std::io::ErrorKind::NotFound, "no tokenizer.json"),
            )
        })?;
        let tokenizer = Tokenizer::from_bytes(&tokenizer)
            .map_err(|e| Error::Tokenizer(format!("{}: {e}", dir.join("tokenizer.json").display())))?;
        let parts = Parts {
            config,
            vl,
            tokenizer,
            tokenizer_config: folder
                .read_json("tokenizer_config.json", FileKind::TokenizerConfig)?
                .unwrap_or(Value::Null),
            generation_config: folder.read_json("generation_config.json", FileKind::Json)?,
            chat: ChatTemplate::from_folder(&folder)?,
        };
        let tensors = weights::read_dir(&folder)?;
        let mut model = Self::assemble(parts, &tensors, dir, options)?;
        model.name_or_path = std::path::absolute(dir).unwrap_or_else(|_| dir.into()).display().to_string();
        Ok(model)
    }

    pub(crate) fn assemble(
        parts: Parts,
        tensors: &HashMap<String, Tensor>,
        source: &Path,
        options: LoadOptions,
    ) -> Result<Self> {
        let shapes =
            |p: &Parts| weights::check_shapes(&p.config, p.vl.as_ref().map(|(v, _)| &v.vision), tensors, source);
        Self::assemble_with(parts, options, shapes, HashMap::new(), |vs| weights::fill(vs, tensors, source))
    }

    /// [`Self::assemble`] with the parameters written by `fill` (e.g. drawn in place, so a
    /// multi-billion-parameter benchmark model is never held twice). `check` runs on the
    /// parts before anything is allocated. The `shared` tensors become the variables of
    /// their names as they are (not copied): a base shared with another model.
    pub(crate) fn assemble_with(
        parts: Parts,
        options: LoadOptions,
        check: impl FnOnce(&Parts) -> Result<()>,
        shared: HashMap<String, Tensor>,
        fill: impl FnOnce(&VarStore) -> Result<()>,
    ) -> Result<Self> {
        parts.check_tokenizer()?;
        check(&parts)?;
        let Parts { config, vl, tokenizer, tokenizer_config, generation_config, chat } = parts;
        let mut vs = VarStore::new(options.device);
        crate::lora::add_shared(&vs.root(), shared);
        let mut lm = Qwen2ForCausalLM::new(&vs.root(), &config);
        lm.lm_head_f32 = options.lm_head_f32;
        let vision = vl.map(|(config, processor)| Vision {
            tower: VisionTower::new(vs.root() / "visual", &config.vision),
            config,
            processor,
        });
        vs.set_kind(options.dtype.kind());
        fill(&vs)?;
        let eos_token_ids = eos_ids(&config, generation_config.as_ref(), &tokenizer_config, &tokenizer);
        Ok(Model {
            lm,
            vs,
            tokenizer,
            chat,
            eos_token_ids,
            dtype: options.dtype,
            vision,
            tokenizer_config,
            generation_config,
            lora: None,
            name_or_path: String::new(),
        })
    }

    /// Everything but the weights, for another model of the same shape.
    pub(crate) fn parts(&self) -> Parts {
        Parts {
            config: self.config().clone(),
            vl: self.vision.as_ref().map(|v| (v.config.clone(), v.processor.clone())),
            tokenizer: self.tokenizer.clone(),
            tokenizer_config: self.tokenizer_config.clone(),
            generation_config: self.generation_config.clone(),
            chat: self.chat.clone(),
        }
    }

    pub fn config(&self) -> &Qwen2Config {
        self.lm.config()
    }

    pub fn device(&self) -> Device {
        self.vs.device()
    }

    /// The chat template, or an error naming what is missing.
    pub fn chat_template(&self) -> Result<&ChatTemplate> {
        self.chat.as_ref().ok_or_else(|| {
            Error::Template("the model has no chat template (tokenizer_config.json or chat_template.jinja)".into())
        })
    }

    /// Token ids of `messages` rendered by the chat template.
    pub fn encode_chat(&self, messages: &[crate::Message], add_generation_prompt: bool) -> Result<Vec<u32>> {
        self.tokenizer.encode(&self.chat_template()?.render(messages, add_generation_prompt)?)
    }

    /// The vision half, or an error saying this is a text-only model.
    pub fn vision(&self) -> Result<&Vision> {
        self.vision
            .as_ref()
            .ok_or_else(|| Error::Invalid("this is a text-only model (no vision tower): it cannot take images".into()))
    }

    /// `messages` (whose text holds one `<image>` marker per image) and `images` as a prompt
    /// for this model. A text-only model takes no images.
    pub fn encode_chat_images(
        &self,
        messages: &[crate::Message],
        images: &[Image],
        add_generation_prompt: bool,
    ) -> Result<Prompt> {
        let text = self.chat_template()?.render_chat(messages, &[], self.vision.is_some(), add_generation_prompt)?;
        self.encode_rendered(&text, images)
    }

    /// A prompt's text as the chat template rendered it (with an `<image>` entry's tokens
    /// for each of `images`, in order) as this model's prompt. A text-only model takes no
    /// images.
    pub fn encode_rendered(&self, text: &str, images: &[Image]) -> Result<Prompt> {
        let Some(vision) = &self.vision else {
            if !images.is_empty() {
                self.vision()?;
            }
            return Ok(Prompt::text(self.tokenizer.encode(text)?));
        };
        let ids = self.tokenizer.encode(text)?;
        let pixels: Vec<PixelValues> = images
            .iter()
            .enumerate()
            .map(|(i, img)| vision.processor.process(img).map_err(|e| Error::Invalid(format!("image {i}: {e}"))))
            .collect::<Result<_>>()?;
        vision.expand(&ids, pixels)
    }

    /// The same model in another precision (its parameters converted in place).
    pub fn to_dtype(mut self, dtype: DType) -> Result<Self> {
        if self.lora.is_some() {
            return Err(Error::Invalid("a model with LoRA adapters keeps them in f32: merge them first".into()));
        }
        self.vs.set_kind(dtype.kind());
        self.dtype = dtype;
        Ok(self)
    }

    /// Whether training updates the vision tower (it does by default, as in VAGEN). With
    /// LoRA the base stays frozen: only adapters train.
    pub fn set_vision_trainable(&mut self, trainable: bool) {
        for (name, t) in self.vs.variables() {
            if name.starts_with("visual.") && (self.lora.is_none() || crate::lora::is_adapter_tensor(&name)) {
                let _ = t.set_requires_grad(trainable);
            }
        }
    }

    /// Writes the folder transformers' `from_pretrained` reads: `config.json`,
    /// `model.safetensors` (in the model's dtype), `generation_config.json`, `tokenizer.json`,
    /// `tokenizer_config.json` with the chat template.
    ///
    /// With LoRA attached, the adapter alone in PEFT's layout (see [`Self::save_adapter`]).
    pub fn save(&self, dir: &Path) -> Result<()> {
        if self.lora.is_some() {
            return self.save_adapter(dir);
        }
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let config = match &self.vision {
            Some(v) => v.config.to_json(self.dtype.hf_name()),
            None => self.config().to_json(self.dtype.hf_name()),
        };
        write_json(&dir.join("config.json"), &config)?;
        if let Some(v) = &self.vision {
            write_json(&dir.join("preprocessor_config.json"), &v.processor.to_json())?;
            // transformers 5 reads processor_config.json first: a stale one would win.
            let stale = dir.join("processor_config.json");
            if stale.exists() {
                std::fs::remove_file(&stale).map_err(|e| Error::io(&stale, e))?;
            }
        }
        weights::write(&self.vs, &dir.join("model.safetensors"))?;
        // A shard index left from an earlier save would point transformers at stale shards.
        let index = dir.join("model.safetensors.index.json");
        if index.exists() {
            std::fs::remove_file(&index).map_err(|e| Error::io(&index, e))?;
        }
        let tokenizer_path = dir.join("tokenizer.json");
        std::fs::write(&tokenizer_path, self.tokenizer.to_json()?).map_err(|e| Error::io(&tokenizer_path, e))?;
        let mut tokenizer_config = match &self.tokenizer_config {
            Value::Object(m) => Value::Object(m.clone()),
            _ => serde_json::json!({}),
        };
        if let (Some(chat), Value::Object(m)) = (&self.chat, &mut tokenizer_config) {
            m.insert("chat_template".into(), chat.source().into());
        }
        write_json(&dir.join("tokenizer_config.json"), &tokenizer_config)?;
        // Also beside it as chat_template.jinja: transformers 5's processors (the VL one)
        // read only that file, and a stale one from an earlier save would win over the
        // tokenizer config's.
        let jinja = dir.join("chat_template.jinja");
        match &self.chat {
            Some(chat) => std::fs::write(&jinja, chat.source()).map_err(|e| Error::io(&jinja, e))?,
            None if jinja.exists() => std::fs::remove_file(&jinja).map_err(|e| Error::io(&jinja, e))?,
            None => {}
        }
        let generation = self.generation_config.clone().unwrap_or_else(|| {
            serde_json::json!({ "eos_token_id": self.eos_token_ids, "bos_token_id": self.config().raw.get("bos_token_id") })
        });
        write_json(&dir.join("generation_config.json"), &generation)
    }
}

/// A folder's `config.json` as the text model's config and, for Qwen2.5-VL, the VL config
/// with the folder's image processor (its defaults when the folder has none).
pub(crate) fn read_configs(folder: &ModelFolder) -> Result<(Qwen2Config, Option<(Qwen2VlConfig, ImageProcessor)>)> {
    let path = folder.path().join("config.json");
    let text = folder
        .read_text("config.json", FileKind::Json)?
        .ok_or_else(|| Error::io(&path, std::io::Error::new(std::io::ErrorKind::NotFound, "no config.json")))?;
    let bad = |message| Error::Config { path: path.clone(), message };
    let raw: Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    if !vl_config::is_vl(&raw) {
        return Ok((Qwen2Config::from_json(&text).map_err(bad)?, None));
    }
    let vl = Qwen2VlConfig::from_json(&text).map_err(bad)?;
    let processor = ImageProcessor::from_folder(folder)?.unwrap_or_default();
    Ok((vl.text.clone(), Some((vl, processor))))
}

fn eos_ids(config: &Qwen2Config, generation: Option<&Value>, tokenizer_config: &Value, tok: &Tokenizer) -> Vec<u32> {
    let mut ids: Vec<u32> = config.eos_token_ids.iter().map(|&i| i as u32).collect();
    match generation.and_then(|g| g.get("eos_token_id")) {
        Some(Value::Number(n)) => ids.extend(n.as_u64().map(|i| i as u32)),
        Some(Value::Array(a)) => ids.extend(a.iter().filter_map(Value::as_u64).map(|i| i as u32)),
        _ => {}
    }
    let eos_token = match tokenizer_config.get("eos_token") {
        Some(Value::String(s)) => Some(s.as_str()),
        Some(Value::Object(o)) => o.get("content").and_then(Value::as_str),
        _ => None,
    };
    ids.extend(eos_token.and_then(|t| tok.token_to_id(t)));
    ids.sort_unstable();
    ids.dedup();
    ids
}
