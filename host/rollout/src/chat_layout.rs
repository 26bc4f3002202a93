//! A conversation in OpenAI's chat format laid out for SFT, as [`crate::layout`] lays out
//! an oracle's episode: the chat template's text (tools written where given), each
//! assistant message's text tokenised and closed by the end-of-turn token under the loss,
//! everything else (system, user and tool messages, the template's own markup) outside it.

use crate::layout::{
    ChatTokenizer, LayoutError, LayoutOptions, TrainingSequence, end_of_turn_offset, expand_images, room_for,
};
use crate::{IMAGE_MARKER, Message};
use std::sync::Arc;
use vagen_runtime::Image;

/// `messages` (whose `<image>` markers stand for `images`, in order) with `tools` as one
/// training sequence, the loss on the assistant messages. Messages after the last assistant
/// one are left out; assistant turns past `options.max_tokens` are dropped from the end,
/// whole (`truncated`), and a first one past it is an error.
pub fn layout_chat(
    tok: &dyn ChatTokenizer,
    messages: &[Message],
    tools: &[serde_json::Value],
    images: &[Arc<Image>],
    options: &LayoutOptions,
) -> Result<TrainingSequence, LayoutError> {
    let answers: Vec<usize> = (0..messages.len()).filter(|&i| messages[i].role == "assistant").collect();
    if answers.is_empty() {
        return Err(LayoutError::Empty);
    }
    let render = |upto: usize, add| tok.render_with_tools(&messages[..upto], tools, add).map_err(LayoutError::Template);
    let mut seq = TrainingSequence::default();
    let (mut covered, mut images_seen) = (String::new(), 0);
    for (turn, &i) in answers.iter().enumerate() {
        let prompt = render(i, true)?;
        let delta = prompt.strip_prefix(covered.as_str()).ok_or(LayoutError::NotPrefixStable(turn))?;
        let mut delta_ids = tok.encode(delta).map_err(LayoutError::Tokenizer)?;
        let markers: usize = messages[..i].iter().map(|m| m.content.matches(IMAGE_MARKER).count()).sum();
        let new_images = images.get(images_seen..markers).ok_or(LayoutError::ImageCount {
            turn,
            pads: markers,
            images: images.len(),
        })?;
        let image_tokens = expand_images(tok, &mut delta_ids, new_images, turn)?;
        let rendered = render(i + 1, false)?;
        let segment = rendered.strip_prefix(prompt.as_str()).ok_or(LayoutError::NotPrefixStable(turn))?;
        let consumed = end_of_turn_offset(tok, segment)?;
        let answer = answer_ids(tok, &segment[..consumed])?;
        if !room_for(&mut seq, turn, delta_ids.len() + answer.len(), image_tokens, options)? {
            break;
        }
        if let Some(n) = image_tokens {
            seq.images.extend(new_images.iter().cloned());
            seq.image_tokens += n;
        }
        images_seen = markers;
        // No policy sampled it: no log-probs.
        seq.push_turn(&delta_ids, &answer, &vec![0.0; answer.len()]);
        covered = format!("{prompt}{}", &segment[..consumed]);
    }
    seq.advantage_mask = seq.loss_mask.clone();
    Ok(seq)
}

/// An assistant message's text as a policy would have sampled it: its text tokenised on
/// its own, then the end-of-turn token (the template's text of it is not re-tokenised).
fn answer_ids(tok: &dyn ChatTokenizer, text: &str) -> Result<Vec<u32>, LayoutError> {
    let Some(eot) = tok.end_of_turn() else {
        return tok.encode(text).map_err(LayoutError::Tokenizer);
    };
    let eot_text = tok.decode(&[eot]).map_err(LayoutError::Tokenizer)?;
    match text.strip_suffix(eot_text.as_str()) {
        Some(body) => {
            let mut ids = tok.encode(body).map_err(LayoutError::Tokenizer)?;
            ids.push(eot);
            Ok(ids)
        }
        None => tok.encode(text).map_err(LayoutError::Tokenizer),
    }
}
