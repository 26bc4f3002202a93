//! What a server's `/schema` and `/metadata` say, read once at load into how answers are
//! sent and observations read. `vagen-host serve-env` adds an `x-vagen` object to its action
//! schema (action names, separator, turns, system prompt): a server that has one is read
//! exactly, any other through the options and the JSON schemas' fields.

use super::OpenEnvOptions;
use crate::{ActionSpace, Manifest, Modality};
use serde_json::{Map, Value};

/// The key of the extension object in `serve-env`'s action schema.
pub const X_VAGEN: &str = "x-vagen";

/// How the answer's text becomes the action field's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum FieldKind {
    Text,
    Integer,
    Number,
    Boolean,
}

#[derive(Clone, Debug)]
pub(crate) struct Described {
    pub manifest: Manifest,
    pub action_field: String,
    pub kind: FieldKind,
    pub observation_field: Option<String>,
    pub success_field: Option<String>,
    pub system_prompt: String,
    /// The server is `vagen-host serve-env`: observations carry images, success, counts
    /// and metrics in its fields.
    pub vagen: bool,
}

/// Reads `schema` (`/schema`'s body) and `metadata` (`/metadata`'s, or `{}`).
pub(crate) fn describe(schema: &Value, metadata: &Value, options: &OpenEnvOptions) -> Result<Described, String> {
    let action = schema.get("action").ok_or("the /schema reply has no `action` schema")?;
    let observation = schema.get("observation").ok_or("the /schema reply has no `observation` schema")?;
    let action_props = properties(action, &["metadata"]);
    let observation_props = properties(observation, &["metadata", "done", "reward"]);
    let vagen = action.get(X_VAGEN).and_then(Value::as_object);

    let action_field = action_field(action, &action_props, options.action_field.as_ref())?;
    let field = resolve(action, &action_props[&action_field]);
    let kind = field_kind(&action_field, &field)?;
    let action_names = match vagen {
        Some(x) => strings(x.get("action_names")),
        None => strings(field.get("enum")),
    };
    let observation_field = observation_field(observation, &observation_props, options.observation_field.as_ref())?;
    let success_field = success_field(&observation_props, options.success_field.as_ref())?;

    let images = vagen.is_some() && observation_props.contains_key("images");
    let manifest = manifest(metadata, vagen, images, options.max_turns, action_names);
    let system_prompt =
        match (&options.system_prompt, vagen.and_then(|x| x.get("system_prompt")).and_then(Value::as_str)) {
            (Some(p), _) => p.clone(),
            (None, Some(p)) => p.to_string(),
            (None, None) => made_prompt(&manifest, &action_field, &field),
        };
    Ok(Described {
        manifest,
        action_field,
        kind,
        observation_field,
        success_field,
        system_prompt,
        vagen: vagen.is_some(),
    })
}

/// The action field that receives the answer: the one `chosen`, else the schema's one
/// required field, else its only field.
fn action_field(action: &Value, props: &Map<String, Value>, chosen: Option<&String>) -> Result<String, String> {
    match chosen {
        Some(f) if props.contains_key(f) => Ok(f.clone()),
        Some(f) => Err(format!("the action schema has no field {f:?} (it has {})", names(props))),
        None => {
            let required: Vec<&str> = (action.get("required").and_then(Value::as_array).into_iter().flatten())
                .filter_map(Value::as_str)
                .filter(|r| *r != "metadata")
                .collect();
            match (required.as_slice(), props.len()) {
                ([one], _) => Ok(one.to_string()),
                ([], 1) => Ok(props.keys().next().expect("one").clone()),
                _ => Err(format!(
                    "the action schema has fields {}: say which receives the answer with action_field",
                    names(props)
                )),
            }
        }
    }
}

