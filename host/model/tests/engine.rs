//! The rollout engine: reusing a trajectory's keys and values, sharing a group's prompt and
//! batching continuously change what is computed, never what is sampled.

use vagen_model::{
    Engine, EngineOptions, EngineRequest, EngineStats, FinishReason, GenerateOptions, Generation, LoadOptions, Message,
    Model, RequestId, default_model,
};

fn model() -> Model {
    default_model(vagen_model::DEFAULT_SEED, LoadOptions::default()).unwrap()
}

fn sampling(max_new_tokens: usize) -> GenerateOptions {
    GenerateOptions { max_new_tokens, temperature: 1.0, top_p: 0.95, top_k: 0, ..Default::default() }
}

/// `groups` × `members` conversations over `turns` turns: each turn's prompt is the last
/// one, its answer's ids, the end of turn and a new observation (as the rollout layout
/// lays turns out). Returns every turn's generations and the engine's figures.
fn converse(
    model: &Model,
    engine: &mut Engine,
    groups: usize,
    members: usize,
    turns: usize,
    options: &GenerateOptions,
    caps: &dyn Fn(usize, usize) -> usize,
) -> Vec<Vec<Generation>> {
    let n = groups * members;
    let mut prompts: Vec<Vec<u32>> = (0..n)
        .map(|i| {
            let system = Message::system("You are a FrozenLake solver. Answer with <answer>Left</answer>.");
            let obs = Message::user(format!("Turn 1. The lake, seed {}: _P__\n_O_G", i / members));
            model.encode_chat(&[system, obs], true).unwrap()
        })
        .collect();
    let mut all = vec![];
    for turn in 0..turns {
        let requests: Vec<EngineRequest> = (0..n)
            .map(|i| EngineRequest {
                key: i as u64,
                ids: prompts[i].clone(),
                images: vec![],
                max_new_tokens: caps(turn, i),
                seed: 1000 * turn as u64 + i as u64,
                adapter: 0,
            })
            .collect();
        let out = model.generate_with(engine, &requests, options).unwrap();
        for (p, g) in prompts.iter_mut().zip(&out) {
            p.extend(&g.token_ids);
            p.extend(model.tokenizer.encode("<|im_end|>\n<|im_start|>user\n").unwrap());
            p.extend(model.tokenizer.encode(&format!("Turn {}. You moved.<|im_end|>\n", turn + 2)).unwrap());
            p.extend(model.tokenizer.encode("<|im_start|>assistant\n").unwrap());
        }
        all.push(out);
    }
    all
}

fn n(v: usize) -> std::num::NonZeroUsize {
    std::num::NonZeroUsize::new(v).unwrap()
}

fn engine(options: EngineOptions) -> Engine {
    Engine::new(options)
}

fn assert_same(a: &[Vec<Generation>], b: &[Vec<Generation>], tolerance: f32) {
    for (turn, (x, y)) in a.iter().zip(b).enumerate() {
        for (i, (g, h)) in x.iter().zip(y).enumerate() {
            assert_eq!(g.token_ids, h.token_ids, "turn {turn} row {i}: different ids");
            for (p, q) in g.logprobs.iter().zip(&h.logprobs) {
                assert!((p - q).abs() <= tolerance, "turn {turn} row {i}: log-prob {p} vs {q}");
            }
        }
    }
}

#[test]
fn reuse_gives_the_ids_and_logprobs_of_a_full_prefill() {
    let model = model();
    let options = sampling(16);
    let mut reusing = engine(EngineOptions::default());
    let mut full = engine(EngineOptions { reuse: false, ..Default::default() });
    let a = converse(&model, &mut reusing, 2, 3, 4, &options, &|_, _| 16);
    let b = converse(&model, &mut full, 2, 3, 4, &options, &|_, _| 16);
    assert_same(&a, &b, 1e-4);
    let (s, f) = (reusing.stats(), full.stats());
    assert_eq!(s.prompt_tokens, f.prompt_tokens);
    assert_eq!(f.saved_tokens(), 0);
    assert_eq!(f.prefilled_tokens, f.prompt_tokens);
    assert_eq!(s.prefilled_tokens + s.saved_tokens(), s.prompt_tokens);
    assert_eq!(s.fallbacks, 0);
    // Later turns prefill only what is new: far less than the whole history.
    assert!(s.prefilled_tokens * 3 < f.prefilled_tokens, "{s:?} vs {f:?}");
}

