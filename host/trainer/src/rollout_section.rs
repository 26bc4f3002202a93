//! `[rollout]` of a training config: one table for users, three owners in code. How
//! episodes are played is the rollout's (`vagen_rollout::RolloutConfig`), how answers are
//! sampled the model's (`vagen_model::Sampling`), and the training sequences' budgets and
//! layout the trainer's ([`SequenceConfig`], here). Each part takes its own keys; a key
//! none takes is refused (see [`RolloutSection::unknown_keys`]).

use crate::config_error::{ConfigError, Range, in_ranges, invalid};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use vagen_model::Sampling;
use vagen_rollout::{ContextOverflow, Format, History, RewardPlacement, RolloutConfig};

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RolloutSection {
    #[serde(flatten)]
    pub episodes: RolloutConfig,
    #[serde(flatten)]
    pub sampling: Sampling,
    #[serde(flatten)]
    pub sequences: SequenceConfig,
    /// What no part took: serde's flatten cannot deny unknown fields itself, and the
    /// last flattened map sees only the keys the parts before it left.
    #[serde(flatten, skip_serializing)]
    unknown: BTreeMap<String, IgnoredAny>,
}

/// The training sequences an episode becomes, and the context window its prompts live in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SequenceConfig {
    /// Train on one sequence per turn (system prompt + that turn's observation + the
    /// sampled response: exactly what the model saw, since prompts then carry no history)
    /// instead of one per trajectory. Cheaper for small models; needs a critic-free
    /// estimator; each turn's advantage comes from its whole episode (the estimator runs
    /// over episodes, one position per turn).
    pub per_turn: bool,
    /// Longest training sequence; whole turns past it are dropped from the end. Also the
    /// rollout's context window (with the model's own as the ceiling): a turn's answer is
    /// capped at what its prompt leaves, and an episode whose prompt leaves nothing ends
    /// there (`train/out_of_context_trajectories`), trained on as far as it went.
    pub max_sequence_tokens: usize,
    /// A prompt that leaves too little of the context window for an answer: `end`
    /// (default) its episode; `drop-oldest`: the prompt leaves out its oldest whole turns
    /// until a full `max_new_tokens` answer fits, and the episode goes on (with one
    /// sequence per trajectory, the update still lays out every turn, as with `history`).
    pub context_overflow: ContextOverflow,
    /// Image tokens one sequence (a prompt, a training sequence) may hold; 0: no limit but
    /// `max_sequence_tokens`, which counts them too. A first turn past it is an error; a
    /// later prompt past it ends its episode as one past the window does, and a training
    /// sequence drops the turns past it from its end.
    pub max_image_tokens: usize,
    /// Pixels an image is resized to at most before a VL model sees it (transformers'
    /// `max_pixels`; VAGEN's processors cap it); 0: the model's processor's own.
    pub max_image_pixels: usize,
    /// Where rewards go in a sequence: each turn's on its last token, or the total on the
    /// last.
    pub rewards: RewardPlacement,
    /// Take the old log-probs from generation (the full tempered distribution, as the
    /// training forward computes them) instead of a second no-grad forward over the batch:
    /// about a fifth of a step saved. Off, the forward runs and `rollout/logprob_diff_*`
    /// report how far generation and training disagree (≈1e-7 on CPU in f32). `auto`
    /// (default): reused in f32 (see `TrainConfig::reuses_logprobs`), recomputed in bf16 and
    /// f16, where generation's kernels and batch shapes round differently from the training
    /// forward's (0.07 nats measured), and wherever π_old must differ from the sampler's.
    pub reuse_logprobs: ReuseLogprobs,
}

/// `rollout.reuse_logprobs`: `true`, `false` or `"auto"` (see [`SequenceConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReuseLogprobs {
    #[default]
    Auto,
    Always,
    Never,
}

impl ReuseLogprobs {
    /// Whether generation's log-probs stand for the old ones, `auto` deciding by what
    /// `generation_matches_training` says: generation computes what the training forward
    /// does up to rounding (f32; the weights generation uses are the ones being trained, not
    /// a stale or merged copy; no correction that needs the two apart).
    pub fn reuses(self, generation_matches_training: bool) -> bool {
        match self {
            ReuseLogprobs::Always => true,
            ReuseLogprobs::Never => false,
            ReuseLogprobs::Auto => generation_matches_training,
        }
    }
}

impl Serialize for ReuseLogprobs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ReuseLogprobs::Auto => s.serialize_str("auto"),
            ReuseLogprobs::Always => s.serialize_bool(true),
            ReuseLogprobs::Never => s.serialize_bool(false),
        }
    }
}

impl<'de> Deserialize<'de> for ReuseLogprobs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Written;
        impl serde::de::Visitor<'_> for Written {
            type Value = ReuseLogprobs;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("true, false or \"auto\"")
            }
            fn visit_bool<E>(self, b: bool) -> Result<ReuseLogprobs, E> {
                Ok(if b { ReuseLogprobs::Always } else { ReuseLogprobs::Never })
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<ReuseLogprobs, E> {
                match s {
                    "auto" => Ok(ReuseLogprobs::Auto),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(s), &self)),
                }
            }
        }
        d.deserialize_any(Written)
    }
}

