#![no_main]
//! `cargo fuzz run frozenlake_episode --fuzz-dir tests/fuzz`

#[path = "episode.rs"]
mod episode;

use frozenlake::{Config, FrozenLake, ObservationMode};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let configs = [
        Config::default(),
        Config { slippery: true, max_actions_per_episode: 10, separator: "||".into(), ..Config::default() },
        Config { size: 8, frozen_prob: 0.5, observation: ObservationMode::TextAndImage, image_size: 32, ..Config::default() },
    ];
    episode::episode::<FrozenLake>(data, &configs);
});
