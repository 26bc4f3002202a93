//! Batched generation: log-probs agree with a separate forward, seeds reproduce, stop
//! strings and EOS end rows, bad requests are refused.

mod common;

use common::*;
use vagen_model::{FinishReason, GenerateOptions, LoadOptions, Message, Model, sequence_logprobs};

fn prompts(model: &Model) -> Vec<Vec<u32>> {
    ["Go left.", "You are on a frozen lake with holes, reach the goal", "?"]
        .iter()
        .map(|t| model.encode_chat(&[Message::user(*t)], true).unwrap())
        .collect()
}

fn sampling(seed: u64) -> GenerateOptions {
    GenerateOptions { max_new_tokens: 24, temperature: 0.8, top_p: 0.9, top_k: 50, seed, ..Default::default() }
}

#[test]
fn generation_logprobs_equal_a_full_forward() {
    for (name, options) in [
        ("tiny-qwen2", sampling(3)),
        ("tiny-qwen2-tied", GenerateOptions { temperature: 0.0, max_new_tokens: 20, ..Default::default() }),
    ] {
        let model = load(name);
        let prompts = prompts(&model);
        let generations = model.generate(&prompts, &options).unwrap();
        let full: Vec<Vec<u32>> =
            prompts.iter().zip(&generations).map(|(p, g)| [&p[..], &g.token_ids].concat()).collect();
        let scored = sequence_logprobs(&model.lm, &full, options.temperature).unwrap();
        for ((p, g), s) in prompts.iter().zip(&generations).zip(&scored) {
            assert_eq!(g.token_ids.len(), g.logprobs.len());
            assert!(!g.token_ids.is_empty());
            let recomputed = &s[p.len() - 1..];
            for (a, b) in g.logprobs.iter().zip(recomputed) {
                assert!((a - b).abs() <= 1e-4, "{name}: generation log-prob {a} vs forward {b}");
                assert!(*a <= 0.0 && a.is_finite());
            }
        }
    }
}

#[test]
fn same_seed_same_tokens_other_seed_other_tokens() {
    let model = load("tiny-qwen2");
    let prompts = prompts(&model);
    let a = model.generate(&prompts, &sampling(7)).unwrap();
    let b = model.generate(&prompts, &sampling(7)).unwrap();
    let c = model.generate(&prompts, &sampling(8)).unwrap();
    assert_eq!(a, b);
    assert_ne!(a.iter().map(|g| &g.token_ids).collect::<Vec<_>>(), c.iter().map(|g| &g.token_ids).collect::<Vec<_>>());
}

#[test]
fn top_k_one_is_greedy() {
    let model = load("tiny-qwen2");
    let prompts = prompts(&model);
    let greedy = model.generate(&prompts, &GenerateOptions { temperature: 0.0, ..sampling(0) }).unwrap();
    let top1 = model.generate(&prompts, &GenerateOptions { top_k: 1, top_p: 1.0, ..sampling(5) }).unwrap();
    for (g, t) in greedy.iter().zip(&top1) {
        assert_eq!(g.token_ids, t.token_ids);
    }
}

#[test]
fn stop_strings_end_a_row_and_cut_the_text() {
    let model = load("tiny-qwen2");
    let prompts = prompts(&model);
    let greedy = GenerateOptions { max_new_tokens: 12, temperature: 0.0, ..Default::default() };
    let free = model.generate(&prompts[..1], &greedy).unwrap().remove(0);
    assert_eq!(free.finish, FinishReason::Length);
    assert_eq!(free.token_ids.len(), 12);
    // A stop string that the free run produces in the middle of its text.
    let chars: Vec<char> = free.text.chars().collect();
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
    let options = GenerateOptions { stop: vec![stop.clone()], ..greedy };
    let stopped = model.generate(&prompts[..1], &options).unwrap().remove(0);
    assert_eq!(stopped.finish, FinishReason::Stop);
    assert!(stopped.token_ids.len() < free.token_ids.len());
    assert_eq!(stopped.token_ids, free.token_ids[..stopped.token_ids.len()]);
    assert!(stopped.text.ends_with(&stop), "{:?} should end with {stop:?}", stopped.text);
    assert!(free.text.starts_with(&stopped.text));
}