/// How the answer's text fills action field `name` of schema `field`.
fn field_kind(name: &str, field: &Value) -> Result<FieldKind, String> {
    match field.get("type").and_then(Value::as_str) {
        Some("integer") => Ok(FieldKind::Integer),
        Some("number") => Ok(FieldKind::Number),
        Some("boolean") => Ok(FieldKind::Boolean),
        Some("string") | None => Ok(FieldKind::Text),
        Some(other) => Err(format!(
            "action field {name:?} is of type {other}: a text answer can only fill a string, number or boolean field"
        )),
    }
}

/// The observation field shown as text: the one `chosen`, else `text`, else the one string
/// field; `None` when there is no such one.
fn observation_field(
    observation: &Value,
    props: &Map<String, Value>,
    chosen: Option<&String>,
) -> Result<Option<String>, String> {
    match chosen {
        Some(f) if props.contains_key(f) => Ok(Some(f.clone())),
        Some(f) => Err(format!("the observation schema has no field {f:?} (it has {})", names(props))),
        None if props.contains_key("text") => Ok(Some("text".into())),
        None => {
            let texts: Vec<&String> = (props.iter())
                .filter(|(_, v)| resolve(observation, v).get("type").and_then(Value::as_str) == Some("string"))
                .map(|(k, _)| k)
                .collect();
            Ok((texts.len() == 1).then(|| texts[0].clone()))
        }
    }
}

/// The observation field saying the episode succeeded: the one `chosen`, else `success`
/// when the schema has it.
fn success_field(props: &Map<String, Value>, chosen: Option<&String>) -> Result<Option<String>, String> {
    match chosen {
        Some(f) if props.contains_key(f) => Ok(Some(f.clone())),
        Some(f) => Err(format!("the observation schema has no field {f:?} (it has {})", names(props))),
        None => Ok(props.contains_key("success").then(|| "success".into())),
    }
}

/// The environment's manifest from `/metadata` and, for `serve-env`, its `x-vagen` object
/// (`vagen`): actions per turn, turns (unless `max_turns` says), the separator; with
/// `images`, observations carry images.
fn manifest(
    metadata: &Value,
    vagen: Option<&Map<String, Value>>,
    images: bool,
    max_turns: Option<u32>,
    action_names: Vec<String>,
) -> Manifest {
    let text = |key: &str| metadata.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
    let name = match text("name") {
        n if n.is_empty() => "openenv".to_string(),
        n => n,
    };
    let number =
        |key: &str| vagen.and_then(|x| x.get(key)).and_then(Value::as_u64).map(|n| n.min(u32::MAX as u64) as u32);
    let mut modalities = vec![Modality::Text];
    if images {
        modalities.push(Modality::Image);
    }
    Manifest {
        name,
        version: text("version"),
        description: text("description"),
        modalities,
        action_separator: vagen.and_then(|x| x.get("action_separator")).and_then(Value::as_str).unwrap_or(",").into(),
        max_actions_per_turn: number("max_actions_per_turn").unwrap_or(1).max(1),
        default_max_turns: max_turns.or(number("default_max_turns")).unwrap_or(10).max(1),
        action_names,
        default_config: "{}".into(),
        has_oracle: false,
    }
}

/// The strings of a JSON array (nothing for anything else).
fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(String::from).collect()
}

impl Described {
    pub(crate) fn action_space(&self) -> ActionSpace {
        ActionSpace::of(&self.manifest)
    }
}

/// "<description>\nEach turn, answer with <the field's description>, one of: a, b."
fn made_prompt(m: &Manifest, field: &str, schema: &Value) -> String {
    let mut prompt =
        if m.description.is_empty() { format!("You are playing {}.", m.name) } else { m.description.clone() };
    let about = schema.get("description").and_then(Value::as_str).unwrap_or_default();
    prompt.push_str(&format!("\nEach turn, answer with the action's {field}"));
    if !about.is_empty() {
        prompt.push_str(&format!(" ({about})"));
    }
    if !m.action_names.is_empty() {
        prompt.push_str(&format!(", one of: {}", m.action_names.join(", ")));
    }
    prompt.push('.');
    prompt
}

