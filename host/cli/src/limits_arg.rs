//! `--limit key=value` overrides on top of the default sandbox limits.

use anyhow::{Context, Result, bail};
use vagen_runtime::Limits;

/// Applies `key=value` pairs (keys are `Limits` field names, values JSON or bare words).
pub fn limits_from(overrides: &[String]) -> Result<Limits> {
    let mut value = serde_json::to_value(Limits::default())?;
    let fields = value.as_object_mut().expect("Limits serialises to an object");
    for pair in overrides {
        let Some((key, raw)) = pair.split_once('=') else {
            bail!("--limit {pair:?}: expected key=value");
        };
        let key = key.trim();
        if !fields.contains_key(key) {
            let known: Vec<_> = fields.keys().cloned().collect();
            bail!("--limit {key:?}: no such limit (known: {})", known.join(", "));
        }
        let parsed = serde_json::from_str(raw.trim()).unwrap_or_else(|_| serde_json::Value::String(raw.into()));
        fields.insert(key.to_string(), parsed);
    }
    serde_json::from_value(value).with_context(|| format!("--limit {}", overrides.join(" ")))
}

/// Loads a plugin, with the path in the error.
pub fn load(path: &std::path::Path, limits: Limits) -> Result<std::sync::Arc<dyn vagen_runtime::Plugin>> {
    let runtime = vagen_runtime::Runtime::new(limits)?;
    Ok(runtime.load(path)?)
}
