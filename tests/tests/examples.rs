//! The examples in `examples/` do what their docs say.

use vagen_runtime::Limits;
use vagen_tests::load;

#[test]
fn the_minimal_example_env_plays_by_its_rules() {
    let (plugin, _cache) = load("guess-number", Limits::default());
    let mut env = plugin.create("").unwrap();
    assert_eq!(plugin.manifest().name, "guess-number");
    // Binary search finds the number within the manifest's 4 turns, for every seed.
    for seed in 0..50 {
        env.reset(seed).unwrap();
        let (mut lo, mut hi) = (1, 10);
        let won = (0..4).any(|_| {
            let g = (lo + hi) / 2;
            let s = env.step(&g.to_string()).unwrap();
            match s.observation.text.as_str() {
                "Higher." => lo = g + 1,
                "Lower." => hi = g - 1,
                _ => {}
            }
            s.success
        });
        assert!(won, "seed {seed}");
    }
}
