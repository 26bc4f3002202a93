//! `vagen-host lock CONFIG`: writes `vagen.lock` beside a training config, pinning every
//! `oci://` component it names to the digest its registry gives now.

use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::PathBuf;
use vagen_registry::Lock;

#[derive(Args)]
pub struct LockArgs {
    /// The training config (TOML).
    config: PathBuf,
    #[command(flatten)]
    login: vagen_env::share::LoginArgs,
}

pub fn lock(a: LockArgs) -> Result<()> {
    let text = std::fs::read_to_string(&a.config).with_context(|| format!("reading {}", a.config.display()))?;
    let doc: toml::Table = toml::from_str(&text).with_context(|| a.config.display().to_string())?;
    let names = component_names(&doc);
    if names.is_empty() {
        bail!("{} names no oci:// component (env.plugin, [[reward]] plugin): nothing to lock", a.config.display());
    }
    let lock = Lock::resolve(&names, &a.login.credentials()?)?;
    let path = vagen_registry::lock::path_for(&a.config);
    lock.write(&path)?;
    for c in &lock.components {
        println!("{}  {}", c.digest, c.reference);
    }
    println!("wrote {}", path.display());
    Ok(())
}

/// `env.plugin` and each `[[reward]]`'s `plugin`, as the file writes them (the lock is keyed
/// by these strings; a tag already pinned needs no entry).
fn component_names(doc: &toml::Table) -> Vec<String> {
    let env = doc.get("env").and_then(|e| e.get("plugin")).and_then(|p| p.as_str());
    let rewards = doc.get("reward").and_then(|r| r.as_array()).into_iter().flatten();
    let rewards = rewards.filter_map(|r| r.get("plugin").and_then(|p| p.as_str()));
    env.into_iter()
        .chain(rewards)
        .filter(|n| n.starts_with(vagen_registry::reference::SCHEME))
        .filter(|n| vagen_registry::OciRef::parse(n).map(|r| r.digest().is_none()).unwrap_or(true))
        .map(str::to_string)
        .collect()
}
