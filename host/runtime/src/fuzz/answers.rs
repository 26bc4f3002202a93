//! Answers a model might write, and some no model should: the fuzzer's input generator.

use rand_chacha::ChaCha8Rng;
use rand_core::Rng;

pub(crate) struct AnswerGen {
    names: Vec<String>,
    separator: String,
    max_per_turn: usize,
    /// The oracle's answers from a few seeds: for a free-form env (SVG, equations) the only
    /// source of answers that get past its parser, so mutations of them reach its deep code;
    /// for actions with arguments (`pick(62,-55,20)`) the only source of ones that run.
    corpus: Vec<String>,
}

const TAGS: [&str; 6] = ["<answer>", "</answer>", "<think>", "</think>", "<observation>", "<image>"];
const SEPARATORS: [&str; 6] = [",", "||", ";", " ", "\n", ", ,"];

impl AnswerGen {
    pub(crate) fn new(names: &[String], separator: &str, max_per_turn: u32, corpus: Vec<String>) -> Self {
        Self {
            names: names.to_vec(),
            separator: separator.to_string(),
            max_per_turn: max_per_turn.max(1) as usize,
            corpus,
        }
    }

    pub(crate) fn next(&self, rng: &mut ChaCha8Rng) -> String {
        let pick = |rng: &mut ChaCha8Rng, n: usize| (rng.next_u64() % n as u64) as usize;
        let kind = pick(rng, 100);
        match kind {
            // Actions from the oracle, whole or mutated: where names alone are not actions
            // (they take arguments), these are the answers that reach the env's deep code.
            0..=24 if !self.names.is_empty() && !self.corpus.is_empty() => {
                let base = &self.corpus[pick(rng, self.corpus.len())];
                mutate(base, rng)
            }
            // Valid combinations, the common case, so episodes get deep.
            0..=49 if !self.names.is_empty() => {
                let k = 1 + pick(rng, self.max_per_turn + 1);
                let acts: Vec<&str> = (0..k).map(|_| self.names[pick(rng, self.names.len())].as_str()).collect();
                acts.join(&format!("{} ", self.separator))
            }
            // Free-form envs: the oracle's answers, whole or mutated.
            0..=64 if self.names.is_empty() && !self.corpus.is_empty() => {
                let base = &self.corpus[pick(rng, self.corpus.len())];
                mutate(base, rng)
            }
            // Near misses: case, spacing, other separators, truncation.
            50..=64 if !self.names.is_empty() => {
                let name = &self.names[pick(rng, self.names.len())];
                match pick(rng, 5) {
                    0 => name.to_uppercase(),
                    1 => format!("  {name}\t"),
                    2 => format!("{name}{}{name}", SEPARATORS[pick(rng, SEPARATORS.len())]),
                    3 => name.chars().take(name.chars().count().saturating_sub(1)).collect(),
                    _ => format!("{name}{}", self.separator.repeat(1 + pick(rng, 4))),
                }
            }
            65..=74 => {
                let n = 1 + pick(rng, 64);
                random_unicode(rng, n)
            }
            75..=79 => String::new(),
            80..=84 => {
                let depth = 1 + pick(rng, 2000);
                let tag = TAGS[pick(rng, TAGS.len())];
                format!("{}x{}", tag.repeat(depth), tag.replace('<', "</").repeat(depth))
            }
            85..=87 => {
                // Megabyte-long: a valid piece repeated, or one huge token.
                let piece = self.names.first().map(|n| format!("{n}{}", self.separator)).unwrap_or_else(|| "9+".into());
                piece.repeat((1 << 20) / piece.len().max(1))
            }
            88..=92 => format!("{}", rng.next_u64() as i64),
            _ => (0..1 + pick(rng, 40)).map(|_| ['(', ')', '+', '-', '*', '/', '0', '9', ' '][pick(rng, 9)]).collect(),
        }
    }
}