#[test]
fn a_group_prefills_its_shared_prompt_once() {
    let model = model();
    let mut e = engine(EngineOptions::default());
    let out = converse(&model, &mut e, 2, 4, 1, &sampling(8), &|_, _| 8);
    let s = e.stats();
    let prompt = s.prompt_tokens / 8;
    let first = |g: usize| {
        let system = Message::system("You are a FrozenLake solver. Answer with <answer>Left</answer>.");
        model.encode_chat(&[system, Message::user(format!("Turn 1. The lake, seed {g}: _P__\n_O_G"))], true).unwrap()
    };
    let across = first(0).iter().zip(&first(1)).take_while(|(a, b)| a == b).count();
    // The first member of group 0 prefills the prompt; group 1's first copies what the two
    // groups' prompts share; each sibling copies all of its group's prompt but the last
    // token, whose logits start its answer.
    assert_eq!(s.shared_tokens, 2 * 3 * (prompt - 1) + across, "{s:?}");
    assert_eq!(s.prefilled_tokens, 2 * prompt - across + 2 * 3);
    assert_eq!(s.prefill_calls, 3, "group 0's first, then the other first and group 0's siblings, then group 1's");
    // Siblings draw from their own streams.
    let distinct: std::collections::BTreeSet<&Vec<u32>> = out[0][..4].iter().map(|g| &g.token_ids).collect();
    assert!(distinct.len() > 1);
}

#[test]
fn batching_decisions_do_not_change_the_samples() {
    let model = model();
    let options = sampling(12);
    // Caps that differ per row and turn: rows end at different steps.
    let caps = |turn: usize, i: usize| 3 + (turn * 5 + i * 7) % 10;
    let mut one = engine(EngineOptions { max_batch: n(1), ..Default::default() });
    let mut few = engine(EngineOptions { max_batch: n(3), max_prefill_tokens: n(64), ..Default::default() });
    let mut all = engine(EngineOptions::default());
    let a = converse(&model, &mut one, 2, 3, 3, &options, &caps);
    let b = converse(&model, &mut few, 2, 3, 3, &options, &caps);
    let c = converse(&model, &mut all, 2, 3, 3, &options, &caps);
    assert_same(&a, &b, 1e-4);
    assert_same(&a, &c, 1e-4);
    for (turn, gens) in a.iter().enumerate() {
        for (i, g) in gens.iter().enumerate() {
            assert!(g.token_ids.len() <= caps(turn, i));
        }
    }
    // Three at a time: rows that reach their cap leave and waiting requests take the slot.
    let s = few.stats();
    assert!(s.freed_at_length > 0 && s.joined_running > 0, "{s:?}");
    assert_eq!(one.stats().joined_running, 0);
}

#[test]
fn a_prompt_that_does_not_extend_the_cache_falls_back_and_is_counted() {
    let model = model();
    let options = sampling(6);
    let system = Message::system("You are a Sokoban solver.");
    let turn = |k: usize| Message::user(format!("Observation {k}: #P_X#"));
    let answer = Message::assistant("<answer>Up</answer>");
    let first = model.encode_chat(&[system.clone(), turn(1)], true).unwrap();
    let whole = model.encode_chat(&[system.clone(), turn(1), answer.clone(), turn(2)], true).unwrap();
    // A history window of one turn leaves out turn 1: the cache (system + turn 1) is no
    // prefix of this prompt.
    let windowed = model.encode_chat(&[system.clone(), turn(2)], true).unwrap();
    let request = |ids: &Vec<u32>| EngineRequest {
        key: 7,
        ids: ids.clone(),
        images: vec![],
        max_new_tokens: 6,
        seed: 1,
        adapter: 0,
    };
    let mut e = engine(EngineOptions::default());
    model.generate_with(&mut e, &[request(&first)], &options).unwrap();
    let before = e.stats();
    let reused = model.generate_with(&mut e, &[request(&windowed)], &options).unwrap();
    let s = e.stats();
    assert_eq!(s.fallbacks, before.fallbacks + 1, "{s:?}");
    // What still matches (the system prompt) is reused; the rest is prefilled.
    assert!(s.reused_tokens > 0 && s.reused_tokens < first.len());
    let fresh = model.generate_with(&mut engine(EngineOptions::default()), &[request(&windowed)], &options).unwrap();
    assert_eq!(reused[0].token_ids, fresh[0].token_ids);
    // The full history extends the cache of the windowed turn only as far as the system
    // prompt, so a third turn falls back again.
    model.generate_with(&mut e, &[request(&whole)], &options).unwrap();
    assert_eq!(e.stats().fallbacks, before.fallbacks + 2);
}

