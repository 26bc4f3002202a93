use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use tch::{Device, Kind};

/// Parameter precision. Names as in HF's `torch_dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum DType {
    #[default]
    #[serde(alias = "float32")]
    F32,
    #[serde(alias = "bfloat16")]
    Bf16,
    #[serde(alias = "float16")]
    F16,
}

impl DType {
    pub fn kind(self) -> Kind {
        match self {
            DType::F32 => Kind::Float,
            DType::Bf16 => Kind::BFloat16,
            DType::F16 => Kind::Half,
        }
    }

    /// The `torch_dtype` string HF writes in `config.json`.
    pub fn hf_name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::Bf16 => "bfloat16",
            DType::F16 => "float16",
        }
    }
}

impl std::str::FromStr for DType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "f32" | "float32" => Ok(DType::F32),
            "bf16" | "bfloat16" => Ok(DType::Bf16),
            "f16" | "float16" => Ok(DType::F16),
            _ => Err(Error::Invalid(format!("dtype {s:?}: expected f32, bf16 or f16"))),
        }
    }
}

/// `cpu`, `cuda`, `cuda:N`, or `auto` (the first GPU when libtorch sees one, else the CPU).
pub fn parse_device(s: &str) -> Result<Device> {
    match s {
        "auto" => Ok(Device::cuda_if_available()),
        "cpu" => Ok(Device::Cpu),
        "cuda" => cuda(0),
        _ => match s.strip_prefix("cuda:").and_then(|n| n.parse::<usize>().ok()) {
            Some(n) => cuda(n),
            None => Err(Error::Invalid(format!("device {s:?}: expected cpu, cuda, cuda:N or auto"))),
        },
    }
}

fn cuda(n: usize) -> Result<Device> {
    let count = tch::Cuda::device_count() as usize;
    if n < count {
        Ok(Device::Cuda(n))
    } else {
        Err(Error::Invalid(format!("device cuda:{n}: libtorch sees {count} CUDA device(s)")))
    }
}
