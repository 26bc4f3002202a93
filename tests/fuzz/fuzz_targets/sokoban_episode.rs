#![no_main]
//! `cargo fuzz run sokoban_episode --fuzz-dir tests/fuzz`

#[path = "episode.rs"]
mod episode;

use sokoban::{Config, ObservationMode, Sokoban};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let configs = [
        Config::default(),
        Config { width: 8, height: 8, boxes: 2, ..Config::default() },
        Config { observation: ObservationMode::TextAndImage, tile_pixels: 4, max_actions_per_episode: 10, ..Config::default() },
    ];
    episode::episode::<Sokoban>(data, &configs);
});