#[test]
fn a_small_budget_evicts_and_a_too_small_one_is_refused() {
    let model = model();
    let options = sampling(8);
    let full = converse(&model, &mut engine(EngineOptions::default()), 2, 4, 3, &options, &|_, _| 8);
    // 1 MiB holds 64 positions per MiB... enough for a few rows of this conversation only.
    let mut tight = engine(EngineOptions { kv_cache_mib: n(1), max_batch: n(2), ..Default::default() });
    let evicting = converse(&model, &mut tight, 2, 4, 3, &options, &|_, _| 8);
    assert_same(&full, &evicting, 1e-4);
    let s = tight.stats();
    assert!(s.evictions > 0, "{s:?}");
    assert!(s.peak_kv_bytes <= 1 << 20, "{s:?}");
    // Rows as slots (attention that reads any row, as flash's): evicting, truncating and
    // moving rows copy nothing, and every row is read where it sits.
    let slots = EngineOptions { kv_cache_mib: n(1), max_batch: n(2), flash_on_cpu: true, ..Default::default() };
    assert_same(&full, &converse(&model, &mut engine(slots), 2, 4, 3, &options, &|_, _| 8), 1e-4);

    let long: Vec<u32> = model.tokenizer.encode(&"lake ".repeat(300)).unwrap();
    let mut tiny = engine(EngineOptions { kv_cache_mib: n(1), ..Default::default() });
    let request = EngineRequest { key: 0, ids: long.clone(), images: vec![], max_new_tokens: 8, seed: 0, adapter: 0 };
    let err = model.generate_with(&mut tiny, &[request], &options).unwrap_err().to_string();
    assert!(err.contains("kv_cache_mib") && err.contains("budget of 1 MiB"), "{err}");
    // A request no row could hold is refused before anything runs: the cached rows stay.
    let request = EngineRequest { key: 0, ids: long, images: vec![], max_new_tokens: 8, seed: 0, adapter: 0 };
    let cached = tight.kv_bytes();
    assert!(cached > 0);
    assert!(model.generate_with(&mut tight, &[request], &options).is_err());
    assert_eq!(tight.kv_bytes(), cached);
    // A step that fails part-way (here the weights' hook, at the first decode) leaves no
    // cached row behind (none may hold what it claims), and the engine answers the next
    // call as a fresh one would.
    let mut polls = 0;
    tight.set_refresh(Box::new(move || {
        polls += 1;
        if polls == 2 { Err("the trainer went away".into()) } else { Ok(0) }
    }));
    let request = EngineRequest { key: 0, ids: vec![5, 6, 7], images: vec![], max_new_tokens: 8, seed: 0, adapter: 0 };
    let err = model.generate_with(&mut tight, &[request], &options).unwrap_err().to_string();
    assert!(err.contains("the trainer went away"), "{err}");
    assert_eq!(tight.kv_bytes(), 0);
    let again = converse(&model, &mut tight, 2, 4, 3, &options, &|_, _| 8);
    assert_same(&full, &again, 1e-4);
}

