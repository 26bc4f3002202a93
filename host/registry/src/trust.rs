//! Which components a user accepts from registries: a public key their signatures must
//! verify with, and whether an unsigned one is refused. Set by the user alone: command-line
//! flags (`--verify-key`, `--require-signed`), else `[plugins]` in the user's config
//! (`$XDG_CONFIG_HOME/vagen/config.toml`, else `~/.config/vagen/config.toml`); never a run
//! config, which may come from the publisher of the component it names.

use crate::Error;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trust {
    /// A cosign public key (PEM): a signed component must be signed by it.
    pub verify_key: Option<PathBuf>,
    /// Refuse a component with no signature by `verify_key`.
    #[serde(default)]
    pub require_signed: bool,
}

static FLAGS: OnceLock<Trust> = OnceLock::new();

/// The command line's choice, for every load in this process; set once, at the edge.
pub fn set_trust(flags: Trust) {
    let _ = FLAGS.set(flags);
}

/// The flags where given, each field falling back to the user config's.
pub fn trust() -> Result<Trust, Error> {
    let file = user_file();
    let user = match &file {
        Some(path) if path.is_file() => read(path)?,
        _ => Trust::default(),
    };
    let flags = FLAGS.get().cloned().unwrap_or_default();
    Ok(Trust {
        verify_key: flags.verify_key.or(user.verify_key),
        require_signed: flags.require_signed || user.require_signed,
    })
}

fn user_file() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".config")))?;
    Some(base.join("vagen").join("config.toml"))
}

#[derive(serde::Deserialize)]
struct UserConfig {
    #[serde(default)]
    plugins: Trust,
}

fn read(path: &Path) -> Result<Trust, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::file(path, e))?;
    let table: toml::Table = toml::from_str(&text).map_err(|e| Error::file(path, e))?;
    // Other sections belong to other parts of the program; [plugins] is read whole.
    let plugins = toml::Table::from_iter(table.get("plugins").map(|p| ("plugins".to_string(), p.clone())));
    let config: UserConfig =
        plugins.try_into().map_err(|e: toml::de::Error| Error::file(path, format!("[plugins]: {e}")))?;
    let mut trust = config.plugins;
    // A relative key path is relative to the config file.
    if let Some(key) = &trust.verify_key
        && key.is_relative()
    {
        trust.verify_key = Some(path.parent().unwrap_or(Path::new(".")).join(key));
    }
    Ok(trust)
}
