//! `--limit key=value` overrides on top of the default sandbox limits.

use anyhow::{Result, anyhow, bail};
use vagen_runtime::Limits;

/// Applies `key=value` pairs (keys are `Limits` field names, values JSON or bare words),
/// checked by [`Limits::with_values`] as a training config's `[sandbox]` table is.
pub fn limits_from(overrides: &[String]) -> Result<Limits> {
    let mut values = Vec::new();
    for pair in overrides {
        let Some((key, raw)) = pair.split_once('=') else {
            bail!("--limit {pair:?}: expected key=value");
        };
        let raw = raw.trim();
        let parsed = serde_json::from_str(raw).unwrap_or_else(|_| serde_json::Value::String(raw.into()));
        values.push((key.trim(), parsed));
    }
    Limits::with_values(values).map_err(|e| anyhow!("--limit {e}"))
}

/// Loads a plugin, with the path in the error.
pub fn load(path: &std::path::Path, limits: Limits) -> Result<std::sync::Arc<dyn vagen_runtime::Plugin>> {
    let runtime = vagen_runtime::Runtime::new(limits)?;
    Ok(runtime.load(path)?)
}

#[cfg(test)]
mod tests {
    use super::limits_from;

    fn args(pairs: &[&str]) -> Vec<String> {
        pairs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_set_limits_and_bad_ones_name_the_flag_and_key() {
        let l = limits_from(&args(&["call_timeout_ms=50", "fuel_millions_per_call = 3"])).unwrap();
        assert_eq!((l.call_timeout_ms, l.fuel_millions_per_call), (50, Some(3)));
        for (pair, needle) in [
            ("call_timeout_ms=0", "--limit call_timeout_ms: 0 ms"),
            ("memory_mib=0", "--limit memory_mib: 0 MiB"),
            ("memory=64", "--limit memory: no such limit"),
            ("call_timeout_ms=soon", "--limit call_timeout_ms: invalid type"),
            ("call_timeout_ms", "expected key=value"),
        ] {
            let err = limits_from(&args(&[pair])).unwrap_err().to_string();
            assert!(err.contains(needle), "{pair}: {err}");
        }
    }
}
