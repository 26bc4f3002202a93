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

    /// Ids the tokenizer can produce, added tokens included.
    #[cfg(test)]
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
