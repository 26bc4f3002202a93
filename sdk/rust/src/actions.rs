//! Splitting an `<answer>` into discrete actions.

/// How an environment reads actions out of an answer.
#[derive(Clone, Debug)]
pub struct ActionSpec {
    /// The action vocabulary, in the spelling shown to the agent.
    pub names: Vec<String>,
    /// What separates actions, e.g. `,` (VAGEN) or `||` (RAGEN).
    pub separator: String,
    /// Actions beyond this many are ignored.
    pub max_per_turn: usize,
    /// Match names regardless of case (`left` = `Left`).
    pub ignore_case: bool,
    /// VAGEN stops at the first unknown action; RAGEN skips unknowns and goes on.
    pub stop_at_invalid: bool,
    /// Answers longer than this (in bytes) are refused before they are split: a model that
    /// rambles, or a fuzzer's megabyte, costs one length check, not a split of every piece.
    pub max_answer_len: usize,
}

/// [`ActionSpec::max_answer_len`]'s default: far above any list of action names.
pub const MAX_ANSWER_LEN: usize = 1024;

impl ActionSpec {
    /// Names matched ignoring case, stopping at the first invalid one, answers capped at [`MAX_ANSWER_LEN`] bytes.
    pub fn new(names: &[&str], separator: &str, max_per_turn: usize) -> Self {
        Self {
            names: names.iter().map(|s| s.to_string()).collect(),
            separator: separator.to_string(),
            max_per_turn,
            ignore_case: true,
            stop_at_invalid: true,
            max_answer_len: MAX_ANSWER_LEN,
        }
    }

    /// Splits on the separator, trims, drops empty pieces, keeps at most
    /// `max_per_turn` pieces, then maps each piece to its index in `names`. An answer over
    /// `max_answer_len` is one invalid piece that says so (see [`too_long`]).
    pub fn parse(&self, answer: &str) -> ParsedActions {
        let mut out = ParsedActions::default();
        if answer.len() > self.max_answer_len {
            out.invalid.push(too_long(answer.len(), self.max_answer_len));
            return out;
        }
        let pieces: Vec<&str> = if self.separator.is_empty() {
            vec![answer.trim()]
        } else {
            answer.split(self.separator.as_str()).map(str::trim).collect()
        };
        let mut pieces = pieces.into_iter().filter(|p| !p.is_empty());
        for piece in pieces.by_ref().take(self.max_per_turn) {
            match self.lookup(piece) {
                Some(i) => out.actions.push(i),
                None => {
                    out.invalid.push(piece.to_string());
                    if self.stop_at_invalid {
                        break;
                    }
                }
            }
        }
        out.ignored = pieces.count();
        out
    }

    fn lookup(&self, piece: &str) -> Option<usize> {
        self.names.iter().position(|n| if self.ignore_case { n.eq_ignore_ascii_case(piece) } else { n == piece })
    }

    /// Joins action indices back into an answer string.
    pub fn join(&self, actions: &[usize]) -> String {
        let sep = if self.separator == "," { ", ".to_string() } else { format!(" {} ", self.separator) };
        actions.iter().map(|&i| self.names[i].as_str()).collect::<Vec<_>>().join(&sep)
    }
}

/// What stands for an over-long answer among the invalid pieces (the feedback echoes it).
pub fn too_long(len: usize, max: usize) -> String {
    format!("(an answer of {len} bytes; at most {max} are read)")
}

/// The result of [`ActionSpec::parse`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedActions {
    /// Indices into `ActionSpec::names`, in answer order.
    pub actions: Vec<usize>,
    /// Pieces that named no action.
    pub invalid: Vec<String>,
    /// Pieces past `max_per_turn`, or after an invalid one when stopping there.
    pub ignored: usize,
}

impl ParsedActions {
    /// Every piece was a known action.
    pub fn all_valid(&self) -> bool {
        self.invalid.is_empty() && !self.actions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_over_long_answer_is_refused_before_it_is_split() {
        let mut s = spec();
        s.max_answer_len = 10;
        let p = s.parse("Left, Left, Left");
        assert_eq!(p.actions, Vec::<usize>::new());
        assert_eq!(p.invalid, vec![too_long(16, 10)]);
        assert_eq!(s.parse("Left, Left").actions.len(), 2, "at the cap it is read");
    }

    fn spec() -> ActionSpec {
        ActionSpec::new(&["Left", "Down", "Right", "Up"], ",", 3)
    }

    #[test]
    fn splits_trims_and_ignores_case() {
        let p = spec().parse(" left ,DOWN,, Right ");
        assert_eq!(p.actions, vec![0, 1, 2]);
        assert!(p.all_valid());
    }

    #[test]
    fn caps_per_turn_and_stops_at_invalid() {
        let p = spec().parse("Up, Up, Up, Up, Up");
        assert_eq!((p.actions.len(), p.ignored), (3, 2));
        let p = spec().parse("Up, jump, Left");
        assert_eq!((p.actions, p.invalid, p.ignored), (vec![3], vec!["jump".to_string()], 1));
        let mut skip = spec();
        skip.stop_at_invalid = false;
        assert_eq!(skip.parse("Up, jump, Left").actions, vec![3, 0]);
    }

    #[test]
    fn hostile_answers_do_not_panic() {
        for a in ["", ",,,", "\u{0}\u{ffff}", &"Left,".repeat(100_000), "ä,ö"] {
            let p = spec().parse(a);
            assert!(p.actions.len() <= 3);
        }
        assert_eq!(spec().join(&[0, 3]), "Left, Up");
    }
}
