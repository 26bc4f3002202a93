//! Plain-words descriptions of grid positions, for `describe_state`.

/// Where `to` lies from `from` on a grid with y growing downwards, e.g.
/// "2 rows below and 1 column to the right of you".
pub fn relative_position(from: (usize, usize), to: (usize, usize)) -> String {
    let (dx, dy) = (to.0 as i64 - from.0 as i64, to.1 as i64 - from.1 as i64);
    let count = |n: i64, word: &str| format!("{} {word}{}", n.abs(), if n.abs() == 1 { "" } else { "s" });
    let vertical = match dy {
        0 => None,
        d if d < 0 => Some(format!("{} above", count(d, "row"))),
        d => Some(format!("{} below", count(d, "row"))),
    };
    let horizontal = match dx {
        0 => None,
        d if d < 0 => Some(format!("{} to the left", count(d, "column"))),
        d => Some(format!("{} to the right", count(d, "column"))),
    };
    match (vertical, horizontal) {
        (None, None) => "where you are".into(),
        (Some(v), None) => format!("{v} you (same column)"),
        (None, Some(h)) => format!("{h} of you (same row)"),
        (Some(v), Some(h)) => format!("{v} and {h} of you"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_all_directions() {
        assert_eq!(relative_position((1, 1), (1, 0)), "1 row above you (same column)");
        assert_eq!(relative_position((1, 1), (3, 1)), "2 columns to the right of you (same row)");
        assert_eq!(relative_position((1, 1), (2, 3)), "2 rows below and 1 column to the right of you");
        assert_eq!(relative_position((2, 2), (2, 2)), "where you are");
    }
}

/// What happened in a turn, in the words the grid games use:
/// "Executed actions: Up, Left. 1 of them hit a wall. Invalid action "jump": valid actions are …".
pub fn turn_feedback(
    executed: &[&str],
    blocked: u32,
    blocked_by: &str,
    invalid: Option<&str>,
    valid: &[&str],
) -> String {
    let mut s = if executed.is_empty() {
        "No valid action was executed.".to_string()
    } else {
        format!("Executed actions: {}.", executed.join(", "))
    };
    if blocked > 0 {
        s.push_str(&format!(" {blocked} of them {blocked_by}."));
    }
    if let Some(bad) = invalid {
        s.push_str(&format!(" Invalid action {:?}: valid actions are {}.", echo(bad), valid.join(", ")));
    }
    s
}

/// A piece of the agent's answer, safe to show back in an observation: at most 64
/// characters, and `<image>` defused, because the host counts those markers against the
/// images (an echoed marker is a malformed observation; a megabyte echo breaks the text cap).
pub fn echo(answer: &str) -> String {
    const MAX: usize = 64;
    let mut out: String = answer.chars().take(MAX).collect();
    if answer.chars().nth(MAX).is_some() {
        out.push('…');
    }
    out.replace("<image>", "[image]")
}

#[cfg(test)]
mod feedback_tests {
    use super::*;

    #[test]
    fn says_what_happened() {
        assert_eq!(
            turn_feedback(&["Up", "Left"], 1, "hit a wall", Some("jump"), &["Up", "Left"]),
            "Executed actions: Up, Left. 1 of them hit a wall. Invalid action \"jump\": valid actions are Up, Left."
        );
        assert_eq!(turn_feedback(&[], 0, "", None, &[]), "No valid action was executed.");
        let echoed = turn_feedback(&[], 0, "", Some(&"<image>".repeat(100_000)), &["Up"]);
        assert!(!echoed.contains("<image>") && echoed.len() < 400, "{echoed}");
    }
}
