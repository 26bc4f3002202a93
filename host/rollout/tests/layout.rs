//! The training sequence: masks, turn ends and rewards on hand-built trajectories with a toy
//! tokenizer. The real chat-template path, with the embedded model's tokenizer, is tested
//! beside the model (host/model/tests/layout.rs): these need no libtorch.

use vagen_rollout::{
    AssistantTurn, ChatTokenizer, LayoutError, LayoutOptions, Message, Recording, RecordingError, RewardPlacement,
    layout, layout_chat,
};

/// ChatML with one id per character (100 + code point) and two special tokens.
struct Toy;

const START: u32 = 1;
const END: u32 = 2;

impl ChatTokenizer for Toy {
    fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String, String> {
        let mut s: String =
            messages.iter().map(|m| format!("<|im_start|>{}\n{}<|im_end|>\n", m.role, m.content)).collect();
        if add_generation_prompt {
            s.push_str("<|im_start|>assistant\n");
        }
        Ok(s)
    }
    fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        let mut ids = vec![];
        let mut rest = text;
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix("<|im_start|>") {
                ids.push(START);
                rest = r;
            } else if let Some(r) = rest.strip_prefix("<|im_end|>") {
                ids.push(END);
                rest = r;
            } else {
                let c = rest.chars().next().unwrap();
                ids.push(100 + c as u32);
                rest = &rest[c.len_utf8()..];
            }
        }
        Ok(ids)
    }
    fn decode(&self, ids: &[u32]) -> Result<String, String> {
        Ok(ids
            .iter()
            .map(|&i| match i {
                START => "<|im_start|>".to_string(),
                END => "<|im_end|>".to_string(),
                i => char::from_u32(i - 100).unwrap().to_string(),
            })
            .collect())
    }
    fn end_of_turn(&self) -> Option<u32> {
        Some(END)
    }
}

fn turn(user: &str, response: &str, reward: f32) -> AssistantTurn {
    AssistantTurn {
        user: user.into(),
        response: response.into(),
        token_ids: None,
        logprobs: None,
        reward,
        images: vec![],
    }
}

fn sampled(tok: &dyn ChatTokenizer, user: &str, response: &str, reward: f32) -> AssistantTurn {
    let mut ids = tok.encode(response).unwrap();
    ids.push(tok.end_of_turn().unwrap());
    let logprobs = (0..ids.len()).map(|i| -0.1 * (i + 1) as f32).collect();
    AssistantTurn { token_ids: Some(ids), logprobs: Some(logprobs), ..turn(user, response, reward) }
}

