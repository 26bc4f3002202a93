//! Everything a plugin is allowed, in user units, in one struct a config file can hold.
//! The CLI's `--limit key=value` flags and a training config's `[sandbox]` table both go
//! through [`Limits::with_values`], so they take the same keys and refuse the same values.

use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Wall-clock budget of one call into a plugin (`reset`, `step`, `oracle`, ...), in
    /// milliseconds. Enforced by epoch interruption: the call ends as a timeout error
    /// at most two ticks (20 ms) after the budget, never before it.
    pub call_timeout_ms: u64,
    /// Budget for bringing up an instance (instantiation plus `create`), in milliseconds.
    /// Interpreted guests (Python, JavaScript) initialise far more slowly than compiled ones.
    pub create_timeout_ms: u64,
    /// Linear memory one instance may hold in total, in MiB.
    pub memory_mib: u64,
    /// Linear memory all instances of one runtime may hold together, in MiB: a run's
    /// groups × group_size instances share it, so many instances cannot take the host's
    /// memory even when each stays within `memory_mib`.
    pub total_memory_mib: u64,
    /// Fuel (roughly, WebAssembly instructions) per call, in millions; `None` turns fuel
    /// metering off. Deterministic, unlike the wall-clock budget, but costs 10–20 %.
    pub fuel_millions_per_call: Option<u64>,
    /// Bytes of stdout and of stderr kept per instance; the rest is dropped silently.
    pub output_bytes: usize,
    /// Largest observation text, in bytes.
    pub max_text_bytes: usize,
    /// Longest answer `step` receives, in bytes: a longer one reaches the plugin cut to
    /// this (at a character boundary), which every SDK's action parser then refuses as
    /// over its own cap. A model's answer is a few KiB; a megabyte would only test the
    /// guest's allocator (a JavaScript guest's heap grows to 128 MiB on them).
    pub max_answer_bytes: usize,
    /// Most images in one observation.
    pub max_images: usize,
    /// Largest image, in pixels (width × height).
    pub max_image_pixels: u64,
    /// Most metrics in one step result.
    pub max_metrics: usize,
    /// Observation text and image bytes one episode may produce in all, in MiB (each step
    /// is also held to `max_text_bytes` and `max_image_pixels`): what a never-ending episode
    /// of large observations can make the host hold.
    pub max_episode_mib: u64,
    /// Largest reward magnitude one step may report; beyond it the step is malformed (its
    /// episode fails, naming the value), so sums over an episode stay finite in f32.
    pub max_abs_reward: f64,
    /// Most turns the host plays in one episode, whatever the plugin's
    /// `default-max-turns` or a run's setting says (Gymnasium's `TimeLimit`, on the
    /// host's side): every loop over turns, answers and replays is bounded by it.
    pub max_turns: u32,
    /// Calls a reward component may make to the judge within one `score` call; one more
    /// traps the call (the judge answers a batch of requests at once).
    pub max_judge_calls: u32,
    /// Judge time credited back to one `score` call's deadline, at most: the time really
    /// spent in the host's judge, up to this.
    pub judge_credit_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            call_timeout_ms: 2_000,
            create_timeout_ms: 20_000,
            memory_mib: 256,
            total_memory_mib: 8 * 1024,
            fuel_millions_per_call: None,
            output_bytes: 64 * 1024,
            max_text_bytes: 1 << 20,
            max_answer_bytes: 64 * 1024,
            max_images: 16,
            max_image_pixels: 4096 * 4096,
            max_metrics: 256,
            max_episode_mib: 64,
            max_abs_reward: 1e6,
            max_turns: 1_000,
            max_judge_calls: 8,
            judge_credit_ms: 300_000,
        }
    }
}

/// A limit that cannot be set: its key and why. The caller names where it was set
/// (`--limit`, the `[sandbox]` table).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct LimitError {
    pub key: String,
    pub message: String,
}

impl Limits {
    /// The defaults with each `(key, value)` put in its place (keys are the field names).
    /// Refused, naming the key: an unknown key (listing the known ones), a value of the
    /// wrong type, and what [`Limits::validate`] refuses.
    pub fn with_values<'a>(
        values: impl IntoIterator<Item = (&'a str, serde_json::Value)>,
    ) -> Result<Limits, LimitError> {
        let mut all = serde_json::to_value(Limits::default()).expect("Limits serialises");
        let fields = all.as_object_mut().expect("Limits serialises to an object");
        for (key, value) in values {
            if !fields.contains_key(key) {
                let known: Vec<&str> = fields.keys().map(String::as_str).collect();
                let message = format!("no such limit (known: {})", known.join(", "));
                return Err(LimitError { key: key.to_string(), message });
            }
            // Read alone first (every other field defaulted), so a wrong type is blamed on
            // this key rather than on the struct.
            let alone = serde_json::Map::from_iter([(key.to_string(), value.clone())]);
            serde_json::from_value::<Limits>(serde_json::Value::Object(alone))
                .map_err(|e| LimitError { key: key.to_string(), message: e.to_string() })?;
            fields.insert(key.to_string(), value);
        }
        let limits: Limits = serde_json::from_value(all).expect("every value was read on its own");
        limits.validate()?;
        Ok(limits)
    }