/// A schema's properties, without `skip`.
fn properties(schema: &Value, skip: &[&str]) -> Map<String, Value> {
    let mut props = schema.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
    for s in skip {
        // `shift_remove`: objects keep their order (`preserve_order`), which prompts show.
        props.shift_remove(*s);
    }
    props
}

/// A property's schema, following one `$ref` into the root's `$defs` (pydantic writes an
/// `Enum` field that way) and taking the first typed branch of an `anyOf` (`Optional[X]`).
fn resolve(root: &Value, property: &Value) -> Value {
    let mut p = property.clone();
    if let Some(name) = p.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix("#/$defs/"))
        && let Some(def) = root.get("$defs").and_then(|d| d.get(name))
    {
        p = def.clone();
    }
    if p.get("type").is_none()
        && let Some(first) = p
            .get("anyOf")
            .and_then(Value::as_array)
            .and_then(|b| b.iter().find(|x| x.get("type").and_then(Value::as_str).is_some_and(|t| t != "null")))
    {
        let description = p.get("description").cloned();
        p = first.clone();
        if let (Some(d), Some(o)) = (description, p.as_object_mut()) {
            o.entry("description").or_insert(d);
        }
    }
    p
}

fn names(props: &Map<String, Value>) -> String {
    if props.is_empty() {
        return "no fields".into();
    }
    props.keys().map(|k| format!("{k:?}")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What openenv-core 0.3.0's `/schema` gives for a pydantic action with one
    /// `Literal` field and an observation with a message and a score.
    fn corridor() -> Value {
        json!({
            "action": {"title": "MoveAction", "type": "object", "additionalProperties": false,
                "properties": {"metadata": {"type": "object"},
                    "move": {"type": "string", "enum": ["left", "right"], "description": "where to step"}},
                "required": ["move"]},
            "observation": {"type": "object", "properties": {"done": {"type": "boolean"}, "reward": {},
                "metadata": {"type": "object"}, "board": {"type": "string"}, "steps": {"type": "integer"}}},
            "state": {"type": "object"}
        })
    }

    #[test]
    fn a_generic_schema_gives_the_field_names_and_a_prompt() {
        let meta = json!({"name": "corridor", "description": "Walk to the goal.", "version": "1.0"});
        let d = describe(&corridor(), &meta, &OpenEnvOptions::default()).unwrap();
        assert_eq!((d.action_field.as_str(), d.kind), ("move", FieldKind::Text));
        assert_eq!(d.manifest.action_names, ["left", "right"]);
        assert_eq!(d.observation_field.as_deref(), Some("board"));
        assert_eq!(d.success_field, None);
        assert!(!d.vagen);
        assert_eq!(
            d.system_prompt,
            "Walk to the goal.\nEach turn, answer with the action's move (where to step), one of: left, right."
        );
        assert_eq!((d.manifest.name.as_str(), d.manifest.default_max_turns), ("corridor", 10));
    }

    #[test]
    fn ambiguous_or_missing_fields_are_named() {
        let mut two = corridor();
        two["action"]["properties"]["speed"] = json!({"type": "integer"});
        two["action"]["required"] = json!(["move", "speed"]);
        let err = describe(&two, &json!({}), &OpenEnvOptions::default()).unwrap_err();
        assert!(err.contains("fields \"move\", \"speed\": say which"), "{err}");
        let speed = OpenEnvOptions { action_field: Some("speed".into()), ..Default::default() };
        assert_eq!(describe(&two, &json!({}), &speed).unwrap().kind, FieldKind::Integer);
        let typo = OpenEnvOptions { observation_field: Some("bord".into()), ..Default::default() };
        let err = describe(&corridor(), &json!({}), &typo).unwrap_err();
        assert!(err.contains("no field \"bord\" (it has \"board\", \"steps\")"), "{err}");
    }
}
