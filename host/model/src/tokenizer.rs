use crate::{Error, Result};

/// A Hugging Face `tokenizer.json`, with the chat special tokens it defines.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

impl Tokenizer {
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| Error::Tokenizer(e.to_string()))?;
        Ok(Tokenizer { inner })
    }

    /// Token ids of `text`. Special tokens written in the text (`<|im_start|>`) become their
    /// ids, as in transformers; no BOS/EOS is added: the chat template writes those.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.inner.encode_fast(text, false).map_err(|e| Error::Tokenizer(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Text of `ids`, special tokens included. Invalid UTF-8 (a token sequence cut inside a
    /// character) decodes to U+FFFD, never an error.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner.decode(ids, false).map_err(|e| Error::Tokenizer(e.to_string()))
    }

    /// Adds special tokens (kept whole, never split) after the existing ids.
    pub fn add_special_tokens(&mut self, tokens: &[&str]) {
        let added: Vec<tokenizers::AddedToken> =
            tokens.iter().map(|t| tokenizers::AddedToken::from(t.to_string(), true)).collect();
        self.inner.add_special_tokens(&added);
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The bytes token `id` stands for, which may be part of a character (OpenAI's
    /// `logprobs.bytes`): an added token's content, a byte-level BPE token's characters
    /// mapped back to their bytes, else its decoded text. `None` for an id past the vocabulary.
    pub fn token_bytes(&self, id: u32) -> Option<Vec<u8>> {
        if let Some(added) = self.inner.get_added_tokens_decoder().get(&id) {
            return Some(added.content.as_bytes().to_vec());
        }
        let piece = self.inner.id_to_token(id)?;
        if matches!(self.inner.get_decoder(), Some(tokenizers::DecoderWrapper::ByteLevel(_))) {
            let bytes: Option<Vec<u8>> = piece.chars().map(byte_level_byte).collect();
            if let Some(bytes) = bytes {
                return Some(bytes);
            }
        }
        self.inner.decode(&[id], false).ok().map(String::into_bytes)
    }

    /// The `tokenizers` tokenizer underneath.
    pub(crate) fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    pub(crate) fn inner_mut(&mut self) -> &mut tokenizers::Tokenizer {
        &mut self.inner
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    pub fn to_json(&self) -> Result<String> {
        self.inner.to_string(true).map_err(|e| Error::Tokenizer(e.to_string()))
    }
}

/// The byte a byte-level BPE character stands for (GPT-2's table, which the `tokenizers`
/// crate keeps private): printable Latin-1 bytes are themselves, and the other 68 bytes are
/// U+0100 onwards in byte order. Built once: token bytes are read for every streamed token.
fn byte_level_byte(c: char) -> Option<u8> {
    static TABLE: std::sync::LazyLock<[Option<u8>; 0x144]> = std::sync::LazyLock::new(|| {
        let printable = |b: u8| matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
        let mut table = [None; 0x144];
        let mut next = 0x100;
        for b in 0..=255u8 {
            if printable(b) {
                table[usize::from(b)] = Some(b);
            } else {
                table[next] = Some(b);
                next += 1;
            }
        }
        table
    });
    TABLE.get(u32::from(c) as usize).copied().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_table_covers_every_byte_once() {
        let mut seen = std::collections::HashSet::new();
        for code in 0u32..0x200 {
            if let Some(b) = char::from_u32(code).and_then(byte_level_byte) {
                assert!(seen.insert(b), "byte {b} twice");
            }
        }
        assert_eq!(seen.len(), 256);
        assert_eq!(byte_level_byte('\u{120}'), Some(b' '), "Ġ is the space");
        assert_eq!(byte_level_byte('a'), Some(b'a'));
    }

    #[test]
    fn token_bytes_join_to_the_text_even_inside_a_character() {
        let tokenizer = crate::default_model::text_tokenizer().unwrap();
        for text in ["Go left, then down.", "über — 北京 √ x", "<|im_end|>"] {
            let ids = tokenizer.encode(text).unwrap();
            let bytes: Vec<u8> = ids.iter().flat_map(|&t| tokenizer.token_bytes(t).unwrap()).collect();
            assert_eq!(bytes, text.as_bytes(), "{text:?} as {ids:?}");
        }
        assert_eq!(tokenizer.token_bytes(u32::MAX), None);
    }
}
