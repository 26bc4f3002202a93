//! What the host accepts from a plugin, whatever it is made of. A breach is a
//! `malformed` error: the plugin broke the contract.

use crate::types::IMAGE_MARKER;
use crate::{ActionSpace, Error, Limits, Manifest, Observation, StepResult};

pub(crate) fn manifest(m: &Manifest) -> Result<(), Error> {
    let fail = |detail: String| Err(Error::Malformed { call: "manifest", detail });
    if m.name.trim().is_empty() {
        return fail("empty name".into());
    }
    // Names are shown on terminals and in logs, and name files: short, with no escape
    // sequences, line breaks, or characters that reorder or hide text.
    if m.name.len() > MAX_NAME_BYTES {
        return fail(format!("name of {} bytes, over {MAX_NAME_BYTES}", m.name.len()));
    }
    if m.name.chars().any(|c| c.is_control() || crate::guest_text::is_bidi_or_invisible(c)) {
        return fail(format!("name {:?} holds control, bidi or invisible characters", crate::guest_text(&m.name)));
    }
    action_space(&ActionSpace::of(m), "manifest")?;
    if m.default_max_turns == 0 {
        return fail("default-max-turns is 0".into());
    }
    if !m.default_config.trim().is_empty() {
        match serde_json::from_str::<serde_json::Value>(&m.default_config) {
            Ok(serde_json::Value::Object(_)) => {}
            Ok(_) => return fail("default-config is not a JSON object".into()),
            Err(e) => return fail(format!("default-config: {e}")),
        }
    }
    Ok(())
}

/// A manifest name's length at most.
const MAX_NAME_BYTES: usize = 128;

/// Bounds on what an action space may declare, far beyond any real env's.
const MAX_ACTIONS_PER_TURN: u32 = 1024;
const MAX_ACTION_NAMES: usize = 4096;

/// The action fields of a manifest, or of one instance (`action-space`).
pub(crate) fn action_space(a: &ActionSpace, call: &'static str) -> Result<(), Error> {
    let fail = |detail: String| Err(Error::Malformed { call, detail });
    if a.max_actions_per_turn == 0 {
        return fail("max-actions-per-turn is 0".into());
    }
    // The host writes answers of up to this many actions (random policy, fuzzer, SFT noise).
    if a.max_actions_per_turn > MAX_ACTIONS_PER_TURN {
        return fail(format!("max-actions-per-turn {} is more than {MAX_ACTIONS_PER_TURN}", a.max_actions_per_turn));
    }
    if a.action_names.len() > MAX_ACTION_NAMES {
        return fail(format!("{} action names, more than {MAX_ACTION_NAMES}", a.action_names.len()));
    }
    if !a.action_names.is_empty() && a.action_separator.trim().is_empty() {
        return fail("discrete actions but no action separator".into());
    }
    if let Some(name) = a.action_names.iter().find(|n| n.trim().is_empty()) {
        return fail(format!("blank action name {name:?}"));
    }
    let mut names: Vec<&String> = a.action_names.iter().collect();
    names.sort();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return fail(format!("action {:?} listed twice", w[0]));
    }
    Ok(())
}

pub(crate) fn observation(o: &Observation, limits: &Limits, call: &'static str) -> Result<(), Error> {
    let fail = |detail: String| Err(Error::Malformed { call, detail });
    if o.text.len() > limits.max_text_bytes {
        return fail(format!("text of {} bytes (limit {})", o.text.len(), limits.max_text_bytes));
    }
    if o.images.len() > limits.max_images {
        return fail(format!("{} images (limit {})", o.images.len(), limits.max_images));
    }
    let markers = o.text.matches(IMAGE_MARKER).count();
    if markers != o.images.len() {
        return fail(format!("{markers} {IMAGE_MARKER} markers for {} images", o.images.len()));
    }
    for (i, img) in o.images.iter().enumerate() {
        let pixels = u64::from(img.width) * u64::from(img.height);
        if pixels == 0 || pixels > limits.max_image_pixels {
            return fail(format!(
                "image {i} is {}x{} (limit {} pixels)",
                img.width, img.height, limits.max_image_pixels
            ));
        }
        if img.rgb.len() as u64 != pixels * 3 {
            return fail(format!(
                "image {i} is {}x{} but carries {} bytes, not {}",
                img.width,
                img.height,
                img.rgb.len(),
                pixels * 3
            ));
        }
    }
    Ok(())
}