#[test]
fn eos_ends_a_row_and_is_returned_but_not_in_the_text() {
    let mut model = load("tiny-qwen2");
    let prompts = prompts(&model);
    let greedy = GenerateOptions { max_new_tokens: 12, temperature: 0.0, ..Default::default() };
    let free = model.generate(&prompts, &greedy).unwrap();
    // Declare the 4th greedy token of row 1 an end-of-sequence id.
    let eos = free[1].token_ids[3];
    model.eos_token_ids = vec![eos];
    let ended = model.generate(&prompts, &greedy).unwrap();
    let first = free[1].token_ids.iter().position(|&t| t == eos).unwrap();
    assert_eq!(ended[1].finish, FinishReason::Eos);
    assert_eq!(ended[1].token_ids, free[1].token_ids[..=first]);
    assert_eq!(ended[1].text, model.tokenizer.decode(&free[1].token_ids[..first]).unwrap());
    // Other rows are unaffected by row 1 finishing early.
    for r in [0, 2] {
        let n = ended[r].token_ids.len();
        assert_eq!(ended[r].token_ids, free[r].token_ids[..n]);
    }
}

#[test]
fn bad_requests_are_refused_with_the_reason() {
    let model = load("tiny-qwen2");
    let ok = vec![vec![1u32, 2, 3]];
    let cases = [
        (vec![vec![]], GenerateOptions::default(), "no tokens"),
        (vec![vec![5000]], GenerateOptions::default(), "vocab_size"),
        (ok.clone(), GenerateOptions { temperature: f64::NAN, ..Default::default() }, "temperature"),
        (ok.clone(), GenerateOptions { top_p: 0.0, ..Default::default() }, "top_p"),
        (ok.clone(), GenerateOptions { max_new_tokens: 0, ..Default::default() }, "max_new_tokens"),
        (ok.clone(), GenerateOptions { max_new_tokens: 600, ..Default::default() }, "max_position_embeddings"),
    ];
    for (prompts, options, needle) in cases {
        let err = model.generate(&prompts, &options).unwrap_err().to_string();
        assert!(err.contains(needle), "{err} should mention {needle}");
    }
}

#[test]
fn the_default_model_is_built_from_a_seed_and_chats() {
    let a = Model::from_spec("default", LoadOptions::default()).unwrap();
    let b = Model::from_spec("default", LoadOptions::default()).unwrap();
    assert_eq!(a.config().hidden_size, 256);
    let prompt = vec![a.encode_chat(&[Message::user("Which way?")], true).unwrap()];
    let text = a.chat_template().unwrap().render(&[Message::user("Which way?")], true).unwrap();
    assert!(text.ends_with("<|im_start|>assistant\n"), "{text:?}");
    let options = GenerateOptions { max_new_tokens: 8, seed: 1, ..Default::default() };
    assert_eq!(a.generate(&prompt, &options).unwrap(), b.generate(&prompt, &options).unwrap());
    let c = vagen_model::default_model(99, LoadOptions::default()).unwrap();
    assert_ne!(logits(&a, &prompt[0]).double_value(&[0, 0]), logits(&c, &prompt[0]).double_value(&[0, 0]));
}

/// `lm_head_f32` on a bf16 model: logits are the f32 product of the hidden states and the
/// head, the same bits with and without gradients (generation's cached copy of the head and
/// training's cast), and training's gradient reaches the bf16 head.
#[test]
fn an_f32_lm_head_computes_logits_in_f32_in_generation_and_training_alike() {
    let options = LoadOptions { dtype: vagen_model::DType::Bf16, lm_head_f32: true, ..LoadOptions::default() };
    let model = Model::load(&fixtures().join("tiny-qwen2"), options).unwrap();
    let seq = &prompts(&model)[1];
    let ids = tch::Tensor::from_slice(&seq.iter().map(|&t| t as i64).collect::<Vec<_>>()).unsqueeze(0);
    let pos = tch::Tensor::arange(seq.len() as i64, tch::kind::INT64_CPU).unsqueeze(0);
    let hidden = tch::no_grad(|| model.lm.model.forward(&ids, &pos, None, None).unwrap());
    let head = model.vs.variables()["lm_head.weight"].shallow_clone();
    assert_eq!(head.kind(), tch::Kind::BFloat16);
    let want = hidden.to_kind(tch::Kind::Float).matmul(&head.to_kind(tch::Kind::Float).tr());
    let generating = tch::no_grad(|| model.lm.logits(&hidden));
    let training = model.lm.logits(&hidden);
    assert!(generating.equal(&want) && training.detach().equal(&want));
    let bf16 = hidden.matmul(&head.tr()).to_kind(tch::Kind::Float);
    assert!(!bf16.equal(&want), "the bf16 product rounds its outputs");
    training.sum(tch::Kind::Float).backward();
    assert!(head.grad().defined() && head.grad().abs().sum(tch::Kind::Float).double_value(&[]) > 0.0);
    // Generation follows a weight changed in place.
    let _ = tch::no_grad(|| head.get(0).fill_(0.5));
    let moved = tch::no_grad(|| model.lm.logits(&hidden));
    assert!(!moved.equal(&generating));
    assert!(moved.equal(&hidden.to_kind(tch::Kind::Float).matmul(&head.to_kind(tch::Kind::Float).tr())));
}
