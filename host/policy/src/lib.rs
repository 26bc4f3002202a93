//! vagen-policy: where the language model (`vagen-model`) meets the agent loop
//! (`vagen-rollout`) and the sandbox (`vagen-runtime`): [`ModelPolicy`] answers rollout
//! requests through the chat template and the rollout engine, [`LocalJudge`] answers reward
//! functions' judge requests, [`EndpointPolicy`] answers them from any OpenAI-compatible
//! server through [`Endpoint`]. The model crate itself knows neither.

pub mod endpoint;
mod endpoint_policy;
mod judge;
pub mod openai;
mod policy;

pub use endpoint::{Endpoint, EndpointOptions};
pub use endpoint_policy::EndpointPolicy;
pub use judge::LocalJudge;
pub use policy::{ChatModel, ModelPolicy};
