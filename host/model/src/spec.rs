//! What names a model, parsed once where it enters (a flag, a config key): its source, the
//! device and the precision. Everything inward takes these types, never the strings.

use crate::{DType, Error, LoadOptions, Model, Result, ValueModel};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::str::FromStr;
use tch::Device;

/// Serde's `try_from = "String"` / `into = "String"` for a type, through its `FromStr` and
/// `Display`: configs hold the same text as the command line.
macro_rules! as_string_in_serde {
    ($t:ty) => {
        impl TryFrom<String> for $t {
            type Error = Error;
            fn try_from(s: String) -> Result<Self> {
                s.parse()
            }
        }

        impl From<$t> for String {
            fn from(v: $t) -> String {
                v.to_string()
            }
        }
    };
}

as_string_in_serde!(ModelSource);
as_string_in_serde!(DeviceChoice);

/// Where a model's weights come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum ModelSource {
    /// The embedded model (`default`) or its VL sibling (`default-vl`), drawn from a seed
    /// (`default@7`); without one, from the seed of whoever loads it: a run's
    /// `schedule.seed`, [`crate::DEFAULT_SEED`] elsewhere.
    Embedded { vision: bool, seed: Option<u64> },
    /// A Hugging Face folder.
    Folder(PathBuf),
}

impl ModelSource {
    /// The model, an embedded one drawn from its own seed or else `fallback_seed`.
    /// A folder holding an adapter (`adapter_config.json`, no `config.json`) loads the base
    /// its `base_model_name_or_path` names, with the adapter attached.
    pub fn load(&self, fallback_seed: u64, options: LoadOptions) -> Result<Model> {
        match self {
            ModelSource::Embedded { vision: false, seed } => {
                crate::default_model(seed.unwrap_or(fallback_seed), options)
            }
            ModelSource::Embedded { vision: true, seed } => {
                crate::default_vl_model(seed.unwrap_or(fallback_seed), options)
            }
            ModelSource::Folder(dir) if crate::is_adapter_folder(dir) => {
                self.load_adapter_base(dir, fallback_seed, options)
            }
            ModelSource::Folder(dir) => Model::load(dir, options),
        }
    }

    /// `base` with the adapter of `dir` attached.
    pub fn load_with_adapter(&self, dir: &std::path::Path, fallback_seed: u64, options: LoadOptions) -> Result<Model> {
        if matches!(self, ModelSource::Folder(d) if crate::is_adapter_folder(d)) {
            return Err(Error::Invalid(format!("{self}: an adapter folder cannot be the base of another adapter")));
        }
        let mut model = self.load(fallback_seed, options)?;
        model.load_adapter(dir)?;
        Ok(model)
    }

    fn load_adapter_base(&self, dir: &std::path::Path, fallback_seed: u64, options: LoadOptions) -> Result<Model> {
        let (_, meta) = crate::lora::read_config(dir)?;
        let base = meta.base.ok_or_else(|| Error::Config {
            path: dir.join(crate::ADAPTER_CONFIG),
            message: "base_model_name_or_path is missing: name the base model, with the adapter given separately"
                .into(),
        })?;
        let base: ModelSource = base.parse()?;
        base.load_with_adapter(dir, fallback_seed, options)
    }

    /// A critic: a saved one's folder, or a policy's (its decoder, the head at zero).
    pub fn load_critic(&self, fallback_seed: u64, options: LoadOptions) -> Result<ValueModel> {
        match self {
            ModelSource::Folder(dir) => ValueModel::load(dir, options),
            embedded => ValueModel::from_policy(&embedded.load(fallback_seed, options)?),
        }
    }

    pub fn is_embedded(&self) -> bool {
        matches!(self, ModelSource::Embedded { .. })
    }
}

impl FromStr for ModelSource {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let (name, seed) = match s.split_once('@') {
            Some((name @ ("default" | "default-vl"), seed)) => {
                let seed = seed
                    .parse::<u64>()
                    .map_err(|_| Error::Invalid(format!("model {s:?}: the seed after `@` must be a whole number")))?;
                (name, Some(seed))
            }
            _ => (s, None),
        };
        Ok(match name {
            "default" => ModelSource::Embedded { vision: false, seed },
            "default-vl" => ModelSource::Embedded { vision: true, seed },
            "" => return Err(Error::Invalid("model: empty; expected a folder, `default` or `default-vl`".into())),
            folder => ModelSource::Folder(folder.into()),
        })
    }
}

