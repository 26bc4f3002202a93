//! What the embedded model takes from the env it is trained on: a tokenizer retrained on the
//! env's texts and `sft.data`'s (its words a token or two each, not one per couple of
//! letters) and, unless
//! the config sets it, `rollout.max_new_tokens` from the oracle's longest answer. A real
//! checkpoint keeps its own tokenizer and budget.

use crate::config::TrainConfig;
use anyhow::{Context, Result};
use vagen_model::Model;
use vagen_rollout::{OraclePolicy, Policy, RandomPolicy, Trajectory};
use vagen_runtime::Plugin;

/// Episodes per policy (oracle, random) and env config whose texts train the tokenizer:
/// enough for every word an env uses to repeat, a fraction of a second for a plugin.
const EPISODES: u64 = 16;

/// The env's texts as the model will see them: system prompts, user turns and the oracle's
/// and a random policy's answers (in the run's format), on the training and held-out env
/// configs, and the action names.
pub struct EnvTexts {
    pub texts: Vec<String>,
    /// The oracle's answers, formatted (none without an oracle).
    pub oracle_answers: Vec<String>,
}

pub fn env_texts(cfg: &TrainConfig, plugin: Option<&dyn Plugin>) -> Result<EnvTexts> {
    let mut texts = vec![];
    let mut oracle_answers = Vec::new();
    if let Some(plugin) = plugin {
        plugin_texts(cfg, plugin, &mut texts, &mut oracle_answers)?;
    }
    // The conversations SFT learns from, when the run has a file of them.
    if let Some(path) = &cfg.sft.data {
        let template = vagen_model::embedded_chat_template();
        texts.extend(crate::chat_data::ChatData::load(path, true)?.texts(&template)?);
    }
    Ok(EnvTexts { texts, oracle_answers })
}

/// The plugin's texts (see [`env_texts`]) and its oracle's answers.
fn plugin_texts(
    cfg: &TrainConfig,
    plugin: &dyn Plugin,
    texts: &mut Vec<String>,
    oracle_answers: &mut Vec<String>,
) -> Result<()> {
    let manifest = plugin.manifest();
    texts.push(manifest.action_names.join(", "));
    let config = cfg.rollout.rollout_config();
    let seeds: Vec<u64> = (0..EPISODES).map(|i| cfg.env.train_seed_start + i).collect();
    let format = cfg.rollout.episodes.format;
    for env_config in [cfg.train_env_config_json(), cfg.env_config_json()] {
        let mut policies: Vec<Box<dyn Policy>> = vec![Box::new(RandomPolicy { format })];
        if manifest.has_oracle {
            policies.push(Box::new(OraclePolicy { format }));
        }
        for policy in &mut policies {
            let episodes = crate::play::episodes(cfg, plugin, &env_config, &config, 1);
            let played = match episodes.run(&seeds, policy.as_mut(), &mut |_| Ok(())) {
                Ok(o) => o.trajectories,
                // A free-form env has no action names to draw random answers from.
                Err(vagen_rollout::RolloutError::Policy(vagen_rollout::PolicyError::Unsupported { .. })) => continue,
                Err(e) => return Err(e).context("playing the env's episodes for the embedded model's tokenizer"),
            };
            for t in &played {
                add(texts, t);
                if policy.needs_oracle() {
                    oracle_answers.extend(t.turns.iter().map(|turn| turn.response.clone()));
                }
            }
        }
    }
    Ok(())
}

fn add(texts: &mut Vec<String>, t: &Trajectory) {
    texts.push(t.system.clone());
    for turn in &t.turns {
        texts.push(turn.user.clone());
        texts.push(turn.response.clone());
    }
    texts.push(t.end_observation.clone());
}

/// The embedded `model`'s tokenizer retrained on `texts`.
pub fn retokenize(model: &mut Model, texts: &EnvTexts) -> Result<()> {
    let vision = model.vision.is_some();
    model.tokenizer = vagen_model::tokenizer_for(&texts.texts, vision)?;
    Ok(())
}

/// Room for the oracle's longest answer (and the end-of-turn token) with half again as
/// margin: what a model imitating the oracle needs, and little more to sample. `None`
/// without oracle answers.
pub fn max_new_tokens_for(model: &Model, texts: &EnvTexts) -> Result<Option<usize>> {
    let mut longest = None;
    for answer in &texts.oracle_answers {
        let n = model.tokenizer.encode(answer)?.len() + 1;
        longest = longest.max(Some(n));
    }
    Ok(longest.map(|n| n + n / 2 + 4))
}
