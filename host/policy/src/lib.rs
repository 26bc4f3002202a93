//! vagen-policy: where the language model (`vagen-model`) meets the agent loop
//! (`vagen-rollout`) and the sandbox (`vagen-runtime`): [`ModelPolicy`] answers rollout
//! requests through the chat template and the rollout engine, [`LocalJudge`] answers reward
//! functions' judge requests. The model crate itself knows neither.

mod judge;
pub mod openai;
mod policy;

pub use judge::LocalJudge;
pub use policy::{ChatModel, ModelPolicy};
