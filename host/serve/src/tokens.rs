//! Tokens as OpenAI shows them: each token's raw bytes (part of a character, for a
//! byte-level vocabulary), and an answer cut inside a character said to be so.

use vagen_model::{FinishReason, Generation, Tokenizer};

/// A token's text for `logprobs`: its characters, or `bytes:\xNN…` when its bytes are not
/// whole characters (OpenAI's spelling), and the bytes themselves.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TokenText {
    pub text: String,
    pub bytes: Vec<u8>,
}

pub(crate) fn token_text(tokenizer: &Tokenizer, id: u32) -> TokenText {
    let bytes = tokenizer.token_bytes(id).unwrap_or_default();
    let text = match std::str::from_utf8(&bytes) {
        Ok(s) => s.to_string(),
        Err(_) => "bytes:".to_string() + &bytes.iter().map(|b| format!("\\x{b:02x}")).collect::<String>(),
    };
    TokenText { text, bytes }
}

/// The answer's text, and the bytes of a character its last tokens began and did not end
/// (a length cut inside a character), which the text leaves out rather than showing U+FFFD.
pub(crate) fn answer_text(tokenizer: &Tokenizer, g: &Generation) -> (String, Option<Vec<u8>>) {
    if g.finish != FinishReason::Length {
        return (g.text.clone(), None);
    }
    let bytes: Vec<u8> = g.token_ids.iter().flat_map(|&t| tokenizer.token_bytes(t).unwrap_or_default()).collect();
    match incomplete_tail(&bytes) {
        Some(tail) if g.text.ends_with('\u{FFFD}') => {
            let text = g.text.strip_suffix('\u{FFFD}').expect("checked").to_string();
            (text, Some(tail.to_vec()))
        }
        _ => (g.text.clone(), None),
    }
}

/// The bytes at the end of `bytes` that begin a UTF-8 character and do not finish it.
fn incomplete_tail(bytes: &[u8]) -> Option<&[u8]> {
    let mut rest = bytes;
    loop {
        match std::str::from_utf8(rest) {
            Ok(_) => return None,
            Err(e) => match e.error_len() {
                None => return Some(&rest[e.valid_up_to()..]),
                Some(n) => rest = &rest[e.valid_up_to() + n..],
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unfinished_last_character_is_a_tail() {
        let han = "北".as_bytes();
        assert_eq!(incomplete_tail(b"abc"), None);
        assert_eq!(incomplete_tail(&[b'a', han[0], han[1]]), Some(&han[..2]));
        // A stray byte before whole characters is invalid, not unfinished.
        assert_eq!(incomplete_tail(&[0xff, b'a']), None);
        assert_eq!(incomplete_tail(&[0xff, han[0]]), Some(&han[..1]));
    }
}