#[test]
fn the_engine_refuses_bad_requests() {
    let model = model();
    let mut e = engine(EngineOptions::default());
    let r = |key, ids: Vec<u32>| EngineRequest { key, ids, images: vec![], max_new_tokens: 4, seed: 0, adapter: 0 };
    let err = model.generate_with(&mut e, &[r(1, vec![5, 6]), r(1, vec![7])], &sampling(4)).unwrap_err();
    assert!(err.to_string().contains("trajectory 1"), "{err}");
    let err = model.generate_with(&mut e, &[r(1, vec![])], &sampling(4)).unwrap_err();
    assert!(err.to_string().contains("no tokens"), "{err}");
    // Limits that must be positive cannot be zero: refused where they are read.
    let zero = serde_json::from_str::<EngineOptions>(r#"{"max_batch": 0}"#).unwrap_err();
    assert!(zero.to_string().contains("nonzero"), "{zero}");
    // The engine is still usable after a refused call.
    let g = model.generate_with(&mut e, &[r(1, vec![5, 6])], &sampling(4)).unwrap();
    assert!(!g[0].token_ids.is_empty() && g[0].finish != FinishReason::Stop);
}

/// A 56 × 56 picture: colour bands that differ by `seed`.
fn picture(seed: u8) -> vagen_model::Image {
    let rgb =
        (0..56 * 56).flat_map(|i| [(i as u8).wrapping_mul(seed), seed.wrapping_mul(37), (i / 56) as u8]).collect();
    vagen_model::Image { width: 56, height: 56, rgb }
}

/// Two groups whose prompts differ only in their pictures, two members each, three turns,
/// a new picture every turn: the prompts and their images, turn by turn.
fn converse_vl(
    model: &Model,
    engine: &mut Engine,
    options: &GenerateOptions,
) -> (Vec<Vec<Generation>>, Vec<vagen_model::Prompt>) {
    let v = model.vision().unwrap();
    let first = |g: u8| {
        let messages = [Message::system("Navigate."), Message::user("<image>Where is the goal?")];
        model.encode_chat_images(&messages, &[picture(g + 1)], true).unwrap()
    };
    let mut prompts: Vec<vagen_model::Prompt> = (0..4).map(|i| first(i as u8 / 2)).collect();
    let mut all = vec![];
    for turn in 0..3u8 {
        let requests: Vec<EngineRequest> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| EngineRequest {
                key: i as u64,
                ids: p.ids.clone(),
                images: p.images.clone(),
                max_new_tokens: 6,
                seed: 10 * turn as u64 + i as u64,
                adapter: 0,
            })
            .collect();
        let out = model.generate_with(engine, &requests, options).unwrap();
        for (i, (p, g)) in prompts.iter_mut().zip(&out).enumerate() {
            let text = format!(
                "<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Turn {}<|im_end|>\n<|im_start|>assistant\n",
                turn + 2
            );
            let pixels = v.processor.process(&picture(10 * (turn + 1) + i as u8 / 2)).unwrap();
            let next = v.expand(&model.tokenizer.encode(&text).unwrap(), vec![pixels]).unwrap();
            p.ids.extend(&g.token_ids);
            p.ids.extend(next.ids);
            p.images.extend(next.images);
        }
        all.push(out);
    }
    (all, prompts)
}

#[test]
fn images_are_part_of_the_reused_prefix() {
    let model = vagen_model::default_vl_model(vagen_model::DEFAULT_SEED, LoadOptions::default()).unwrap();
    let options = sampling(6);
    let mut reusing = engine(EngineOptions::default());
    let mut full = engine(EngineOptions { reuse: false, ..Default::default() });
    let (a, _) = converse_vl(&model, &mut reusing, &options);
    let (b, _) = converse_vl(&model, &mut full, &options);
    // Same ids and log-probs: the groups' prompts are the same tokens until their pictures,
    // so a prefix shared past a picture would show here.
    assert_same(&a, &b, 1e-4);
    let s = reusing.stats();
    assert!(s.reused_tokens > 0 && s.shared_tokens > 0, "{s:?}");
    // The padded decode (what CUDA graphs capture): generated tokens placed past the prompt
    // by its M-RoPE delta, placeholders out of reach; with flash's attention and slots too.
    for flash_on_cpu in [false, true] {
        let mut padded = engine(EngineOptions { padded_decode_on_cpu: true, flash_on_cpu, ..Default::default() });
        assert_same(&a, &converse_vl(&model, &mut padded, &options).0, 1e-4);
        assert_eq!(padded.stats().padded_steps, padded.stats().decode_steps);
    }
    // The generation log-probs are a training forward's over the whole conversation.
    let v = model.vision().unwrap();
    let (gens, prompts) = converse_vl(&model, &mut engine(EngineOptions::default()), &options);
    let scored = vagen_model::sequence_logprobs_vl(&model.lm, v, &prompts, 1.0).unwrap();
    for (i, (p, s)) in prompts.iter().zip(&scored).enumerate() {
        // The last turn's answer sits before the last observation's tokens.
        let answer = &gens[2][i];
        let end = p.ids.len() - (p.ids.len() - p.ids.iter().rposition(|_| true).unwrap()) + 1;
        let _ = end;
        let tail_start = p.ids.windows(answer.token_ids.len()).rposition(|w| w == answer.token_ids.as_slice()).unwrap();
        let recomputed = &s[tail_start - 1..tail_start - 1 + answer.token_ids.len()];
        for (x, y) in answer.logprobs.iter().zip(recomputed) {
            assert!((x - y).abs() <= 1e-4 * y.abs().max(1.0), "row {i}: generation {x} vs training forward {y}");
        }
    }
}

