//! Qwen2-family causal language models on libtorch (tch), for rollouts and training.
//!
//! - [`Qwen2Config`] is deserialised straight from a Hugging Face `config.json`;
//!   [`Qwen2VlConfig`] from a Qwen2.5-VL one (transformers 4 and 5 spellings).
//! - [`Qwen2ForCausalLM`] mirrors the HF weight names; its forward pass takes the
//!   [`KvCache`] as an explicit value, so the same weights serve batched generation (with a
//!   cache) and training forwards (without one).
//! - [`Tokenizer`] wraps `tokenizer.json`; [`ChatTemplate`] renders the model's Jinja chat
//!   template the way transformers' `apply_chat_template` does.
//! - [`generate`] runs batched, seeded generation and returns sampled ids with log-probs;
//!   [`generate_vl`] the same with images in the prompts.
//! - Qwen2.5-VL: [`VisionTower`] (window attention, 2-D rotary, patch merger),
//!   [`ImageProcessor`] (transformers' `Qwen2VLImageProcessor`), M-RoPE positions and image
//!   features placed in the prompt ([`Vision`], [`Prompt`]).
//! - [`Engine`] is the rollout engine: per-trajectory KV reuse across turns, group prompts
//!   prefilled once, continuous batching.
//! - [`Model`] loads and saves HF folders (`model.safetensors`, sharded or not);
//!   [`LoraConfig`] adapters in PEFT's layout, trained over a frozen base that a critic or
//!   a KL reference shares;
//!   [`default_model`] builds the embedded small model from a seed.

mod adapters;
mod chat;
mod chats;
mod checkpoint;
mod config;
mod cuda_graph;
pub(crate) mod default_model;
mod derived;
mod device;
mod engine;
mod env_tokenizer;
mod error;
mod flash;
mod folder;
mod generate;
mod host_read;
mod image_processor;
mod kv_cache;
mod linear;
mod lora;
mod op_count;
mod panics;
mod qwen2;
mod rope;
mod sampling;
mod spec;
mod tokenizer;
mod tool_calls;
mod value_head;
mod vision;
mod vl;
mod vl_config;
mod weights;

pub use chat::ChatTemplate;
pub use chats::{Answered, Chat, ChatAnswer, ChatError};
pub use checkpoint::{LoadOptions, Model};
pub use config::Qwen2Config;
pub use default_model::{
    DEFAULT_SEED, benchmark_model, default_config, default_model, default_vl_config, default_vl_model,
    embedded_chat_template, random_model,
};
pub use device::DType;
pub use engine::{
    Engine, EngineKind, EngineOptions, EngineRequest, EngineStats, Refresh, RequestId, Sampled, StepOutput,
};
pub use env_tokenizer::tokenizer_for;
pub use error::{Error, Result, without_cpp_backtrace};
pub use folder::{FileKind, ModelFolder};
pub use generate::{
    FinishReason, GenerateOptions, Generation, Sampling, SamplingFor, generate, generate_vl, sequence_logprobs,
    sequence_logprobs_vl,
};
pub use image_processor::{ImageProcessor, PixelValues};
pub use kv_cache::KvCache;
pub use linear::AdapterRows;
pub use lora::{ADAPTER_CONFIG, ADAPTER_WEIGHTS, AdapterMeta, LoraConfig, LoraInit, Targets, is_adapter_folder};
pub use op_count::{OpCount, count_ops};
pub use panics::{catch_panic, install_panic_hook};
pub use qwen2::{Qwen2ForCausalLM, Qwen2Model, attention_mask};
pub use spec::{DeviceChoice, ModelSource, ModelSpec};
pub use tokenizer::Tokenizer;
pub use tool_calls::{CALL_OPEN, ToolAnswer, ToolFormat};
pub use vagen_abi::{IMAGE_MARKER, Image, Message, ToolCall};
pub use value_head::ValueModel;
pub use vision::{VisionTower, vision_forward_seconds};
pub use vl::{MropePositions, Prompt, Vision, hidden_states};
pub use vl_config::{Qwen2VlConfig, VisionConfig};
pub use weights::read_file as read_safetensors;