impl Default for SequenceConfig {
    fn default() -> Self {
        SequenceConfig {
            per_turn: false,
            max_sequence_tokens: 4096,
            context_overflow: ContextOverflow::End,
            max_image_tokens: 0,
            max_image_pixels: 0,
            rewards: RewardPlacement::PerTurn,
            reuse_logprobs: ReuseLogprobs::Auto,
        }
    }
}

impl RolloutSection {
    /// The keys of `[rollout]` that no part reads, as `rollout.KEY`.
    pub fn unknown_keys(&self) -> Vec<String> {
        self.unknown.keys().map(|k| format!("rollout.{k}")).collect()
    }

    /// How the rollout plays a run's episodes: with one sequence per turn, prompts carry
    /// no history (a turn is trained on exactly what its prompt showed).
    pub fn rollout_config(&self) -> RolloutConfig {
        let history = if self.sequences.per_turn { History::Last(0) } else { self.episodes.history };
        RolloutConfig { history, ..self.episodes.clone() }
    }

    /// No key that no part takes, a format a model trains in, a prompt with an
    /// observation, and the sampling settings in range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(key) = self.unknown_keys().into_iter().next() {
            return Err(ConfigError::UnknownKey(key));
        }
        let r = &self.episodes;
        if r.format == Format::Raw {
            let why = "`raw` is `vagen-host run`'s (answers sent as written, no format reward); a model trains in a format with an <answer>";
            return invalid("rollout.format", why.into());
        }
        if !r.observation_text && !r.describe_state {
            return invalid(
                "rollout.observation_text",
                "false leaves the prompt without an observation: set rollout.describe_state = true".into(),
            );
        }
        if !(0.0..=1.0).contains(&r.explore) {
            return invalid("rollout.explore", format!("{} is not a probability", r.explore));
        }
        if self.sampling.max_new_tokens == 0 {
            return invalid("rollout.max_new_tokens", "must be at least 1".into());
        }
        use Range::*;
        in_ranges([
            ("rollout.temperature", self.sampling.temperature, NonNegative),
            ("rollout.val_temperature", self.sampling.val_temperature, NonNegative),
            ("rollout.top_p", self.sampling.top_p, Share),
            ("rollout.format_reward.bonus", r.format_reward.bonus, Scale),
            ("rollout.format_reward.penalty", r.format_reward.penalty, Scale),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_lands_in_its_part_and_the_table_round_trips() {
        let text = r#"
            format = "no-think"
            temperature = 0.7
            top_k = 5
            per_turn = true
            max_sequence_tokens = 512
            history = 2
            context_overflow = "drop-oldest"
            format_reward = { bonus = 0.0, penalty = -1.0 }
        "#;
        let section: RolloutSection = toml::from_str(text).unwrap();
        assert!(section.unknown_keys().is_empty());
        assert_eq!((section.episodes.format, section.episodes.history), (Format::NoThink, History::Last(2)));
        assert_eq!(section.episodes.format_reward.penalty, -1.0);
        assert_eq!((section.sampling.temperature, section.sampling.top_k), (0.7, 5));
        assert_eq!(section.sampling.max_new_tokens, Sampling::default().max_new_tokens);
        assert!(section.sequences.per_turn && section.sequences.max_sequence_tokens == 512);
        assert_eq!(section.sequences.context_overflow, ContextOverflow::DropOldest);
        // One sequence per turn: the rollout is asked for prompts without history.
        assert_eq!(section.rollout_config().history, History::Last(0));
        // A run folder's config.toml is this written back: read again, it is the same.
        let again: RolloutSection = toml::from_str(&toml::to_string(&section).unwrap()).unwrap();
        assert_eq!(again, section);
        let odd: RolloutSection = toml::from_str("temprature = 1.0\nformat = \"no-think\"").unwrap();
        assert_eq!(odd.unknown_keys(), ["rollout.temprature"]);
    }

    #[test]
    fn reuse_logprobs_is_a_flag_or_auto() {
        let read = |v: &str| toml::from_str::<RolloutSection>(&format!("reuse_logprobs = {v}"));
        for (v, want) in
            [("true", ReuseLogprobs::Always), ("false", ReuseLogprobs::Never), ("\"auto\"", ReuseLogprobs::Auto)]
        {
            let section = read(v).unwrap();
            assert_eq!(section.sequences.reuse_logprobs, want, "{v}");
            let again: RolloutSection = toml::from_str(&toml::to_string(&section).unwrap()).unwrap();
            assert_eq!(again, section, "{v} round-trips");
        }
        assert_eq!(RolloutSection::default().sequences.reuse_logprobs, ReuseLogprobs::Auto);
        for bad in ["\"sometimes\"", "1"] {
            let err = read(bad).unwrap_err().to_string();
            assert!(err.contains("reuse_logprobs") && err.contains("true, false or \"auto\""), "{err}");
        }
        let auto = ReuseLogprobs::Auto;
        assert_eq!([true, false].map(|m| auto.reuses(m)), [true, false]);
        assert!(ReuseLogprobs::Always.reuses(false) && !ReuseLogprobs::Never.reuses(true));
    }
}
