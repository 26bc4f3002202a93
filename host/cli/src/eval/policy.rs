//! Who answers an evaluation, and the identity its results carry: a local model (its
//! folder's digest), an endpoint (its URL and the model name asked for), random actions or
//! the env's oracle.

use super::args::{EvalArgs, PolicyChoice, Setup};
use super::records::ModelIdentity;
use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use vagen_model::{GenerateOptions, ModelSource};
use vagen_policy::{Endpoint, EndpointOptions, EndpointPolicy, ModelPolicy};
use vagen_rollout::{OraclePolicy, Policy, RandomPolicy};

pub struct Made {
    pub policy: Box<dyn Policy>,
    /// The endpoint of `--policy openai`, for its counts.
    pub endpoint: Option<Arc<Endpoint>>,
}

/// Who answers, as results record it (a local model's folders hashed, nothing loaded).
pub fn identity(a: &EvalArgs) -> Result<ModelIdentity> {
    let named = |name: &str| ModelIdentity { name: name.into(), digest: None, adapter_digest: None, endpoint: None };
    let model = a.model.clone().unwrap_or_default();
    Ok(match a.policy {
        PolicyChoice::Random => named("random"),
        PolicyChoice::Oracle => named("oracle"),
        PolicyChoice::Openai => ModelIdentity { endpoint: a.base_url.clone(), ..named(&model) },
        PolicyChoice::Model => {
            let source: ModelSource = model.parse().with_context(|| format!("--model {model:?}"))?;
            let digest = match &source {
                ModelSource::Folder(dir) => folder_digest(dir)?,
                ModelSource::Embedded { .. } => format!("embedded:vagen-{}", env!("CARGO_PKG_VERSION")),
            };
            let adapter_digest = a.adapter.as_deref().map(folder_digest).transpose()?;
            ModelIdentity { digest: Some(digest), adapter_digest, ..named(&model) }
        }
    })
}

pub fn make(a: &EvalArgs, setup: &Setup) -> Result<Made> {
    let format = setup.rollout.format;
    let m = setup.plugin.manifest();
    Ok(match a.policy {
        PolicyChoice::Random if m.action_names.is_empty() => {
            anyhow::bail!("the random policy needs discrete action names, and {} takes free-form answers", m.name)
        }
        PolicyChoice::Random => Made { policy: Box::new(RandomPolicy { format }), endpoint: None },
        PolicyChoice::Oracle if !m.has_oracle => anyhow::bail!("{} has no oracle", m.name),
        PolicyChoice::Oracle => Made { policy: Box::new(OraclePolicy { format }), endpoint: None },
        PolicyChoice::Openai => endpoint(a, setup)?,
        PolicyChoice::Model => local(a, setup)?,
    })
}

fn endpoint(a: &EvalArgs, setup: &Setup) -> Result<Made> {
    let url = a.base_url.clone().expect("clap requires --base-url with --policy openai");
    let name = a.model.clone().expect("clap requires --model with --policy openai");
    let endpoint = Arc::new(Endpoint::new(EndpointOptions {
        api_key: super::api_key(a, &url)?,
        url: url.clone(),
        model: name.clone(),
        concurrency: a.concurrency.max(1),
        requests_per_minute: a.requests_per_minute,
        timeout: Duration::try_from_secs_f64(a.timeout_s).context("--timeout-s: a number of seconds")?,
        retries: a.retries,
        backoff: Duration::from_millis(500),
    }));
    let policy = EndpointPolicy {
        endpoint: endpoint.clone(),
        temperature: setup.temperature,
        max_tokens: setup.max_new_tokens,
        stop: setup.rollout.format.stop_strings(),
    };
    Ok(Made { policy: Box::new(policy), endpoint: Some(endpoint) })
}

fn local(a: &EvalArgs, setup: &Setup) -> Result<Made> {
    let text = a.model.clone().expect("clap requires --model with --policy model");
    let source: ModelSource = text.parse().with_context(|| format!("--model {text:?}"))?;
    let mut model = match &setup.train {
        // As the run loads it (its seed for `default`, its vision settings).
        Some(cfg) => {
            let mut cfg = cfg.clone();
            (cfg.model.path, cfg.model.device, cfg.model.dtype) = (source.clone(), a.device, a.dtype);
            vagen_trainer::load_model(&cfg, Some(setup.plugin.as_ref()))?
        }
        None => {
            let spec =
                vagen_model::ModelSpec { source: source.clone(), adapter: None, device: a.device, dtype: a.dtype };
            spec.load().with_context(|| format!("loading model {text}"))?
        }
    };
    if let Some(dir) = &a.adapter {
        model.load_adapter(dir).with_context(|| format!("loading the adapter {}", dir.display()))?;
    }
    let model = Rc::new(model);
    let policy = match &setup.train {
        Some(cfg) => {
            let mut p = vagen_trainer::held_out_policy(cfg, model);
            p.options.temperature = setup.temperature;
            p
        }
        None => {
            let options = GenerateOptions {
                max_new_tokens: setup.max_new_tokens,
                temperature: setup.temperature,
                stop: setup.rollout.format.stop_strings(),
                ..Default::default()
            };
            ModelPolicy::new(model, options)
        }
    };
    Ok(Made { policy: Box::new(policy), endpoint: None })
}

/// `sha256:` over a folder's files (their paths and contents, in path order): two folders
/// with this equal hold the same weights and settings.
pub fn folder_digest(dir: &Path) -> Result<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, std::path::PathBuf)>) -> Result<()> {
        for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = entry?.path();
            let kind = std::fs::symlink_metadata(&path)?.file_type();
            if kind.is_dir() {
                walk(root, &path, out)?;
            } else if path.is_file() {
                let name = path.strip_prefix(root).unwrap_or(&path).display().to_string();
                out.push((name, path));
            }
        }
        Ok(())
    }
    let mut files = vec![];
    walk(dir, dir, &mut files)?;
    files.sort();
    let mut all = Sha256::new();
    for (name, path) in files {
        let mut one = Sha256::new();
        let mut f = std::fs::File::open(&path).with_context(|| format!("reading {}", path.display()))?;
        std::io::copy(&mut f, &mut one).with_context(|| format!("reading {}", path.display()))?;
        all.update(format!("{name}\0{}\n", hex::encode(one.finalize())));
    }
    Ok(format!("sha256:{}", hex::encode(all.finalize())))
}
