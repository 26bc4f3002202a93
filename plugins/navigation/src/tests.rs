use super::*;

fn env(json: &str) -> Navigation {
    Navigation::new(config(json)).unwrap()
}

fn config(json: &str) -> Config {
    vagen_sdk::resolve_config::<Navigation>(json).unwrap()
}

/// Plays the oracle; returns (success, actions used).
fn play_oracle(e: &mut Navigation, seed: u64) -> (bool, u32) {
    e.reset(seed);
    for _ in 0..200 {
        let answer = e.oracle().expect("the oracle has an answer while the episode runs");
        let s = e.step(&answer);
        assert_eq!(s.valid_actions, s.effective_actions, "seed {seed}: the oracle never bumps into anything");
        if s.done {
            return (s.success, e.actions_taken);
        }
    }
    panic!("seed {seed}: no end");
}

#[test]
fn the_oracle_reaches_the_target_in_every_preset() {
    for (preset, _) in config::PRESETS {
        let mut e = env(&format!(r#"{{"preset": "{preset}", "image_width": 32, "image_height": 32}}"#));
        for seed in 0..60 {
            let (success, used) = play_oracle(&mut e, seed);
            assert!(success, "{preset} seed {seed}");
            assert!(used <= e.config.max_actions_per_episode);
        }
    }
}

#[test]
fn success_pays_the_reward_once_and_ends_the_episode() {
    let mut e = env("{}");
    e.reset(4);
    let mut total = 0.0;
    loop {
        let s = e.step(&e.oracle().unwrap());
        total += s.reward;
        if s.done {
            assert!(s.success);
            assert!(s.observation.text.contains("success"), "{}", s.observation.text);
            break;
        }
    }
    assert_eq!(total, 10.0);
    let (x, z) = e.position();
    assert!(e.task.target().distance(x, z) <= 1.5);
}

#[test]
fn blocked_moves_say_so_and_are_not_effective() {
    let mut e = env("{}");
    // Walk ahead until something is in the way.
    e.reset(11);
    let mut seen_blocked = false;
    for _ in 0..6 {
        let s = e.step("moveahead, moveahead, moveahead, moveahead, moveahead");
        if s.valid_actions > s.effective_actions {
            assert!(s.observation.text.contains("moveahead (blocked)"), "{}", s.observation.text);
            seen_blocked = true;
        }
        if s.done {
            break;
        }
    }
    assert!(seen_blocked, "12+ metres straight ahead always meets a wall");
}

#[test]
fn looking_up_and_down_has_limits_and_changes_the_view() {
    let mut e = env(r#"{"image_width": 64, "image_height": 64}"#);
    let first = e.reset(2).images[0].clone();
    let s = e.step("lookup");
    assert_eq!(s.effective_actions, 1);
    assert!(s.observation.images[0] != first);
    let s = e.step("lookup");
    assert_eq!((s.valid_actions, s.effective_actions), (1, 0));
    assert!(s.observation.text.contains("not executed"));
    let s = e.step("lookdown, lookdown, lookdown, lookdown");
    assert_eq!((s.valid_actions, s.effective_actions), (4, 3));
    let back = e.step("lookup, lookup");
    assert!(back.observation.images[0] == first, "the same pose gives the same frame");
}

#[test]
fn frames_depend_on_the_seed_alone() {
    let mut a = env("{}");
    let mut b = env("{}");
    let fa = a.reset(77);
    b.reset(5);
    let fb = b.reset(77);
    assert!(fa == fb);
    assert_eq!(fa.images[0].rgb.len(), 256 * 256 * 3);
    assert!(a.reset(78).images[0] != fa.images[0]);
    let (sa, sb) = (a.step("rotateleft, moveahead"), b.step("rotateleft, moveahead"));
    assert!(sa != sb, "different seeds, different steps");
    a.reset(77);
    b.reset(77);
    assert!(a.step("rotateleft, moveahead") == b.step("rotateleft, moveahead"));
}

#[test]
fn the_view_shows_the_room_and_its_furniture() {
    let mut e = env("{}");
    let mut colours_seen = std::collections::BTreeSet::new();
    let mut objects_seen = 0;
    for seed in 0..20 {
        let obs = e.reset(seed);
        let img = &obs.images[0];
        // Even a bare wall shows two paint bands, skirting, floor tiles and ceiling, and
        // no background pixel shows through anywhere.
        let distinct: std::collections::BTreeSet<&[u8]> = img.rgb.chunks_exact(3).collect();
        colours_seen.insert(distinct.len());
        assert!(distinct.len() >= 5, "seed {seed}: {} colours", distinct.len());
        assert!(img.rgb.chunks_exact(3).all(|p| p != BACKGROUND), "seed {seed}: a hole in the room");
        objects_seen += e.visible.len();
    }
    assert!(objects_seen >= 20, "{objects_seen} objects in view over 20 starts");
    assert!(colours_seen.iter().any(|&n| n >= 30), "furniture adds colours: {colours_seen:?}");
}

#[test]
fn the_state_description_names_target_distance_and_direction() {
    let mut e = env("{}");
    e.reset(3);
    let d = e.describe_state();
    let t = e.task.target();
    assert!(d.starts_with(&format!("Target: the {} {}, ", t.colour.name(), t.kind.name())), "{d}");
    assert!(d.contains(" m ") && d.contains("You face") && d.contains("30 of 30 actions left"), "{d}");
    e.step("rotateleft");
    assert!(e.describe_state().contains("29 of 30 actions left"));
}

#[test]
fn text_observations_list_what_is_in_view() {
    let mut e = env(r#"{"preset": "text"}"#);
    let obs = e.reset(1);
    assert!(obs.images.is_empty());
    assert!(obs.text.contains("Instruction: Navigate to the "), "{}", obs.text);
    assert!(obs.text.contains("You see "), "{}", obs.text);
}

#[test]
fn the_episode_budget_ends_the_episode() {
    let mut e = env(r#"{"max_actions_per_episode": 7}"#);
    e.reset(0);
    let s = e.step("rotateleft, rotateleft, rotateleft, rotateleft, rotateleft");
    assert!(!s.done);
    let s = e.step("rotateleft, rotateleft, rotateleft, rotateleft, rotateleft");
    assert_eq!(s.valid_actions, 2);
    assert!(s.done && !s.success);
    assert!(s.observation.text.contains("No actions are left"));
}

#[test]
fn bad_configs_are_named() {
    for (json, needle) in [
        (r#"{"rooms": 9}"#, "rooms"),
        (r#"{"step_size": 0.3}"#, "step_size"),
        (r#"{"room_size": [8, 5]}"#, "room_size"),
        (r#"{"target_in_other_room": true}"#, "target_in_other_room"),
        (r#"{"fov_degrees": 200}"#, "fov_degrees"),
        (r#"{"image_width": 5000}"#, "image_width"),
    ] {
        let c = config(json);
        let err = c.validate().unwrap_err();
        assert!(format!("{err:?}").contains(needle), "{json}: {err:?}");
    }
}

#[test]
fn random_answers_never_panic() {
    let mut e = env(r#"{"image_width": 16, "image_height": 16}"#);
    let mut rng = vagen_sdk::Rng::new(9);
    for seed in 0..30 {
        e.reset(seed);
        for _ in 0..12 {
            let n = 1 + rng.below(6);
            let answer: Vec<&str> = (0..n).map(|_| *rng.choose(&ACTIONS).unwrap()).collect();
            if e.step(&answer.join(",")).done {
                break;
            }
        }
    }
    for junk in ["", "fly", "<image>", &"moveahead,".repeat(10_000)] {
        e.reset(1);
        e.step(junk);
    }
}
