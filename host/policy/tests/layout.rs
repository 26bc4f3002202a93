//! The training layout through the embedded model's real tokenizer and Qwen2.5 chat
//! template (the rollout crate tests the layout rules with a toy tokenizer).

use vagen_model::{LoadOptions, Model};
use vagen_policy::ChatModel;
use vagen_rollout::{AssistantTurn, ChatTokenizer, LayoutOptions, Message, layout};

/// A response as a model samples it: its ids, the end of turn, a log-prob each.
fn sampled(tok: &dyn ChatTokenizer, user: &str, response: &str, reward: f32) -> AssistantTurn {
    let mut ids = tok.encode(response).unwrap();
    ids.push(tok.end_of_turn().unwrap());
    let logprobs = Some((0..ids.len()).map(|i| -0.1 * (i + 1) as f32).collect());
    AssistantTurn {
        user: user.into(),
        response: response.into(),
        token_ids: Some(ids),
        logprobs,
        reward,
        images: vec![],
    }
}

/// With the embedded model's tokenizer and Qwen2.5 template, the sequence equals the
/// tokenisation of the rendered conversation, except where the sampled ids are not the
/// tokenizer's own segmentation of the same text.
#[test]
fn real_template_path_matches_retokenisation_except_where_sampled_ids_differ() {
    let model = Model::from_spec("default", LoadOptions::default()).unwrap();
    let tok: &dyn ChatTokenizer = &ChatModel(&model);
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

/// An RGB image of `w`×`h` whose pixels depend on `seed` (distinct images, distinct tokens).
fn picture(w: u32, h: u32, seed: u8) -> std::sync::Arc<vagen_model::Image> {
    let rgb = (0..w * h * 3).map(|i| (i as u8).wrapping_mul(seed).wrapping_add(seed)).collect();
    std::sync::Arc::new(vagen_model::Image { width: w, height: h, rgb })
}

/// Two turns with three images of two sizes, laid out through the default VL model's
/// template: the sequence is the processor's (each image's single placeholder expanded to
/// the tokens its size takes), and only the sampled answer tokens are in either mask.
#[test]
fn image_turns_expand_to_each_images_tokens_and_only_answers_are_masked_in() {
    let model = Model::from_spec("default-vl", LoadOptions::default()).unwrap();
    let tok: &dyn ChatTokenizer = &ChatModel(&model);
    let v = model.vision().unwrap();
    let (pad, start, end) = (v.config.image_token_id, v.config.vision_start_token_id, v.config.vision_end_token_id);
    let images = [vec![picture(56, 56, 3), picture(112, 84, 5)], vec![picture(112, 112, 7)]];
    let users = ["<image> before <image> now", "then <image>"];
    let turns: Vec<AssistantTurn> = (0..2)
        .map(|i| AssistantTurn {
            images: images[i].clone(),
            ..sampled(tok, users[i], "<answer>Left</answer>", i as f32)
        })
        .collect();
    let seq = layout(tok, "sys", &turns, &LayoutOptions::default()).unwrap();

    // The reference: the whole conversation rendered with images and tokenised, then each
    // placeholder expanded as the processor counts (h/28 · w/28 for the default's patches).
    let mut conversation = vec![Message::system("sys")];
    for t in &turns {
        conversation.push(Message::user(t.user.as_str()));
        conversation.push(Message::assistant(t.response.as_str()));
    }
    let compact = tok.encode(&tok.render(&conversation, false).unwrap()).unwrap();
    let counts = [4, 12, 16]; // 56×56, 84×112 (h×w), 112×112 at 28 pixels a token
    let mut next = counts.iter();
    let expected: Vec<u32> =
        compact.iter().flat_map(|&t| if t == pad { vec![pad; *next.next().unwrap()] } else { vec![t] }).collect();
    assert_eq!(seq.ids, expected[..expected.len() - 1], "the template's trailing newline is not laid out");
    assert_eq!(seq.image_tokens, 32);
    assert_eq!(seq.ids.iter().filter(|&&t| t == pad).count(), 32);
    assert_eq!(seq.images.len(), 3);
    assert!(seq.images.iter().zip(images.iter().flatten()).all(|(a, b)| std::sync::Arc::ptr_eq(a, b)), "shared");

    // Token by token: the answers (their sampled ids, end of turn included) and nothing else.
    let mut answer = vec![false; seq.ids.len()];
    for (t, &e) in turns.iter().zip(&seq.turn_ends) {
        let n = t.token_ids.as_ref().unwrap().len();
        answer[e + 1 - n..=e].iter_mut().for_each(|a| *a = true);
        assert_eq!(&seq.ids[e + 1 - n..=e], t.token_ids.as_ref().unwrap().as_slice());
    }
    for (j, &id) in seq.ids.iter().enumerate() {
        assert_eq!(seq.loss_mask[j], answer[j], "token {j} ({id}) loss mask");
        assert_eq!(seq.advantage_mask[j], answer[j], "token {j} ({id}) advantage mask");
        if [pad, start, end].contains(&id) {
            assert!(!seq.loss_mask[j] && !seq.advantage_mask[j], "vision token {j} masked in");
        }
    }
    assert_eq!(seq.ids.iter().filter(|&&t| t == start).count(), 3);

    // The next prompt extends the laid-out turns, its image expanded too.
    let more = [picture(28, 28, 9)];
    let prompt = vagen_rollout::prompt_ids(tok, "sys", &turns, "last <image>", &more).unwrap();
    assert_eq!(&prompt.ids[..seq.ids.len()], seq.ids.as_slice());
    assert_eq!((prompt.images.len(), prompt.image_tokens), (4, 33));

    // A placeholder without its image, and image budgets, are refused by name; a later turn
    // past the budget is dropped, as for length.
    let missing = AssistantTurn { images: vec![], ..turns[0].clone() };
    let err = layout(tok, "sys", &[missing], &LayoutOptions::default()).unwrap_err().to_string();
    assert!(err.contains("2 image placeholder(s) for 0 image(s)"), "{err}");
    let tight = LayoutOptions { max_image_tokens: 20, ..Default::default() };
    let cut = layout(tok, "sys", &turns, &tight).unwrap();
    assert!(cut.truncated && cut.turn_ends.len() == 1 && cut.images.len() == 2 && cut.image_tokens == 16);
    let err = layout(tok, "sys", &turns, &LayoutOptions { max_image_tokens: 10, ..Default::default() }).unwrap_err();
    assert!(err.to_string().contains("take 16 tokens, more than max_image_tokens 10"), "{err}");
}