/// Maximal runs of true in a mask, as (start, end) index pairs.
fn spans(mask: &[bool]) -> Vec<(usize, usize)> {
    let mut out = vec![];
    let mut start = None;
    for (i, &m) in mask.iter().chain([false].iter()).enumerate() {
        match (m, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    out
}

#[test]
fn masks_turn_ends_and_rewards_on_a_hand_built_trajectory() {
    let tok = Toy;
    let turns = vec![
        sampled(&tok, "grid 0", "<answer>Left</answer>", 0.5),
        sampled(&tok, "grid 1", "<answer>Up</answer>", -0.1),
        sampled(&tok, "grid 2", "<answer>Right</answer>", 10.5),
    ];
    let seq = layout(&tok, "rules", &turns, &LayoutOptions::default()).unwrap();
    let n = seq.ids.len();
    assert!(
        [seq.loss_mask.len(), seq.advantage_mask.len(), seq.logprobs.len(), seq.rewards.len()].iter().all(|&l| l == n)
    );
    assert_eq!(seq.advantage_mask, seq.loss_mask);
    let spans = spans(&seq.loss_mask);
    assert_eq!(spans.len(), 3);
    for ((s, e), t) in spans.iter().zip(&turns) {
        // Each masked span decodes to the response plus the end-of-turn token, nothing else.
        assert_eq!(tok.decode(&seq.ids[*s..*e]).unwrap(), format!("{}<|im_end|>", t.response));
        assert_eq!(&seq.logprobs[*s..*e], t.logprobs.as_ref().unwrap().as_slice());
    }
    // Turn ends are the end-of-turn tokens, and the only places rewards sit.
    assert_eq!(seq.turn_ends, spans.iter().map(|(_, e)| e - 1).collect::<Vec<_>>());
    for &i in &seq.turn_ends {
        assert_eq!(seq.ids[i], END);
    }
    let placed: Vec<(usize, f32)> = seq.rewards.iter().copied().enumerate().filter(|(_, r)| *r != 0.0).collect();
    assert_eq!(placed, seq.turn_ends.iter().zip([0.5, -0.1, 10.5]).map(|(&i, r)| (i, r)).collect::<Vec<_>>());
    // Everything outside the spans is prompt: system, user turns, template glue.
    assert!(seq.logprobs.iter().zip(&seq.loss_mask).all(|(l, m)| *m || *l == 0.0));
    assert!(!seq.truncated);

    let total = layout(&tok, "rules", &turns, &LayoutOptions { rewards: RewardPlacement::Final, ..Default::default() })
        .unwrap();
    let placed: Vec<usize> = (0..n).filter(|&i| total.rewards[i] != 0.0).collect();
    assert_eq!(placed, [*seq.turn_ends.last().unwrap()]);
    assert!((total.rewards[placed[0]] - 10.9).abs() < 1e-5);
}

#[test]
fn without_sampled_ids_the_sequence_is_the_rendered_conversation_tokenised() {
    let tok = Toy;
    let turns = vec![turn("obs 0", "think, then Left", 0.0), turn("obs 1", "ünïcode 🎉 Up", 1.0)];
    let seq = layout(&tok, "sys", &turns, &LayoutOptions::default()).unwrap();
    let mut conversation = vec![Message::system("sys")];
    for t in &turns {
        conversation.push(Message::user(t.user.as_str()));
        conversation.push(Message::assistant(t.response.as_str()));
    }
    let full = tok.encode(&tok.render(&conversation, false).unwrap()).unwrap();
    // The template's newline after the last end-of-turn is not part of any turn.
    assert_eq!(seq.ids, full[..full.len() - 1]);
}

#[test]
fn too_long_trajectories_drop_whole_turns_from_the_end_and_say_so() {
    let tok = Toy;
    let turns: Vec<AssistantTurn> =
        (0..6).map(|i| sampled(&tok, &format!("obs {i}"), "<answer>Left</answer>", 1.0)).collect();
    let full = layout(&tok, "sys", &turns, &LayoutOptions::default()).unwrap();
    let max = full.turn_ends[2] + 5; // room for three turns and a bit
    let cut = layout(&tok, "sys", &turns, &LayoutOptions { max_tokens: max, ..Default::default() }).unwrap();
    assert!(cut.truncated);
    assert_eq!(cut.turn_ends, full.turn_ends[..3]);
    assert_eq!(cut.ids, full.ids[..=full.turn_ends[2]]);
    let err = layout(&tok, "sys", &turns, &LayoutOptions { max_tokens: 10, ..Default::default() }).unwrap_err();
    assert!(matches!(err, LayoutError::TooLong { max: 10, .. }), "{err}");
}

#[test]
fn mismatched_logprobs_and_empty_trajectories_are_errors() {
    let tok = Toy;
    let mut t = sampled(&tok, "o", "<answer>L</answer>", 0.0);
    t.logprobs.as_mut().unwrap().pop();
    assert!(matches!(layout(&tok, "s", &[t], &LayoutOptions::default()), Err(LayoutError::LogprobCount(0, _, _))));
    assert_eq!(layout(&tok, "s", &[], &LayoutOptions::default()), Err(LayoutError::Empty));
}

#[test]
fn a_response_cut_before_its_end_of_turn_leaves_that_token_to_the_prompt() {
    let tok = Toy;
    // Generation hit its length limit: no end-of-turn was sampled.
    let mut t = sampled(&tok, "o", "<answer>Le", 0.0);
    t.token_ids.as_mut().unwrap().pop();
    t.logprobs.as_mut().unwrap().pop();
    let next = sampled(&tok, "o2", "<answer>Up</answer>", 0.0);
    let seq = layout(&tok, "s", &[t, next], &LayoutOptions::default()).unwrap();
    let first_end = seq.turn_ends[0];
    assert_ne!(seq.ids[first_end], END);
    assert_eq!(seq.ids[first_end + 1], END, "the template's end-of-turn follows, as prompt");
    assert!(!seq.loss_mask[first_end + 1]);
}

/// The next turn's prompt continues the laid-out sequence token for token, even where the
/// sampled ids are not what re-tokenising the response's text would give.
#[test]
fn the_next_prompt_extends_the_laid_out_turns_with_their_sampled_ids() {
    use vagen_rollout::prompt_ids;
    let tok = Toy;
    // The response "ok" sampled as the id of "x", which its text would never tokenise to.
    let x = 100 + 'x' as u32;
    let odd = AssistantTurn { token_ids: Some(vec![x, END]), ..turn("a", "ok", 0.0) };
    let history = [sampled(&tok, "hi", "go", 0.0), odd];
    let options = LayoutOptions { max_tokens: 1000, ..Default::default() };
    let laid = layout(&tok, "sys", &history, &options).unwrap();
    let prompt = prompt_ids(&tok, "sys", &history, "next", &[]).unwrap().ids;
    assert_eq!(&prompt[..laid.ids.len()], laid.ids.as_slice());
    assert!(prompt[..laid.ids.len()].contains(&x));
    let rest = tok.decode(&prompt[laid.ids.len()..]).unwrap();
    assert_eq!(rest, "\n<|im_start|>user\nnext<|im_end|>\n<|im_start|>assistant\n");
    // With no history it is the rendered prompt, tokenised.
    let first = prompt_ids(&tok, "sys", &[], "hi", &[]).unwrap().ids;
    let conversation = [Message::system("sys"), Message::user("hi")];
    assert_eq!(first, tok.encode(&tok.render(&conversation, true).unwrap()).unwrap());
}

#[test]
fn a_chat_is_laid_out_with_the_loss_on_its_assistant_messages_only() {
    let messages = [
        Message::system("S"),
        Message::user("q"),
        Message::assistant("ab"),
        Message::new("tool", "7"),
        Message::assistant("cd"),
        Message::user("left out"),
    ];
    let seq = layout_chat(&Toy, &messages, &[], &[], &LayoutOptions::default()).unwrap();
    // The whole rendered conversation up to the last answer's end of turn, token for token.
    let whole = Toy.render(&messages[..5], false).unwrap();
    let expected = Toy.encode(whole.strip_suffix('\n').unwrap()).unwrap();
    assert_eq!(seq.ids, expected);
    let answers: Vec<String> =
        spans(&seq.loss_mask).iter().map(|&(a, b)| Toy.decode(&seq.ids[a..b]).unwrap()).collect();
    assert_eq!(answers, ["ab<|im_end|>", "cd<|im_end|>"]);
    assert_eq!(seq.advantage_mask, seq.loss_mask);
    assert_eq!(seq.turn_ends.len(), 2);
    assert!(!seq.truncated && seq.rewards.iter().all(|&r| r == 0.0));

    // Turns past the budget are dropped whole; a first one is an error; no answer, nothing to learn.
    let first = seq.turn_ends[0] + 1;
    let short = layout_chat(&Toy, &messages, &[], &[], &LayoutOptions { max_tokens: first + 3, ..Default::default() });
    let short = short.unwrap();
    assert_eq!((short.ids.len(), short.truncated), (first, true));
    let tiny = LayoutOptions { max_tokens: 4, ..Default::default() };
    assert!(matches!(layout_chat(&Toy, &messages, &[], &[], &tiny), Err(LayoutError::TooLong { .. })));
    assert_eq!(layout_chat(&Toy, &messages[..2], &[], &[], &LayoutOptions::default()), Err(LayoutError::Empty));
    // A template that takes no tools says so.
    let tools = [serde_json::json!({"type": "function", "function": {"name": "f"}})];
    let err = layout_chat(&Toy, &messages, &tools, &[], &LayoutOptions::default()).unwrap_err();
    assert!(matches!(err, LayoutError::Template(ref e) if e.contains("takes no tools")), "{err:?}");
}

/// A sampled answer: its text's ids and the end of turn, with made-up log-probs.
fn answer_of(text: &str) -> (Vec<u32>, Vec<f32>) {
    let mut ids = Toy.encode(text).unwrap();
    ids.push(END);
    let logprobs = (0..ids.len()).map(|i| -0.5 - i as f32).collect();
    (ids, logprobs)
}

#[test]
fn a_recorded_episode_is_one_sequence_with_the_loss_on_exactly_the_sampled_ids() {
    let mut r = Recording::new();
    let mut chat = vec![Message::system("S"), Message::user("where?")];
    let mut answers = vec![];
    for (k, said) in ["left", "up", "done"].into_iter().enumerate() {
        let text = Toy.render(&chat, true).unwrap();
        let ids = r.prompt(&Toy, &text).unwrap();
        if k == 0 {
            assert_eq!(ids, Toy.encode(&text).unwrap());
        }
        // The prompt holds every earlier answer's sampled ids where they were sampled.
        let (sampled, logprobs) = answer_of(said);
        r.answer(&Toy, &sampled, &logprobs, 7 + k as u64).unwrap();
        answers.push((ids.len(), sampled, logprobs));
        chat.push(Message::assistant(said));
        chat.push(Message::user(format!("after {said}")));
    }
    let recorded = r.finish();
    assert_eq!((recorded.sequences.len(), recorded.breaks, recorded.versions.clone()), (1, 0, vec![7, 8, 9]));
    let seq = &recorded.sequences[0];
    let mut expected_mask = vec![false; seq.ids.len()];
    for (start, sampled, logprobs) in &answers {
        assert_eq!(&seq.ids[*start..start + sampled.len()], &sampled[..]);
        assert_eq!(&seq.logprobs[*start..start + sampled.len()], &logprobs[..]);
        expected_mask[*start..start + sampled.len()].iter_mut().for_each(|m| *m = true);
    }
    assert_eq!(seq.loss_mask, expected_mask);
    assert_eq!(seq.advantage_mask, expected_mask);
    assert_eq!(seq.turn_ends, answers.iter().map(|(s, a, _)| s + a.len() - 1).collect::<Vec<_>>());
    assert_eq!(seq.ids.len(), seq.turn_ends[2] + 1);
}

#[test]
fn a_rewritten_history_starts_a_new_sequence_and_is_counted() {
    let mut r = Recording::new();
    let first = [Message::system("S"), Message::user("long story")];
    r.prompt(&Toy, &Toy.render(&first, true).unwrap()).unwrap();
    let (a, l) = answer_of("ok");
    r.answer(&Toy, &a, &l, 0).unwrap();
    // The agent summarised its history: the new prompt does not extend the old one.
    let summary = Toy.render(&[Message::system("S"), Message::user("summary")], true).unwrap();
    let ids = r.prompt(&Toy, &summary).unwrap();
    assert_eq!(ids, Toy.encode(&summary).unwrap());
    // One call at a time; an answer needs a prompt.
    assert_eq!(r.prompt(&Toy, &summary), Err(RecordingError::Concurrent));
    r.answer(&Toy, &a, &l, 1).unwrap();
    assert_eq!(r.answer(&Toy, &a, &l, 1), Err(RecordingError::NoPrompt));
    // A call that failed is taken back: the next one lays out as if it had not been made.
    let next = Toy.render(
        &[Message::system("S"), Message::user("summary"), Message::assistant("ok"), Message::user("and?")],
        true,
    );
    let next = next.unwrap();
    let before = r.prompt(&Toy, &next).unwrap();
    r.abandon();
    assert_eq!(r.prompt(&Toy, &next).unwrap(), before);
    r.abandon();
    let recorded = r.finish();
    assert_eq!((recorded.sequences.len(), recorded.breaks), (2, 1));
    for seq in &recorded.sequences {
        assert_eq!(seq.loss_mask.iter().filter(|&&m| m).count(), a.len());
        assert_eq!(seq.ids.len(), seq.turn_ends[0] + 1);
    }
    let err = Recording::new().answer(&Toy, &a, &l[1..], 0);
    assert_eq!(err, Err(RecordingError::NoPrompt));
}
