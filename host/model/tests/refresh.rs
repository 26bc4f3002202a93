//! New weights while the engine runs (asynchronous RL): a token sampled after the hook
//! loads a version is that version's, exactly as a forward over the whole sequence with
//! those weights scores it; cached keys and values of older weights are never read again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tch::Tensor;
use vagen_model::{Engine, EngineOptions, EngineRequest, GenerateOptions, Generation, LoadOptions, Message, Model};

/// The model's weights as loaded (version 0) and perturbed copies of them (1, 2, …).
struct Versions {
    vars: HashMap<String, Tensor>,
    saved: Vec<Vec<(String, Tensor)>>,
}

impl Versions {
    fn new(model: &Model, n: usize) -> Arc<Mutex<Self>> {
        let _guard = tch::no_grad_guard();
        tch::manual_seed(7);
        let vars = model.trainable();
        assert!(!vars.is_empty());
        let saved = (0..n)
            .map(|v| {
                vars.iter()
                    .map(|(name, t)| {
                        let noise = if v == 0 { t.zeros_like() } else { t.randn_like() * 0.05 };
                        (name.clone(), t.detach() + noise)
                    })
                    .collect()
            })
            .collect();
        Arc::new(Mutex::new(Versions { vars, saved }))
    }

    fn load(&self, v: u64) {
        let _guard = tch::no_grad_guard();
        for (name, t) in &self.saved[v as usize] {
            self.vars[name].shallow_clone().copy_(t);
        }
    }
}

/// No version asked for.
const NONE: u64 = u64::MAX;

/// The engine's hook: version 1 at the `swap_at`-th poll (0: the call's start), and
/// whatever version `next` holds when set.
fn hooked(versions: &Arc<Mutex<Versions>>, swap_at: usize, next: &Arc<AtomicU64>, options: EngineOptions) -> Engine {
    let mut engine = Engine::new(options);
    let (versions, next, mut polls, mut now) = (versions.clone(), next.clone(), 0, 0);
    engine.set_refresh(Box::new(move || {
        polls += 1;
        let asked = next.swap(NONE, Ordering::SeqCst);
        let wanted = if polls - 1 == swap_at { Some(1) } else { (asked != NONE).then_some(asked) };
        if let Some(v) = wanted {
            versions.lock().unwrap().load(v);
            now = v;
        }
        Ok(now)
    }));
    engine
}

/// Each token's log-prob equals the one a whole-sequence forward with its recorded
/// version's weights gives; returns the largest difference the version made.
fn assert_each_token_is_its_versions(model: &Model, versions: &Versions, turns: &[(Vec<u32>, Generation)]) -> f32 {
    let mut moved = 0f32;
    for (k, (prompt, g)) in turns.iter().enumerate() {
        assert_eq!(g.versions.len(), g.token_ids.len(), "answer {k}: a version per token");
        let seq: Vec<u32> = prompt.iter().chain(&g.token_ids).copied().collect();
        let scored: Vec<Vec<f32>> = (0..versions.saved.len() as u64)
            .map(|v| {
                versions.load(v);
                vagen_model::sequence_logprobs(&model.lm, std::slice::from_ref(&seq), 1.0).unwrap().remove(0)
            })
            .collect();
        for (j, (&lp, &v)) in g.logprobs.iter().zip(&g.versions).enumerate() {
            let at = prompt.len() - 1 + j;
            let want = scored[v as usize][at];
            assert!((lp - want).abs() <= 1e-4, "answer {k} token {j} (version {v}): sampled {lp}, recomputed {want}");
            moved = moved.max(scored.iter().map(|s| (s[at] - want).abs()).fold(0.0, f32::max));
        }
    }
    moved
}

/// A turn's requests: trajectory i continues `prompts[i]` with seed `seed + i`.
fn turn_requests(prompts: &[Vec<u32>], max_new_tokens: usize, seed: u64) -> Vec<EngineRequest> {
    (0..prompts.len() as u64)
        .map(|i| EngineRequest {
            key: i,
            ids: prompts[i as usize].clone(),
            images: vec![],
            max_new_tokens,
            seed: seed + i,
            adapter: 0,
        })
        .collect()
}

#[test]
fn weights_loaded_mid_answer_sample_from_the_next_token_on() {
    let model = vagen_model::default_model(vagen_model::DEFAULT_SEED, LoadOptions::default()).unwrap();
    weights_loaded_mid_answer(&model, EngineOptions::default());
    // The padded decode, each step launched before the last one is read: the step in
    // flight when new weights come sampled with the old ones.
    weights_loaded_mid_answer(&model, EngineOptions { padded_decode_on_cpu: true, ..Default::default() });
}

