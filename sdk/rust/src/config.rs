//! Turning the host's JSON config into an env's typed `Config`.

use crate::EnvError;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::{Map, Value};

/// The `Config` of an environment that takes no options: accepts `{}` only.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoConfig {}

/// defaults ← preset (if `"preset"` is given) ← the caller's fields, then typed parsing.
/// Merging as JSON (not as structs) lets a preset set some fields and the caller others.
pub(crate) fn resolve<C: Serialize + DeserializeOwned + Default>(
    json: &str,
    presets: &[(&str, &str)],
) -> Result<C, EnvError> {
    let bad = |m: String| EnvError::BadConfig(m);
    let given: Value = if json.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        serde_json::from_str(json).map_err(|e| bad(format!("not valid JSON: {e}")))?
    };
    let Value::Object(mut given) = given else {
        return Err(bad(format!("expected a JSON object, got {}", kind(&given))));
    };
    let mut merged = match serde_json::to_value(C::default()) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    if let Some(name) = given.remove("preset") {
        let Value::String(name) = name else {
            return Err(bad("`preset` must be a string".into()));
        };
        let Some((_, overlay)) = presets.iter().find(|(n, _)| *n == name) else {
            let known: Vec<_> = presets.iter().map(|(n, _)| *n).collect();
            return Err(bad(format!("unknown preset `{name}` (known: {})", known.join(", "))));
        };
        let overlay: Map<String, Value> = serde_json::from_str(overlay)
            .map_err(|e| EnvError::Failed(format!("preset `{name}` is not a JSON object: {e}")))?;
        merged.extend(overlay);
    }
    merged.extend(given);
    serde_json::from_value(Value::Object(merged)).map_err(|e| bad(e.to_string()))
}

/// The default config as the JSON text the manifest advertises.
pub(crate) fn default_json<C: Serialize + Default>() -> String {
    serde_json::to_string(&C::default()).unwrap_or_else(|_| "{}".into())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
    #[serde(default, deny_unknown_fields)]
    struct C {
        size: u32,
        slippery: bool,
    }

    const PRESETS: &[(&str, &str)] = &[("big", r#"{"size": 8, "slippery": true}"#)];

    #[test]
    fn preset_then_fields() {
        let c: C = resolve(r#"{"preset": "big", "slippery": false}"#, PRESETS).unwrap();
        assert_eq!(c, C { size: 8, slippery: false });
        let c: C = resolve("", PRESETS).unwrap();
        assert_eq!(c, C::default());
    }

    #[test]
    fn errors_name_the_problem() {
        let e = resolve::<C>(r#"{"sise": 3}"#, PRESETS).unwrap_err();
        assert!(matches!(&e, EnvError::BadConfig(m) if m.contains("sise")), "{e}");
        let e = resolve::<C>(r#"{"preset": "huge"}"#, PRESETS).unwrap_err();
        assert!(matches!(&e, EnvError::BadConfig(m) if m.contains("huge") && m.contains("big")));
        let e = resolve::<C>("[1]", PRESETS).unwrap_err();
        assert!(matches!(&e, EnvError::BadConfig(m) if m.contains("array")));
        let e = resolve::<C>("{", PRESETS).unwrap_err();
        assert!(matches!(&e, EnvError::BadConfig(m) if m.contains("JSON")));
    }
}
