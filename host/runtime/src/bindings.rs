//! Host bindings for `wit/v0.1.0` and their conversion into the host's types, with the
//! size and sanity checks of [`Limits`] applied on the way in.

use crate::types::IMAGE_MARKER;
use crate::{Error, Image, Limits, Manifest, Metric, Modality, Observation, StepResult};

wasmtime::component::bindgen!({
    world: "environment",
    path: "../../wit/v0.1.0",
});

pub(crate) use exports::vagen::env::env as wit_env;
pub(crate) use vagen::env::types as wit;

pub(crate) fn manifest(m: wit::Manifest) -> Result<Manifest, Error> {
    let malformed = |detail: String| Error::Malformed {
        call: "manifest",
        detail,
    };
    if m.name.trim().is_empty() {
        return Err(malformed("empty name".into()));
    }
    if m.max_actions_per_turn == 0 {
        return Err(malformed("max-actions-per-turn is 0".into()));
    }
    if m.default_max_turns == 0 {
        return Err(malformed("default-max-turns is 0".into()));
    }
    if !m.action_names.is_empty() && m.action_separator.trim().is_empty() {
        return Err(malformed("discrete actions but no action separator".into()));
    }
    if !m.default_config.trim().is_empty() {
        serde_json_object(&m.default_config)
            .map_err(|e| malformed(format!("default-config: {e}")))?;
    }
    Ok(Manifest {
        name: m.name,
        version: m.version,
        description: m.description,
        modalities: m
            .modalities
            .into_iter()
            .map(|m| match m {
                wit::Modality::Text => Modality::Text,
                wit::Modality::Image => Modality::Image,
            })
            .collect(),
        action_names: m.action_names,
        action_separator: m.action_separator,
        max_actions_per_turn: m.max_actions_per_turn,
        default_max_turns: m.default_max_turns,
        default_config: m.default_config,
        has_oracle: m.has_oracle,
    })
}

fn serde_json_object(text: &str) -> Result<(), String> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(_)) => Ok(()),
        Ok(_) => Err("not a JSON object".into()),
        Err(e) => Err(e.to_string()),
    }
}

pub(crate) fn observation(
    o: wit::Observation,
    limits: &Limits,
    call: &'static str,
) -> Result<Observation, Error> {
    let malformed = |detail: String| Error::Malformed { call, detail };
    if o.text.len() > limits.max_text_bytes {
        return Err(malformed(format!(
            "text of {} bytes (limit {})",
            o.text.len(),
            limits.max_text_bytes
        )));
    }
    if o.images.len() > limits.max_images {
        return Err(malformed(format!(
            "{} images (limit {})",
            o.images.len(),
            limits.max_images
        )));
    }
    let markers = o.text.matches(IMAGE_MARKER).count();
    if markers != o.images.len() {
        return Err(malformed(format!(
            "{markers} {IMAGE_MARKER} markers for {} images",
            o.images.len()
        )));
    }
    let mut images = Vec::with_capacity(o.images.len());
    for (i, img) in o.images.into_iter().enumerate() {
        let pixels = u64::from(img.width) * u64::from(img.height);
        if pixels == 0 || pixels > limits.max_image_pixels {
            return Err(malformed(format!(
                "image {i} is {}x{} (limit {} pixels)",
                img.width, img.height, limits.max_image_pixels
            )));
        }
        if img.rgb.len() as u64 != pixels * 3 {
            return Err(malformed(format!(
                "image {i} is {}x{} but carries {} bytes, not {}",
                img.width,
                img.height,
                img.rgb.len(),
                pixels * 3
            )));
        }
        images.push(Image {
            width: img.width,
            height: img.height,
            rgb: img.rgb,
        });
    }
    Ok(Observation {
        text: o.text,
        images,
    })
}

pub(crate) fn step_result(s: wit::StepResult, limits: &Limits) -> Result<StepResult, Error> {
    let malformed = |detail: String| Error::Malformed {
        call: "step",
        detail,
    };
    if !s.reward.is_finite() {
        return Err(malformed(format!("reward {} is not finite", s.reward)));
    }
    if s.metrics.len() > limits.max_metrics {
        return Err(malformed(format!(
            "{} metrics (limit {})",
            s.metrics.len(),
            limits.max_metrics
        )));
    }
    if let Some(m) = s.metrics.iter().find(|m| !m.value.is_finite()) {
        return Err(malformed(format!("metric {:?} is {}", m.name, m.value)));
    }
    Ok(StepResult {
        observation: observation(s.observation, limits, "step")?,
        reward: s.reward,
        done: s.done,
        success: s.success,
        valid_actions: s.valid_actions,
        effective_actions: s.effective_actions,
        metrics: s
            .metrics
            .into_iter()
            .map(|m| Metric {
                name: m.name,
                value: m.value,
            })
            .collect(),
    })
}

pub(crate) fn guest_error(e: wit::EnvError, call: &'static str) -> Error {
    match e {
        wit::EnvError::BadConfig(m) => Error::BadConfig(m),
        wit::EnvError::InvalidState(m) => Error::InvalidState(m),
        wit::EnvError::Failed(message) => Error::Failed { call, message },
    }
}
