//! `/schema` and `/metadata`: the JSON Schemas openenv-core's `SchemaResponse` carries
//! (action, observation, state), with our `x-vagen` object in the action schema, and its
//! `EnvironmentMetadata`.

use serde_json::{Value, json};
use vagen_runtime::{ActionSpace, Manifest, openenv::X_VAGEN};

pub fn schema(m: &Manifest, space: &ActionSpace, system_prompt: &str, max_answer_bytes: usize) -> Value {
    let answer_about = if space.action_names.is_empty() {
        "The agent's answer, as free text.".to_string()
    } else {
        format!(
            "The agent's answer: up to {} of {} separated by {:?}.",
            space.max_actions_per_turn,
            space.action_names.join(", "),
            space.action_separator
        )
    };
    let action = json!({
        "title": "VagenAction",
        "description": "A text answer, parsed by the environment as it parses a model's.",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "answer": {"type": "string", "description": answer_about, "maxLength": max_answer_bytes},
            "metadata": {"type": "object", "description": "Ignored."},
        },
        "required": ["answer"],
        X_VAGEN: {
            "action_names": space.action_names,
            "action_separator": space.action_separator,
            "max_actions_per_turn": space.max_actions_per_turn,
            "default_max_turns": m.default_max_turns,
            "modalities": m.modalities,
            "system_prompt": system_prompt,
        },
    });
    let integer = |about: &str| json!({"type": "integer", "minimum": 0, "description": about});
    let observation = json!({
        "title": "VagenObservation",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "done": {"type": "boolean", "default": false},
            "reward": {"anyOf": [{"type": "number"}, {"type": "null"}], "default": null},
            "metadata": {"type": "object"},
            "text": {"type": "string", "description": "What the agent reads, with an <image> marker where each image stands."},
            "images": {"type": "array", "items": {"type": "string", "description": "A PNG data URL (data:image/png;base64,…), RGB8."}},
            "system_prompt": {"type": "string", "description": "The env's system prompt (after reset only)."},
            "episode_id": {"type": "string"},
            "seed": {"type": "integer", "minimum": 0},
            "turn": integer("Steps taken in this episode."),
            "success": {"type": "boolean"},
            "valid_actions": integer("Actions of the answer that parsed."),
            "effective_actions": integer("Actions that changed the state."),
            "metrics": {"type": "object", "additionalProperties": {"type": "number"}},
        },
        "required": ["text", "images", "episode_id", "seed", "turn", "success", "valid_actions", "effective_actions", "metrics"],
    });
    let state = json!({
        "title": "VagenState",
        "type": "object",
        "additionalProperties": true,
        "properties": {
            "episode_id": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "step_count": {"type": "integer", "minimum": 0, "default": 0},
            "seed": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]},
            "playing": {"type": "boolean"},
            "description": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "The env's describe-state."},
        },
    });
    json!({"action": action, "observation": observation, "state": state})
}

pub fn metadata(m: &Manifest) -> Value {
    json!({
        "name": m.name,
        "description": m.description,
        "readme_content": null,
        "version": m.version,
        "author": null,
        "documentation_url": null,
    })
}
