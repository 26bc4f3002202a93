//! The embedded model's tokenizer retrained for one environment: its byte-level BPE learnt
//! again from the env's own texts (system prompt, observations, oracle and random answers)
//! plus the built-in base corpus, so a new env's words cost a token or two, not one per
//! couple of letters. Same layout as the shipped one: 818 ids of BPE, then the chat special
//! tokens at 818–820 (and the vision tokens after them), so the embedded model's shape and
//! special ids do not change.

use crate::{Error, Result, Tokenizer};
use tokenizers::models::TrainerWrapper;
use tokenizers::models::bpe::BpeTrainerBuilder;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;

/// The corpus `assets/tokenizer.json` was trained on (`reference/make_fixtures.py`): env-style
/// text, so the few words every env shares stay whole.
const BASE_CORPUS: &str = include_str!("../assets/base_corpus.json");

/// The BPE ids before the special tokens.
const BPE_IDS: usize = 818;

/// The embedded tokenizer (`with_vision`: and its vision tokens) retrained on `texts` and
/// the base corpus. The same texts give the same tokenizer on every machine (the trainer
/// breaks ties by pair, never by hash order); no texts give the shipped one back.
pub fn tokenizer_for(texts: &[String], with_vision: bool) -> Result<Tokenizer> {
    let mut tokenizer =
        if with_vision { crate::default_model::vl_tokenizer()? } else { crate::default_model::text_tokenizer()? };
    let base: Vec<String> = serde_json::from_str(BASE_CORPUS).expect("the base corpus is a JSON list of strings");
    let mut trainer: TrainerWrapper = BpeTrainerBuilder::new()
        .vocab_size(BPE_IDS)
        .min_frequency(2)
        .show_progress(false)
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build()
        .into();
    // A chat template's texts hold the special tokens themselves: learnt as BPE words too,
    // they would sit in the vocabulary under a second id, which a saved tokenizer.json then
    // gives them on loading (ids the model never trained on). Cut out, they cannot be.
    let specials: Vec<String> = tokenizer.inner().get_added_tokens_decoder().into_values().map(|t| t.content).collect();
    let texts: Vec<String> = texts
        .iter()
        .map(|t| specials.iter().fold(t.clone(), |text, special| text.replace(special.as_str(), "\n")))
        .collect();
    let inner = tokenizer.inner_mut();
    inner
        .train(&mut trainer, base.iter().chain(&texts))
        .map_err(|e| Error::Tokenizer(format!("training the embedded tokenizer on the env's texts: {e}")))?;
    let learnt = inner.get_vocab_size(false);
    if learnt != BPE_IDS {
        // The base corpus alone fills it, so this is a broken build, not a user's input.
        return Err(Error::Tokenizer(format!("the retrained embedded tokenizer has {learnt} ids, not {BPE_IDS}")));
    }
    Ok(tokenizer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(t: &Tokenizer) -> Vec<(String, u32)> {
        let mut v: Vec<_> = t.inner().get_vocab(true).into_iter().collect();
        v.sort();
        v
    }

    #[test]
    fn no_env_texts_give_the_shipped_tokenizer_back() {
        // The Python `tokenizers` that made the asset and this crate's trainer agree.
        let retrained = tokenizer_for(&[], false).unwrap();
        let shipped = crate::default_model::text_tokenizer().unwrap();
        assert_eq!(vocab(&retrained), vocab(&shipped));
        let text = "<|im_start|>user\nPush the box onto the target.<|im_end|>";
        assert_eq!(retrained.encode(text).unwrap(), shipped.encode(text).unwrap());
    }

    #[test]
    fn an_envs_words_become_single_tokens_and_special_ids_stay() {
        let texts: Vec<String> = (0..60)
            .map(|i| {
                format!("Guess {i}: crimson, turquoise, magenta. Feedback: turquoise is placed, magenta is absent.")
            })
            .collect();
        let shipped = crate::default_model::vl_tokenizer().unwrap();
        let env = tokenizer_for(&texts, true).unwrap();
        let phrase = " crimson, turquoise, magenta";
        let (before, after) = (shipped.encode(phrase).unwrap().len(), env.encode(phrase).unwrap().len());
        assert!(after <= 6 && before >= 2 * after, "{before} tokens before, {after} after");
        for special in ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|image_pad|>"] {
            assert_eq!(env.token_to_id(special), shipped.token_to_id(special), "{special}");
        }
        assert_eq!(env.vocab_size(), shipped.vocab_size());
        assert_eq!(env.decode(&env.encode(phrase).unwrap()).unwrap(), phrase);
        // Deterministic: the same texts, the same tokenizer.
        assert_eq!(vocab(&tokenizer_for(&texts, true).unwrap()), vocab(&env));
    }

    /// Texts a chat template rendered hold the special tokens: the retrained tokenizer keeps
    /// each at its one id, saved and loaded again (a checkpoint's tokenizer.json).
    #[test]
    fn special_tokens_in_the_texts_keep_their_ids_through_a_saved_file() {
        let texts: Vec<String> =
            (0..80).map(|i| format!("<|im_start|>user\nNumbers {i} 2.<|im_end|>\n<|im_start|>assistant\n")).collect();
        let env = tokenizer_for(&texts, false).unwrap();
        let reloaded = Tokenizer::from_bytes(env.to_json().unwrap().as_bytes()).unwrap();
        let text = &texts[7];
        assert_eq!(reloaded.encode(text).unwrap(), env.encode(text).unwrap());
        let shipped = crate::default_model::text_tokenizer().unwrap();
        for special in ["<|im_start|>", "<|im_end|>"] {
            assert_eq!(reloaded.token_to_id(special), shipped.token_to_id(special), "{special}");
            let ids: Vec<u32> =
                env.inner().get_vocab(false).into_iter().filter(|(t, _)| t == special).map(|(_, id)| id).collect();
            assert!(ids.is_empty(), "{special} learnt as a BPE word too: {ids:?}");
        }
    }
}
