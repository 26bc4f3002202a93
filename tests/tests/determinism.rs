//! The seed alone decides an episode: byte-identical across fresh instances.

use vagen_runtime::{Environment, Limits};
use vagen_tests::load;

/// Every observation, image byte, reward and flag of an episode driven by fixed answers.
fn transcript(env: &mut dyn Environment, seed: u64, answers: &[&str]) -> Vec<String> {
    let obs = env.reset(seed).unwrap();
    let mut out = vec![format!("{:?}", obs)];
    out.extend(obs.images.iter().map(|i| format!("{:?}", i.rgb)));
    for a in answers {
        let s = env.step(a).unwrap();
        out.push(format!("{:?}", s));
        out.extend(s.observation.images.iter().map(|i| format!("{:?}", i.rgb)));
        if s.done {
            break;
        }
    }
    out
}

#[test]
fn frozenlake_same_seed_gives_identical_episodes_with_images() {
    let (plugin, _cache) = load("frozenlake", Limits::default());
    let config = r#"{"observation": "text-and-image", "slippery": true}"#;
    let answers = ["Right, Down", "Down", "Left, Up, Right", "Down, Down", "Right"];
    let mut first_images = 0;
    for seed in [0, 1, 7, 12345, u64::MAX] {
        let mut a = plugin.create(config).unwrap();
        let mut b = plugin.create(config).unwrap();
        let (ta, tb) = (transcript(a.as_mut(), seed, &answers), transcript(b.as_mut(), seed, &answers));
        assert_eq!(ta, tb, "seed {seed}");
        first_images += a.reset(seed).unwrap().images.len();
        // An instance that has run other episodes replays the seed the same way.
        transcript(a.as_mut(), seed.wrapping_add(1), &answers);
        assert_eq!(transcript(a.as_mut(), seed, &answers), tb, "seed {seed} after another episode");
    }
    assert_eq!(first_images, 5, "one image per observation");
    let mut e = plugin.create(config).unwrap();
    assert_ne!(transcript(e.as_mut(), 1, &answers), transcript(e.as_mut(), 2, &answers));
}

#[test]
fn wasi_randomness_and_clocks_are_functions_of_the_seed() {
    let (plugin, _cache) = load("hostile", Limits::default());
    let run = |seed| {
        let mut env = plugin.create(r#"{"mode": "random"}"#).unwrap();
        env.reset(seed).unwrap();
        env.step("go").unwrap().observation.text
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5), run(6));
    // Re-seeded at every reset: an instance's history does not leak into an episode.
    let mut env = plugin.create(r#"{"mode": "random"}"#).unwrap();
    let mut episode = |seed| {
        env.reset(seed).unwrap();
        env.step("go").unwrap().observation.text
    };
    let (a, _, c) = (episode(5), episode(6), episode(5));
    assert_eq!(a, c);
    assert_eq!(a, run(5));
}