impl std::fmt::Display for ModelSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelSource::Embedded { vision, seed } => {
                f.write_str(if *vision { "default-vl" } else { "default" })?;
                seed.map_or(Ok(()), |s| write!(f, "@{s}"))
            }
            ModelSource::Folder(dir) => write!(f, "{}", dir.display()),
        }
    }
}

impl Model {
    /// `default` for the embedded model (see [`crate::default_model`]), `default-vl` for its
    /// VL sibling ([`crate::default_vl_model`]), else a folder.
    pub fn from_spec(spec: &str, options: LoadOptions) -> Result<Self> {
        spec.parse::<ModelSource>()?.load(crate::DEFAULT_SEED, options)
    }
}

impl ValueModel {
    /// A critic from a model spec (`default`, `default-vl`, a folder; see
    /// [`ModelSource`]): the decoder's weights are copied, the head starts at zero
    /// (every value 0) unless the folder is a saved critic that has `score.weight`.
    pub fn from_spec(spec: &str, options: LoadOptions) -> Result<Self> {
        spec.parse::<ModelSource>()?.load_critic(crate::DEFAULT_SEED, options)
    }
}

/// Where a model runs: `auto` (the first GPU when libtorch sees one, else the CPU), `cpu`,
/// `cuda` or `cuda:N`. Resolved against the machine only when a model is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum DeviceChoice {
    #[default]
    Auto,
    Cpu,
    Cuda(usize),
}

impl DeviceChoice {
    /// The device on this machine; a GPU it does not have is an error naming the count.
    pub fn resolve(self) -> Result<Device> {
        match self {
            DeviceChoice::Auto => Ok(Device::cuda_if_available()),
            DeviceChoice::Cpu => Ok(Device::Cpu),
            DeviceChoice::Cuda(n) => {
                let count = tch::Cuda::device_count() as usize;
                if n < count {
                    Ok(Device::Cuda(n))
                } else {
                    Err(Error::Invalid(format!("device cuda:{n}: libtorch sees {count} CUDA device(s)")))
                }
            }
        }
    }
}

impl FromStr for DeviceChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(DeviceChoice::Auto),
            "cpu" => Ok(DeviceChoice::Cpu),
            "cuda" => Ok(DeviceChoice::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse::<usize>().ok())
                .map(DeviceChoice::Cuda)
                .ok_or_else(|| Error::Invalid(format!("device {s:?}: expected cpu, cuda, cuda:N or auto"))),
        }
    }
}

impl std::fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceChoice::Auto => f.write_str("auto"),
            DeviceChoice::Cpu => f.write_str("cpu"),
            DeviceChoice::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// A model, where it runs and in which precision: what `--model --device --dtype` and a
/// config's `[model]` name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSpec {
    pub source: ModelSource,
    /// A LoRA adapter folder over the source.
    pub adapter: Option<PathBuf>,
    pub device: DeviceChoice,
    pub dtype: DType,
}

impl ModelSpec {
    pub fn options(&self) -> Result<LoadOptions> {
        Ok(LoadOptions { device: self.device.resolve()?, dtype: self.dtype, ..LoadOptions::default() })
    }

    /// The model, an embedded one drawn from [`crate::DEFAULT_SEED`] unless the spec names
    /// a seed.
    pub fn load(&self) -> Result<Model> {
        match &self.adapter {
            Some(dir) => self.source.load_with_adapter(dir, crate::DEFAULT_SEED, self.options()?),
            None => self.source.load(crate::DEFAULT_SEED, self.options()?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_once_and_print_back() {
        for s in ["default", "default-vl", "default@7", "default-vl@3", "models/qwen"] {
            assert_eq!(s.parse::<ModelSource>().unwrap().to_string(), s);
        }
        assert_eq!("default@7".parse::<ModelSource>().unwrap(), ModelSource::Embedded { vision: false, seed: Some(7) });
        assert!("default@x".parse::<ModelSource>().unwrap_err().to_string().contains("whole number"));
        for s in ["auto", "cpu", "cuda:1"] {
            assert_eq!(s.parse::<DeviceChoice>().unwrap().to_string(), s);
        }
        assert_eq!("cuda".parse::<DeviceChoice>().unwrap(), DeviceChoice::Cuda(0));
        assert!("gpu".parse::<DeviceChoice>().unwrap_err().to_string().contains("expected cpu, cuda"));
        let json: DeviceChoice = serde_json::from_str("\"cpu\"").unwrap();
        assert_eq!(json, DeviceChoice::Cpu);
        assert!(serde_json::from_str::<ModelSource>("\"\"").is_err());
    }
}
