//! FrozenLake as a `.wasm` plugin: the oracle always wins on non-slippery ice, a random
//! policy does clearly worse.

use vagen_runtime::Limits;
use vagen_tests::{load, play};

#[test]
fn oracle_solves_200_seeds_and_random_does_clearly_worse() {
    let (plugin, _cache) = load("frozenlake", Limits::default());
    let mut env = plugin.create("").unwrap();
    let oracle_wins = (0..200).filter(|&s| play(env.as_mut(), s, |e| e.oracle().unwrap().unwrap())).count();
    assert_eq!(oracle_wins, 200);

    let names = ["Left", "Down", "Right", "Up"];
    let mut k = 0usize;
    let random_wins = (0..200)
        .filter(|&s| {
            play(env.as_mut(), s, |_| {
                // A fixed pseudo-random walk: deterministic, no policy smarts.
                k = k.wrapping_mul(1103515245).wrapping_add(12345);
                names[(k >> 8) % 4].to_string()
            })
        })
        .count();
    assert!(random_wins < 120, "random won {random_wins} of 200");
}

#[test]
fn describe_state_and_system_prompt_come_through() {
    let (plugin, _cache) = load("frozenlake", Limits::default());
    let mut env = plugin.create(r#"{"preset": "ragen"}"#).unwrap();
    env.reset(3).unwrap();
    assert!(env.describe_state().unwrap().starts_with("The goal is "));
    let prompt = env.system_prompt().unwrap();
    assert!(prompt.contains("slippery") && prompt.contains("separated by \"||\""), "{prompt}");
}
