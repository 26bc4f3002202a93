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