/// `base` as is, cut short, with a piece repeated, with a number pushed to an extreme, with
/// bytes dropped, or wrapped in itself.
fn mutate(base: &str, rng: &mut ChaCha8Rng) -> String {
    let pick = |rng: &mut ChaCha8Rng, n: usize| (rng.next_u64() % n.max(1) as u64) as usize;
    let at = |rng: &mut ChaCha8Rng| base.floor_char_boundary(pick(rng, base.len() + 1));
    match pick(rng, 7) {
        0 => base.to_string(),
        1 => base[..at(rng)].to_string(),
        2 => {
            let (a, b) = (at(rng), at(rng));
            let (a, b) = (a.min(b), a.max(b));
            let times = 1 + pick(rng, 64);
            format!("{}{}{}", &base[..b], base[a..b].repeat(times), &base[b..])
        }
        3 => {
            // The first digit run from a random point becomes an extreme or degenerate number.
            let start = at(rng);
            let Some(d) = base[start..].find(|c: char| c.is_ascii_digit()).map(|d| start + d) else {
                return base.to_string();
            };
            let end = base[d..].find(|c: char| !c.is_ascii_digit() && c != '.').map_or(base.len(), |e| d + e);
            let extreme = ["1e38", "1e309", "-0", "NaN", "99999999999999999999", "0.0000000001", "-1e9"][pick(rng, 7)];
            format!("{}{extreme}{}", &base[..d], &base[end..])
        }
        4 => {
            let mut s = base.to_string();
            for _ in 0..1 + pick(rng, 8) {
                let i = s.floor_char_boundary(pick(rng, s.len()));
                if i < s.len() {
                    s.remove(i);
                }
            }
            s
        }
        5 => {
            let (a, b) = (at(rng), at(rng));
            let (a, b) = (a.min(b), a.max(b));
            format!("{}{base}{}", &base[..a], &base[b..])
        }
        _ => {
            let other: String = base.chars().rev().collect();
            format!("{base}{other}")
        }
    }
}

fn random_unicode(rng: &mut ChaCha8Rng, n: usize) -> String {
    (0..n)
        .filter_map(|_| {
            let cp = match rng.next_u64() % 4 {
                0 => rng.next_u64() % 0x80,
                1 => rng.next_u64() % 0x800,
                2 => rng.next_u64() % 0x10000,
                _ => rng.next_u64() % 0x110000,
            } as u32;
            char::from_u32(cp)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::SeedableRng;

    #[test]
    fn free_form_answers_come_from_the_oracle_whole_cut_and_pushed_to_extremes() {
        let base = "<svg viewBox=\"0 0 48 48\"><circle cx=\"24\" cy=\"24\" r=\"20\"/></svg>";
        let answer_gen = AnswerGen::new(&[], ",", 1, vec![base.to_string()]);
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let answers: Vec<String> = (0..400).map(|_| answer_gen.next(&mut rng)).collect();
        assert!(answers.iter().any(|a| a == base));
        assert!(answers.iter().any(|a| a.len() < base.len() && base.starts_with(a.as_str())));
        assert!(answers.iter().any(|a| ["1e38", "1e309", "NaN", "-1e9"].iter().any(|x| a.contains(x))));
        assert!(answers.iter().any(|a| a.len() > 2 * base.len()));
        let derived = answers.iter().filter(|a| a.contains("<svg") || a.contains("circle")).count();
        assert!(derived > 200, "only {derived} of 400 answers came from the oracle");
        let plain = AnswerGen::new(&[], ",", 1, Vec::new());
        assert!((0..100).all(|_| !plain.next(&mut rng).contains("<svg")));
    }

    #[test]
    fn actions_with_arguments_come_from_the_oracle_too() {
        let names = ["pick".to_string(), "place".to_string()];
        let base = "pick(62,-55,20)|place(75,33,50)";
        let answer_gen = AnswerGen::new(&names, "|", 2, vec![base.to_string()]);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let answers: Vec<String> = (0..400).map(|_| answer_gen.next(&mut rng)).collect();
        assert!(answers.iter().any(|a| a == base));
        let derived = answers.iter().filter(|a| a.contains("(6") || a.contains("(7")).count();
        assert!((60..=160).contains(&derived), "{derived} of 400 answers came from the oracle");
        // Bare names still come: the other share of the answers.
        assert!(answers.iter().any(|a| a == "pick" || a == "place"));
    }
}
