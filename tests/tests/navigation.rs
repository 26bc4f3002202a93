//! Navigation as a `.wasm` plugin: the oracle reaches the target, a random walk rarely
//! does, the seed alone decides every frame, and the native build draws the same bytes.

use vagen_runtime::{Environment, Limits};
use vagen_tests::{load, play};

const ACTIONS: [&str; 8] =
    ["moveahead", "moveback", "moveright", "moveleft", "rotateright", "rotateleft", "lookup", "lookdown"];

/// A fixed pseudo-random walk of five actions a turn: deterministic, no smarts.
fn random_walk(k: &mut usize) -> String {
    (0..5)
        .map(|_| {
            *k = k.wrapping_mul(1103515245).wrapping_add(12345);
            ACTIONS[(*k >> 8) % ACTIONS.len()]
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[test]
fn oracle_reaches_the_target_in_200_episodes_and_random_rarely_does() {
    let (plugin, _cache) = load("navigation", Limits::default());
    let mut env = plugin.create("").unwrap();
    let oracle_wins = (0..200).filter(|&s| play(env.as_mut(), s, |e| e.oracle().unwrap().unwrap())).count();
    assert!(oracle_wins >= 196, "oracle won {oracle_wins} of 200");
    let mut k = 0usize;
    let random_wins = (0..200).filter(|&s| play(env.as_mut(), s, |_| random_walk(&mut k))).count();
    assert!(random_wins < 60, "random won {random_wins} of 200");
}

#[test]
fn every_preset_is_solvable_by_the_oracle() {
    let (plugin, _cache) = load("navigation", Limits::default());
    for preset in ["common-sense", "complex-instruction", "visual-appearance", "spatial-relation", "long-horizon"] {
        let config = format!(r#"{{"preset": "{preset}", "image_width": 64, "image_height": 64}}"#);
        let mut env = plugin.create(&config).unwrap();
        let wins = (0..40).filter(|&s| play(env.as_mut(), s, |e| e.oracle().unwrap().unwrap())).count();
        assert_eq!(wins, 40, "{preset}");
    }
}

/// Every observation (text and pixels) and outcome of an episode under fixed answers.
fn transcript(env: &mut dyn Environment, seed: u64) -> Vec<String> {
    let mut out = vec![format!("{:?}", env.reset(seed).unwrap())];
    let mut k = seed as usize;
    for _ in 0..6 {
        let s = env.step(&random_walk(&mut k)).unwrap();
        let done = s.done;
        out.push(format!("{s:?}"));
        out.push(env.describe_state().unwrap());
        if done {
            break;
        }
    }
    out
}

#[test]
fn the_same_seed_gives_byte_identical_frames_across_instances_and_builds() {
    let (wasm, _a) = load("navigation", Limits::default());
    let (native, _b) = load("navigation.so", Limits::default());
    let config = r#"{"image_width": 96, "image_height": 96, "preset": "visual-appearance"}"#;
    let mut a = wasm.create(config).unwrap();
    let mut b = wasm.create(config).unwrap();
    let mut n = native.create(config).unwrap();
    for seed in [0, 1, 99, 4242, u64::MAX] {
        let ta = transcript(a.as_mut(), seed);
        transcript(b.as_mut(), seed.wrapping_add(1));
        assert!(ta == transcript(b.as_mut(), seed), "seed {seed}: two wasm instances differ");
        assert!(ta == transcript(n.as_mut(), seed), "seed {seed}: wasm and native differ");
    }
    let first = a.reset(7).unwrap();
    assert_eq!(first.images.len(), 1);
    assert_eq!((first.images[0].width, first.images[0].height), (96, 96));
    assert!(a.reset(8).unwrap().images[0].rgb != first.images[0].rgb);
}

#[test]
fn a_bad_config_is_refused_with_the_field_named() {
    let (plugin, _cache) = load("navigation", Limits::default());
    let err = plugin.create(r#"{"step_size": 0.3}"#).err().expect("refused").to_string();
    assert!(err.contains("step_size"), "{err}");
    let err = plugin.create(r#"{"preset": "nope"}"#).err().expect("refused").to_string();
    assert!(err.contains("long-horizon"), "{err}");
}