#[test]
fn a_trajectory_may_start_from_a_row_its_owner_moves_on_from() {
    // One sequence per turn (no history): B's new prompt is A's last one (B reached the
    // state A left), while A's new prompt shares only the system prompt with its own row.
    let model = model();
    let options = sampling(5);
    let prompt = |obs: &str| {
        model.encode_chat(&[Message::system("FrozenLake. Reach the goal."), Message::user(obs)], true).unwrap()
    };
    let (p1, p2, p3) = (prompt("You are at row 1, column 2."), prompt("You are at row 3."), prompt("Goal ahead."));
    let turns = [vec![(0, p1.clone()), (1, p2)], vec![(0, p3), (1, p1)]];
    let run = |e: &mut Engine| -> Vec<Vec<Generation>> {
        turns
            .iter()
            .map(|turn| {
                let requests: Vec<EngineRequest> = turn
                    .iter()
                    .map(|(k, ids)| EngineRequest {
                        key: *k,
                        ids: ids.clone(),
                        images: vec![],
                        max_new_tokens: 5,
                        seed: *k,
                        adapter: 0,
                    })
                    .collect();
                model.generate_with(e, &requests, &options).unwrap()
            })
            .collect()
    };
    let mut reusing = engine(EngineOptions::default());
    let a = run(&mut reusing);
    let b = run(&mut engine(EngineOptions { reuse: false, ..Default::default() }));
    assert_same(&a, &b, 1e-4);
    let s = reusing.stats();
    assert!(s.shared_tokens >= p2_shared(&model), "{s:?}");
    assert_eq!(s.fallbacks, 2, "neither new prompt extends its own row: {s:?}");
}

/// At least the system prompt is shared whenever a prompt starts from another's row.
#[test]
fn the_padded_decode_cuda_graphs_replay_samples_what_the_eager_decode_does() {
    let model = model();
    let options = sampling(12);
    // Rows end at different steps, so the batch crosses buckets (6 rows in 8, then 4, 2, 1)
    // and the cache is reallocated between turns.
    let caps = |turn: usize, i: usize| 3 + (turn * 5 + i * 7) % 10;
    let budget = n(32);
    let padded =
        EngineOptions { max_batch: n(8), kv_cache_mib: budget, padded_decode_on_cpu: true, ..Default::default() };
    let mut eager = engine(EngineOptions { max_batch: n(8), kv_cache_mib: budget, ..Default::default() });
    let mut padded = engine(padded);
    let a = converse(&model, &mut eager, 2, 3, 3, &options, &caps);
    let b = converse(&model, &mut padded, 2, 3, 3, &options, &caps);
    assert_same(&a, &b, 1e-4);
    let (e, p) = (eager.stats(), padded.stats());
    assert_eq!((e.decode_steps, e.generated_tokens), (p.decode_steps, p.generated_tokens));
    assert_eq!((e.padded_steps, p.padded_steps), (0, p.decode_steps));
    // Allocated once, with room to spare: max_batch rows (8, where the eager engine took 6)
    // of twice the capacity the first turn asked.
    assert_eq!((e.kv_allocations, p.kv_allocations), (1, 1), "{e:?} {p:?}");
    assert_eq!(p.peak_kv_bytes * 6, e.peak_kv_bytes * 8 * 2, "{e:?} {p:?}");
    assert_eq!(p.graph_replays, 0, "no graphs on the CPU: the padded forward runs eagerly");
    // Attention the way the flash kernel computes it (each row's own positions, no mask),
    // in the prefill and the decode, padded or not.
    for on_padded in [true, false] {
        let options = EngineOptions { flash_on_cpu: true, padded_decode_on_cpu: on_padded, ..padded.options.clone() };
        let mut flash = engine(options);
        assert_same(&a, &converse(&model, &mut flash, 2, 3, 3, &sampling(12), &caps), 1e-4);
        let f = flash.stats();
        assert_eq!((p.flash_steps, f.flash_steps, f.padded_steps > 0), (0, f.decode_steps, on_padded));
    }
    // More requests than max_batch: the ninth waits and joins, padded like the others.
    let more = converse(&model, &mut padded, 3, 3, 1, &options, &|_, _| 4);
    assert!(more[0].iter().all(|g| !g.token_ids.is_empty()));
    assert_eq!(padded.stats().padded_steps, padded.stats().decode_steps);
    // Sampling in the padded step (top-k with top log-probs; greedy), and rows of two
    // settings in one batch, sampled apart from the padded step's logits.
    let top = GenerateOptions { top_k: 5, top_logprobs: 3, ..sampling(6) };
    let greedy = GenerateOptions { temperature: 0.0, top_logprobs: 2, ..sampling(6) };
    for settings in [vec![&top], vec![&greedy], vec![&top, &greedy]] {
        let a = alike(&model, &mut engine(EngineOptions::default()), &settings);
        let mut padded = engine(EngineOptions { padded_decode_on_cpu: true, ..Default::default() });
        let b = alike(&model, &mut padded, &settings);
        assert_same(std::slice::from_ref(&a), std::slice::from_ref(&b), 1e-4);
        for (g, h) in a.iter().zip(&b) {
            assert_eq!(g.top.len(), g.token_ids.len());
            for (x, y) in g.top.iter().flatten().zip(h.top.iter().flatten()) {
                assert!(x.0 == y.0 && (x.1 - y.1).abs() <= 1e-4, "{:?} vs {:?}", g.top, h.top);
            }
        }
        assert!(padded.stats().padded_steps > 0);
    }
}

