//! How a text answer and an OpenEnv server's JSON meet: the `[env.openenv]` table of a
//! training config, or the query of an `openenv+http://HOST:PORT?action_field=guess` URL.

use crate::Error;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Every field is optional: the defaults read the server's `/schema`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenEnvOptions {
    /// The action field that receives the answer (default: the action schema's one
    /// required field). A string field gets the text; an integer, number or boolean field
    /// gets it parsed, and an answer that does not parse is an invalid action.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_field: Option<String>,
    /// The observation field shown as the observation's text (default: `text`, else the
    /// one string field, else every field as `name: value` lines).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observation_field: Option<String>,
    /// A boolean observation field saying the episode succeeded (default: `success` when
    /// the schema has it, else success is ending with a positive reward).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub success_field: Option<String>,
    /// The system prompt (default: what the server says, else one made from `/metadata`
    /// and the action field's description).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Seconds to connect, and to wait for each reply (default 30).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<f64>,
    /// Further connection attempts when one fails, 0.2 s, 0.4 s, … apart (default 2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// Turns of an episode unless the run says otherwise (default: the server's, else 10).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
}

impl OpenEnvOptions {
    /// `self` with every field `over` sets replaced (the URL's query over the table).
    pub fn merged(self, over: OpenEnvOptions) -> Self {
        OpenEnvOptions {
            action_field: over.action_field.or(self.action_field),
            observation_field: over.observation_field.or(self.observation_field),
            success_field: over.success_field.or(self.success_field),
            system_prompt: over.system_prompt.or(self.system_prompt),
            timeout_s: over.timeout_s.or(self.timeout_s),
            retries: over.retries.or(self.retries),
            max_turns: over.max_turns.or(self.max_turns),
        }
    }

    /// Options from a URL's query pairs (`timeout_s=5&retries=0`).
    pub fn from_query<'a>(pairs: impl Iterator<Item = (String, String)> + 'a) -> Result<Self, Error> {
        let mut object = serde_json::Map::new();
        for (key, value) in pairs {
            let parsed = match key.as_str() {
                "timeout_s" | "retries" | "max_turns" => serde_json::from_str(&value)
                    .map_err(|_| Error::BadConfig(format!("openenv option {key}={value:?} is not a number")))?,
                _ => serde_json::Value::String(value),
            };
            if object.insert(key.clone(), parsed).is_some() {
                return Err(Error::BadConfig(format!("openenv option {key} is given twice")));
            }
        }
        serde_json::from_value(serde_json::Value::Object(object))
            .map_err(|e| Error::BadConfig(format!("openenv options in the URL: {e}")))
    }

    pub(crate) fn timeout(&self) -> Result<Duration, Error> {
        let t = self.timeout_s.unwrap_or(30.0);
        if !(t.is_finite() && t > 0.0 && t <= 86_400.0) {
            return Err(Error::BadConfig(format!("openenv timeout_s = {t}: expected seconds in (0, 86400]")));
        }
        Ok(Duration::from_secs_f64(t))
    }

    pub(crate) fn retries(&self) -> u32 {
        self.retries.unwrap_or(2).min(10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(q: &str) -> Result<OpenEnvOptions, Error> {
        OpenEnvOptions::from_query(url::form_urlencoded::parse(q.as_bytes()).into_owned())
    }

    #[test]
    fn the_query_sets_options_and_names_bad_ones() {
        let o = query("action_field=guess&timeout_s=2.5&retries=0").unwrap();
        assert_eq!(o.action_field.as_deref(), Some("guess"));
        assert_eq!((o.timeout_s, o.retries), (Some(2.5), Some(0)));
        let table = OpenEnvOptions { action_field: Some("message".into()), retries: Some(4), ..Default::default() };
        let both = table.merged(o);
        assert_eq!((both.action_field.as_deref(), both.retries), (Some("guess"), Some(0)));
        for (q, needle) in [
            ("action_feild=x", "unknown field `action_feild`"),
            ("timeout_s=soon", "timeout_s=\"soon\" is not a number"),
            ("retries=1&retries=2", "retries is given twice"),
        ] {
            let err = query(q).unwrap_err().to_string();
            assert!(err.contains(needle), "{q}: {err}");
        }
        let zero = OpenEnvOptions { timeout_s: Some(0.0), ..Default::default() };
        assert!(zero.timeout().unwrap_err().to_string().contains("timeout_s = 0"));
    }
}