fn weights_loaded_mid_answer(model: &Model, options: EngineOptions) {
    let versions = Versions::new(model, 3);
    let next = Arc::new(AtomicU64::new(NONE));
    // Poll 0 starts the call; poll j comes before decode step j, which samples token j.
    let mut engine = hooked(&versions, 5, &next, options);
    let options = GenerateOptions { max_new_tokens: 16, temperature: 1.0, top_p: 1.0, ..Default::default() };
    let mut prompts: Vec<Vec<u32>> = (0..4)
        .map(|i| {
            let obs = Message::user(format!("Turn 1. The lake, seed {}: _P__\n_O_G", i / 2));
            model.encode_chat(&[Message::system("You are a FrozenLake solver."), obs], true).unwrap()
        })
        .collect();
    let mut answered = vec![];
    for turn in 0..2u64 {
        if turn == 1 {
            // Published between turns: the cached rows of version 1 are not reused.
            next.store(2, Ordering::SeqCst);
        }
        let out = model.generate_with(&mut engine, &turn_requests(&prompts, 16, 100 * turn), &options).unwrap();
        for (i, (p, g)) in prompts.iter_mut().zip(out).enumerate() {
            let want: Vec<u64> =
                (0..g.token_ids.len()).map(|j| if turn == 1 { 2 } else { u64::from(j >= 5) }).collect();
            assert_eq!(g.versions, want, "turn {turn} answer {i}");
            answered.push((p.clone(), g.clone()));
            p.extend(&g.token_ids);
            p.extend(model.tokenizer.encode("<|im_end|>\n<|im_start|>user\nYou moved.<|im_end|>\n").unwrap());
            p.extend(model.tokenizer.encode("<|im_start|>assistant\n").unwrap());
        }
    }
    assert!(answered[..4].iter().any(|(_, g)| g.token_ids.len() > 5), "some answer of turn 1 ran past the swap");
    let s = engine.stats();
    assert_eq!(s.weight_swaps, 1, "{s:?}");
    assert_eq!(s.steps_ahead > 0, engine.options.padded_decode_on_cpu, "{s:?}");
    assert!(s.recomputed_tokens > 0);
    assert_eq!(s.reused_tokens, 0, "no key or value of version 1 is read by version 2's turn: {s:?}");
    let moved = assert_each_token_is_its_versions(model, &versions.lock().unwrap(), &answered);
    assert!(moved > 1e-2, "the versions' log-probs differ by {moved}: the test would not see a stale cache");
}

#[test]
fn a_vl_row_recomputed_after_new_weights_keeps_its_images_and_positions() {
    let model = vagen_model::default_vl_model(vagen_model::DEFAULT_SEED, LoadOptions::default()).unwrap();
    let versions = Versions::new(&model, 2);
    let mut engine = hooked(&versions, 3, &Arc::new(AtomicU64::new(NONE)), EngineOptions::default());
    let options = GenerateOptions { max_new_tokens: 8, temperature: 1.0, top_p: 1.0, ..Default::default() };
    let prompts: Vec<vagen_model::Prompt> = (0..2u8)
        .map(|g| {
            let rgb = (0..56 * 56).flat_map(|i| [(i as u8).wrapping_mul(g + 1), 40 * g, (i / 56) as u8]).collect();
            let picture = vagen_model::Image { width: 56, height: 56, rgb };
            let messages = [Message::system("Navigate."), Message::user("<image>Where is the goal?")];
            model.encode_chat_images(&messages, &[picture], true).unwrap()
        })
        .collect();
    let requests: Vec<EngineRequest> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| EngineRequest {
            key: i as u64,
            ids: p.ids.clone(),
            images: p.images.clone(),
            max_new_tokens: 8,
            seed: i as u64,
            adapter: 0,
        })
        .collect();
    let out = model.generate_with(&mut engine, &requests, &options).unwrap();
    assert_eq!(engine.stats().weight_swaps, u64::from(out.iter().any(|g| g.token_ids.len() > 3)) as usize);
    let v = model.vision().unwrap();
    for (i, (p, g)) in prompts.iter().zip(&out).enumerate() {
        let whole =
            vagen_model::Prompt { ids: p.ids.iter().chain(&g.token_ids).copied().collect(), images: p.images.clone() };
        for (j, (&lp, &ver)) in g.logprobs.iter().zip(&g.versions).enumerate() {
            assert_eq!(ver, u64::from(j >= 3), "answer {i} token {j}");
            versions.lock().unwrap().load(ver);
            let scored = vagen_model::sequence_logprobs_vl(&model.lm, v, std::slice::from_ref(&whole), 1.0).unwrap();
            let want = scored[0][p.ids.len() - 1 + j];
            assert!((lp - want).abs() <= 1e-4, "answer {i} token {j} (version {ver}): sampled {lp}, recomputed {want}");
        }
    }
}

#[test]
fn new_weights_seen_as_every_row_ends_leave_no_cached_row_of_the_old_ones() {
    let model = vagen_model::default_model(vagen_model::DEFAULT_SEED, LoadOptions::default()).unwrap();
    // Every answer takes 3 tokens and version 1 comes at poll 3: read first, the rows ended
    // at step 2 and the poll starts the next call; ahead, it comes before step 3, which
    // reads the step in flight and finds every row ended.
    for padded_decode_on_cpu in [false, true] {
        let versions = Versions::new(&model, 2);
        let options = EngineOptions { padded_decode_on_cpu, ..Default::default() };
        let mut engine = hooked(&versions, 3, &Arc::new(AtomicU64::new(NONE)), options);
        let sampling = GenerateOptions { max_new_tokens: 3, temperature: 1.0, top_p: 1.0, ..Default::default() };
        let mut prompts: Vec<Vec<u32>> =
            (0..4).map(|i| model.encode_chat(&[Message::user(format!("Lake {i}"))], true).unwrap()).collect();
        let mut answered = vec![];
        for turn in 0..2u64 {
            let out = model.generate_with(&mut engine, &turn_requests(&prompts, 3, 10 * turn), &sampling).unwrap();
            for (p, g) in prompts.iter_mut().zip(out) {
                assert_eq!(g.versions, [turn; 3], "turn {turn}");
                answered.push((p.clone(), g.clone()));
                p.extend(&g.token_ids);
                p.extend(model.tokenizer.encode("<|im_end|>\n<|im_start|>assistant\n").unwrap());
            }
        }
        let s = engine.stats();
        assert_eq!(s.reused_tokens, 0, "turn 2 read version 0's keys: {s:?}");
        assert_eq!(s.steps_ahead > 0, padded_decode_on_cpu, "{s:?}");
        assert_each_token_is_its_versions(&model, &versions.lock().unwrap(), &answered);
    }
}