/// Five requests of one prompt, request i sampled by `settings[i % len]` with seed i, run
/// to their ends through the step API.
fn alike(model: &Model, e: &mut Engine, settings: &[&GenerateOptions]) -> Vec<Generation> {
    let ids = model.encode_chat(&[Message::user("Which way to the goal?")], true).unwrap();
    let submitted: Vec<RequestId> = (0..5)
        .map(|i| {
            let request =
                EngineRequest { key: i, ids: ids.clone(), images: vec![], max_new_tokens: 6, seed: i, adapter: 0 };
            e.submit(model, request, settings[i as usize % settings.len()]).unwrap()
        })
        .collect();
    let mut done = vec![None; submitted.len()];
    while done.iter().any(Option::is_none) {
        for (id, g) in e.step(model).unwrap().finished {
            done[submitted.iter().position(|&s| s == id).unwrap()] = Some(g);
        }
    }
    done.into_iter().flatten().collect()
}

fn p2_shared(model: &Model) -> usize {
    model.encode_chat(&[Message::system("FrozenLake. Reach the goal.")], false).unwrap().len() - 1
}

/// Operators and host reads of steady decode steps (no row joining or leaving) at `batch`.
fn decode_step_cost(model: &Model, batch: usize) -> (vagen_model::OpCount, usize) {
    let mut e = engine(EngineOptions::default());
    let options = GenerateOptions { max_new_tokens: 12, ..sampling(12) };
    for key in 0..batch as u64 {
        let ids = model.tokenizer.encode(&format!("Turn 1. The lake, seed {key}")).unwrap();
        let request = EngineRequest { key, ids, images: vec![], max_new_tokens: 12, seed: key, adapter: 0 };
        e.submit(model, request, &options).unwrap();
    }
    e.step(model).unwrap();
    let reads = e.stats().host_reads;
    let (stepped, ops) = vagen_model::count_ops(|| (0..4).map(|_| e.step(model).unwrap()).collect::<Vec<_>>());
    assert!(stepped.iter().all(|s| s.sampled.len() == batch && s.finished.is_empty()));
    (ops.per(4), (e.stats().host_reads - reads) / 4)
}

#[test]
fn a_decode_step_reads_the_host_once_and_costs_the_same_operators_at_any_batch() {
    let model = model();
    let (one, reads) = decode_step_cost(&model, 1);
    let (eight, reads_eight) = decode_step_cost(&model, 8);
    assert_eq!((reads, reads_eight), (1, 1), "one read of the step's tokens");
    assert_eq!((one.waits, eight.waits), (0, 0), "nothing else waits for the device");
    assert_eq!(one.ops, eight.ops, "no operator per row");
    // Regression guards. Today a layer is 33 operators, 18 of them computing (the rest are
    // views), and a step adds 50-53, 29-34 computing (embedding, head, sampling, by the
    // sampling settings): 19.2 computing a layer on the 0.5B shape's 24 layers with greedy
    // sampling (`bench model --config qwen2.5-0.5b`).
    let layers = model.config().num_hidden_layers as u64;
    assert!(one.computing <= 18 * layers + 34, "{one:?}");
    assert!(one.ops <= 33 * layers + 53, "{one:?}");
}