/// The observation that starts an episode; `episode_bytes` (the running total that
/// `max_episode_mib` bounds) starts from it.
pub(crate) fn reset(o: &Observation, limits: &Limits, episode_bytes: &mut u64) -> Result<(), Error> {
    *episode_bytes = 0;
    observation(o, limits, "reset")?;
    add_episode_bytes(episode_bytes, o, limits, "reset")
}

/// A step result, from an instance reading actions as `actions` says, its observation
/// added to the episode's running total.
pub(crate) fn step(
    s: &StepResult,
    limits: &Limits,
    actions: &ActionSpace,
    episode_bytes: &mut u64,
) -> Result<(), Error> {
    let fail = |detail: String| Err(Error::Malformed { call: "step", detail });
    if !s.reward.is_finite() {
        return fail(format!("reward {} is not finite", s.reward));
    }
    if s.reward.abs() > limits.max_abs_reward {
        return fail(format!("reward {:e} is beyond ±{:e} (max_abs_reward)", s.reward, limits.max_abs_reward));
    }
    if s.valid_actions > actions.max_actions_per_turn {
        return fail(format!(
            "valid-actions {} is more than an answer may carry ({})",
            s.valid_actions, actions.max_actions_per_turn
        ));
    }
    if s.effective_actions > s.valid_actions {
        return fail(format!(
            "effective-actions {} is more than valid-actions {}",
            s.effective_actions, s.valid_actions
        ));
    }
    if s.metrics.len() > limits.max_metrics {
        return fail(format!("{} metrics (limit {})", s.metrics.len(), limits.max_metrics));
    }
    if let Some(m) = s.metrics.iter().find(|m| !m.value.is_finite()) {
        return fail(format!("metric {:?} is {}", m.name, m.value));
    }
    observation(&s.observation, limits, "step")?;
    add_episode_bytes(episode_bytes, &s.observation, limits, "step")
}

/// Adds `o`'s bytes to an episode's running total and refuses the observation that takes
/// it past `max_episode_mib`.
fn add_episode_bytes(total: &mut u64, o: &Observation, limits: &Limits, call: &'static str) -> Result<(), Error> {
    let bytes = o.text.len() as u64 + o.images.iter().map(|i| i.rgb.len() as u64).sum::<u64>();
    *total = total.saturating_add(bytes);
    if *total > limits.max_episode_mib.saturating_mul(1 << 20) {
        return Err(Error::Malformed {
            call,
            detail: format!(
                "the episode's observations reached {} MiB (max_episode_mib {})",
                *total >> 20,
                limits.max_episode_mib
            ),
        });
    }
    Ok(())
}

pub(crate) fn text(t: &str, limits: &Limits, call: &'static str) -> Result<(), Error> {
    if t.len() > limits.max_text_bytes {
        return Err(Error::Malformed {
            call,
            detail: format!("{} bytes of text (limit {})", t.len(), limits.max_text_bytes),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 41: a name of 2.7 MB of bidi and zero-width characters was printed raw by
    /// `inspect` and `run`.
    #[test]
    fn a_manifest_name_must_be_short_and_visible() {
        let named = |name: String| Manifest { name, action_names: vec!["Up".into()], ..Manifest::default() };
        assert!(manifest(&named("frozenlake".into())).is_ok());
        for (name, needle) in [
            ("\u{202e}\u{2066}".repeat(700_000), "bytes, over 128"),
            ("lake\u{202e}ekal".into(), "bidi or invisible"),
            ("lake\u{200b}".into(), "bidi or invisible"),
            ("lake\u{2060}".into(), "bidi or invisible"),
            ("lake\u{e0041}".into(), "bidi or invisible"),
            ("lake\x1b[31m".into(), "control"),
        ] {
            let err = manifest(&named(name)).unwrap_err().to_string();
            assert!(err.contains(needle), "{err}");
            assert!(!err.contains('\u{202e}') && !err.contains('\u{200b}') && err.len() < 5_000, "{err}");
        }
    }
}
