//! The training layout through the embedded model's real tokenizer and Qwen2.5 chat
//! template (the rollout crate tests the layout rules with a toy tokenizer).

use vagen_model::{LoadOptions, Model};
use vagen_rollout::{AssistantTurn, ChatTokenizer, LayoutOptions, Message, layout};

/// A response as a model samples it: its ids, the end of turn, a log-prob each.
fn sampled(tok: &dyn ChatTokenizer, user: &str, response: &str, reward: f32) -> AssistantTurn {
    let mut ids = tok.encode(response).unwrap();
    ids.push(tok.end_of_turn().unwrap());
    let logprobs = Some((0..ids.len()).map(|i| -0.1 * (i + 1) as f32).collect());
    AssistantTurn { user: user.into(), response: response.into(), token_ids: Some(ids), logprobs, reward, images: vec![] }
}

/// With the embedded model's tokenizer and Qwen2.5 template, the sequence equals the
/// tokenisation of the rendered conversation, except where the sampled ids are not the
/// tokenizer's own segmentation of the same text.
#[test]
fn real_template_path_matches_retokenisation_except_where_sampled_ids_differ() {
    let model = Model::from_spec("default", LoadOptions::default()).unwrap();
    let tok: &dyn ChatTokenizer = &model;
    let responses =
        ["<think>The goal is left.</think><answer>Left</answer>", "<think>Now up.</think><answer>Up</answer>"];
    let turns: Vec<AssistantTurn> =
        responses.iter().enumerate().map(|(i, r)| sampled(tok, &format!("P _ G\nturn {i}"), r, 1.0)).collect();
    let seq = layout(tok, "You are a FrozenLake solver.", &turns, &LayoutOptions::default()).unwrap();
    let mut conversation = vec![Message::system("You are a FrozenLake solver.")];
    for t in &turns {
        conversation.push(Message::user(t.user.as_str()));
        conversation.push(Message::assistant(t.response.as_str()));
    }
    let rendered = tok.render(&conversation, false).unwrap();
    assert!(rendered.ends_with("<|im_end|>\n"));
    let full = tok.encode(&rendered).unwrap();
    assert_eq!(seq.ids, full[..full.len() - 1], "canonical sampled ids: identical");

    // Re-spell one multi-letter token of the first response as single letters: the same
    // text, other ids (a segmentation the tokenizer itself would not produce).
    let mut odd = turns.clone();
    let ids = odd[0].token_ids.as_mut().unwrap();
    let letters = |id: u32| model.tokenizer.decode(&[id]).unwrap();
    let at = ids.iter().position(|&id| letters(id).len() >= 2 && letters(id).chars().all(char::is_alphabetic)).unwrap();
    let canonical = [ids[at]];
    let spelled: Vec<u32> =
        letters(ids[at]).chars().map(|c| model.tokenizer.token_to_id(&c.to_string()).unwrap()).collect();
    ids.splice(at..at + 1, spelled.iter().copied());
    odd[0].logprobs = Some(vec![-1.0; ids.len()]);
    let seq2 = layout(tok, "You are a FrozenLake solver.", &odd, &LayoutOptions::default()).unwrap();
    assert_eq!(tok.decode(&seq2.ids).unwrap(), tok.decode(&seq.ids).unwrap(), "same text");
    assert_eq!(seq2.ids.len(), seq.ids.len() + spelled.len() - canonical.len());
    let start = seq.turn_ends[0] + 1 - turns[0].token_ids.as_ref().unwrap().len() + at;
    assert_eq!(seq2.ids[..start], seq.ids[..start], "identical before the odd span");
    assert_eq!(&seq2.ids[start..start + spelled.len()], spelled.as_slice(), "the sampled ids are kept");
    let shift = spelled.len() - canonical.len();
    assert_eq!(seq2.ids[start + spelled.len()..], seq.ids[start + canonical.len()..], "identical after it");
    assert_eq!(seq2.turn_ends, seq.turn_ends.iter().map(|e| e + shift).collect::<Vec<_>>());
    assert_eq!(seq2.rewritten_turns, 0);
}