/// Requests over the step API: six at first, a seventh submitted while steps run, request 2
/// aborted after the fourth step; returns each request's generation and the engine's figures.
fn mid_flight(model: &Model, options: EngineOptions, settings: &GenerateOptions) -> (Vec<Generation>, EngineStats) {
    let mut e = engine(options);
    let ids = |i: u64| model.encode_chat(&[Message::user(format!("Which way to goal {}?", i % 2))], true).unwrap();
    let request =
        |i: u64| EngineRequest { key: i, ids: ids(i), images: vec![], max_new_tokens: 10, seed: i, adapter: 0 };
    let mut submitted: Vec<RequestId> = (0..6).map(|i| e.submit(model, request(i), settings).unwrap()).collect();
    let mut done = vec![None; 7];
    for step in 1.. {
        if step == 3 {
            submitted.push(e.submit(model, request(6), settings).unwrap());
        }
        if step == 5 {
            e.abort(submitted[2]);
        }
        for (id, g) in e.step(model).unwrap().finished {
            done[submitted.iter().position(|&s| s == id).unwrap()] = Some(g);
        }
        if step > 3 && done.iter().all(Option::is_some) {
            break;
        }
    }
    (done.into_iter().flatten().collect(), e.stats())
}

#[test]
fn a_decode_step_launched_before_the_last_one_is_read_samples_what_it_would_have() {
    let model = model();
    // Rows end at a stop string, at steps only their tokens tell.
    let settings = GenerateOptions { stop: vec!["a".into()], top_logprobs: 2, ..sampling(10) };
    let (eager, _) = mid_flight(&model, EngineOptions::default(), &settings);
    let padded = EngineOptions { padded_decode_on_cpu: true, ..Default::default() };
    let (ahead, a) = mid_flight(&model, padded.clone(), &settings);
    let (read_first, r) = mid_flight(&model, EngineOptions { step_ahead: false, ..padded }, &settings);
    assert!(eager.iter().filter(|g| g.finish == FinishReason::Stop).count() >= 2, "{eager:?}");
    assert_same(std::slice::from_ref(&eager), &[read_first], 1e-4);
    let (x, y) = (&eager[2], &ahead[2]);
    // Aborted while a step ahead ran: that step's token is dropped with the row.
    assert_eq!((x.finish, y.finish), (FinishReason::Cancelled, FinishReason::Cancelled));
    assert!(x.token_ids.starts_with(&y.token_ids) && x.token_ids.len() <= y.token_ids.len() + 1, "{x:?} {y:?}");
    let others = |g: &[Generation]| -> Vec<Generation> {
        g.iter().enumerate().filter(|(i, _)| *i != 2).map(|(_, g)| g.clone()).collect()
    };
    assert_same(&[others(&eager)], &[others(&ahead)], 1e-4);
    for (x, y) in eager.iter().zip(&ahead).filter(|(x, _)| x.finish != FinishReason::Cancelled) {
        assert_eq!((&x.text, x.finish), (&y.text, y.finish));
        for (p, q) in x.top.iter().flatten().zip(y.top.iter().flatten()) {
            assert!(p.0 == q.0 && (p.1 - q.1).abs() <= 1e-4, "{:?} vs {:?}", x.top, y.top);
        }
    }
    assert_eq!((r.steps_ahead, r.discarded_tokens), (0, 0), "{r:?}");
    assert_eq!(r.host_reads, r.prefill_calls + r.decode_steps, "{r:?}");
    // Steps go ahead but after a join (the seventh request) or where every row ends at its
    // cap; a row that stopped had one token computed for nothing; still one read a step.
    // The last step, launched before the last rows were seen to end, is never read.
    assert!(a.steps_ahead * 2 > a.decode_steps && a.discarded_tokens > 0, "{a:?}");
    assert_eq!(a.host_reads + 1, a.prefill_calls + a.decode_steps, "{a:?}");
    assert_eq!(a.generated_tokens, ahead.iter().map(|g| g.token_ids.len()).sum::<usize>(), "{a:?}");
}
