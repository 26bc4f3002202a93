//! What the judge is asked, per environment: the true state (the env's own description),
//! the agent's text, and a YES/NO question about the facts that matter in that env.

use std::collections::BTreeMap;

pub const SYSTEM: &str = "You check an agent's statements about an environment against the true state. \
Answer YES or NO first, then nothing else.";

/// What must agree in each env for a description to count as matching.
fn facts(env: &str) -> &'static str {
    match env {
        "frozenlake" => "where the player is relative to the goal and which neighbouring cells are holes",
        "sokoban" => "where the player, the boxes and the targets are relative to each other",
        "navigation" => "which objects are visible and in which direction and at what distance they are",
        "svg" => "which shapes and colours the picture holds and where they are",
        _ => "the positions and states of the things the description mentions",
    }
}

/// The question for one term: `grounding` (the state before the move) or world modeling
/// (the state after it); a user template for `env` replaces the built-in one.
pub fn prompt(custom: &BTreeMap<String, String>, env: &str, grounding: bool, state: &str, text: &str) -> String {
    let what = if grounding { "observation" } else { "prediction" };
    if let Some(t) = custom.get(env) {
        return t.replace("{state}", state).replace("{text}", text).replace("{what}", what);
    }
    let (when, claim) = if grounding {
        ("before its move", "describes the current state")
    } else {
        ("after its move", "predicts the state its move leads to")
    };
    format!(
        "True state of the {env} environment {when}:\n{state}\n\nThe agent's {what}, which {claim}:\n{text}\n\n\
         Does the agent's {what} agree with the true state about {}? Contradictions count as NO; \
         leaving out details does not. Answer YES or NO.",
        facts(env)
    )
}
