//! `run --policy model` (and `eval`): the language model the env tool's `run` asks for.

use crate::model_args::ModelArgs;
use anyhow::Result;
use vagen_env::run::RunArgs;
use vagen_model::GenerateOptions;
use vagen_policy::ModelPolicy;
use vagen_rollout::{Format, Policy};

/// The model of `--model` / `--device` / `--dtype`, sampling as `run`'s options say.
pub fn make(a: &RunArgs, format: Format) -> Result<Box<dyn Policy>> {
    // vagen-env's arguments are strings (it has no libtorch to name these types with).
    let args = ModelArgs {
        model: a.model.parse()?,
        adapter: a.adapter.clone(),
        device: a.device.parse()?,
        dtype: a.dtype.parse()?,
    };
    let options = GenerateOptions {
        max_new_tokens: a.max_new_tokens,
        temperature: a.temperature,
        stop: format.stop_strings(),
        seed: a.seed,
        ..Default::default()
    };
    Ok(Box::new(ModelPolicy::new(std::rc::Rc::new(args.load()?), options).with_overflow(a.context_overflow)))
}
