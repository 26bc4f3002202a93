use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use tch::Kind;

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

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DType::F32 => "f32",
            DType::Bf16 => "bf16",
            DType::F16 => "f16",
        })
    }
}

/// Host values on `device` without waiting for it: on CUDA they go through page-locked
/// memory and a copy queued on the stream (libtorch keeps the buffer until the copy has
/// run), so the host never waits for the kernels before it; elsewhere a plain copy.
pub(crate) fn upload<T: tch::kind::Element>(values: &[T], device: tch::Device) -> tch::Tensor {
    let host = tch::Tensor::from_slice(values);
    match device {
        tch::Device::Cuda(_) => host.pin_memory(device).to_device_(device, host.kind(), true, false),
        _ => host.to_device(device),
    }
}