    /// Refuses values under which no plugin could run: a zero deadline or memory cap (every
    /// call would fail at once), zero fuel (likewise: leave it unset to turn metering off),
    /// and a zero text cap (every observation carries text, if only its image markers).
    /// The other caps may be 0: that forbids images, metrics or output, which an env may
    /// legitimately not have.
    pub fn validate(&self) -> Result<(), LimitError> {
        let refuse = |key: &str, message: &str| Err(LimitError { key: key.into(), message: message.into() });
        if self.call_timeout_ms == 0 {
            return refuse("call_timeout_ms", "0 ms would time out every call; give a deadline of at least 1");
        }
        if self.create_timeout_ms == 0 {
            return refuse("create_timeout_ms", "0 ms would time out every instance; give a deadline of at least 1");
        }
        if self.memory_mib == 0 {
            return refuse("memory_mib", "0 MiB leaves a plugin no memory to start in");
        }
        if self.total_memory_mib < self.memory_mib {
            return refuse("total_memory_mib", "is below memory_mib: not even one instance could use its share");
        }
        if self.fuel_millions_per_call == Some(0) {
            return refuse(
                "fuel_millions_per_call",
                "0 would stop every call at once; leave it unset to turn fuel off",
            );
        }
        if self.max_text_bytes == 0 {
            return refuse("max_text_bytes", "0 would refuse every observation (each carries text)");
        }
        if !(self.max_abs_reward.is_finite() && self.max_abs_reward > 0.0) {
            return refuse("max_abs_reward", "must be a positive finite number");
        }
        if self.max_turns == 0 {
            return refuse("max_turns", "0 would end every episode before its first step");
        }
        Ok(())
    }

    /// `answer` as `step` receives it: cut to `max_answer_bytes` at a character boundary.
    pub fn cut_answer<'a>(&self, answer: &'a str) -> &'a str {
        if answer.len() <= self.max_answer_bytes {
            return answer;
        }
        let end = (0..=self.max_answer_bytes).rev().find(|&i| answer.is_char_boundary(i)).unwrap_or(0);
        &answer[..end]
    }

    pub fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.call_timeout_ms)
    }

    pub fn judge_credit(&self) -> Duration {
        Duration::from_millis(self.judge_credit_ms)
    }

    pub fn create_timeout(&self) -> Duration {
        Duration::from_millis(self.create_timeout_ms)
    }

    pub fn memory_bytes(&self) -> usize {
        (self.memory_mib as usize).saturating_mul(1 << 20)
    }

    pub fn total_memory_bytes(&self) -> usize {
        (self.total_memory_mib as usize).saturating_mul(1 << 20)
    }

    pub fn fuel_per_call(&self) -> Option<u64> {
        self.fuel_millions_per_call.map(|m| m.saturating_mul(1_000_000))
    }
}

#[cfg(test)]
mod tests {
    use super::Limits;
    use serde_json::json;

    #[test]
    fn values_replace_defaults_and_bad_ones_are_refused_naming_their_key() {
        let l = Limits::with_values([("call_timeout_ms", json!(50)), ("fuel_millions_per_call", json!(7))]).unwrap();
        assert_eq!(l, Limits { call_timeout_ms: 50, fuel_millions_per_call: Some(7), ..Limits::default() });
        assert_eq!(Limits::with_values([]).unwrap(), Limits::default());
        for (key, value, needle) in [
            ("call_timeout_ms", json!(0), "0 ms"),
            ("create_timeout_ms", json!(0), "0 ms"),
            ("memory_mib", json!(0), "0 MiB"),
            ("fuel_millions_per_call", json!(0), "unset"),
            ("max_text_bytes", json!(0), "every observation"),
            ("max_abs_reward", json!(-1.0), "positive finite"),
            ("max_turns", json!(0), "first step"),
            ("memory_mib", json!(-1), "invalid value"),
            ("call_timeout_ms", json!("fast"), "invalid type"),
            ("call_timeout", json!(50), "no such limit (known: call_timeout_ms, create_timeout_ms"),
        ] {
            let err = Limits::with_values([(key, value)]).unwrap_err();
            assert_eq!(err.key, key);
            assert!(err.to_string().starts_with(&format!("{key}: ")) && err.message.contains(needle), "{err}");
        }
        // The other caps may be 0.
        assert_eq!(Limits::with_values([("max_images", json!(0))]).unwrap().max_images, 0);
    }

    #[test]
    fn an_answer_over_the_cap_is_cut_at_a_character_boundary() {
        let l = Limits { max_answer_bytes: 4, ..Limits::default() };
        assert_eq!(l.cut_answer("Left"), "Left");
        assert_eq!(l.cut_answer("Left, Up"), "Left");
        assert_eq!(l.cut_answer("abcé"), "abc", "é is two bytes: cut before it, not inside");
    }
}
