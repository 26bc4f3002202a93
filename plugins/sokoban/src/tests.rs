use super::*;
use std::time::Instant;

fn params(width: usize, boxes: usize) -> Params {
    Params { width, height: width, boxes, search_depth: 30 }
}

/// Replays `moves` and says whether the level ends solved.
fn solves(level: &Level, moves: &[Dir]) -> bool {
    let mut l = level.clone();
    for &d in moves {
        l.push(d);
    }
    l.solved()
}

#[test]
fn five_hundred_seeds_generate_quickly_and_the_oracle_solves_each() {
    let p = params(6, 1);
    let started = Instant::now();
    for seed in 0..500 {
        let t = Instant::now();
        let level = generate(&p, seed);
        assert!(t.elapsed().as_secs_f64() < 0.5, "seed {seed} took {:?}", t.elapsed());
        assert!(!level.solved(), "seed {seed} starts solved");
        assert_eq!(level.boxes.len(), 1);
        let plan = solve(&level).unwrap_or_else(|| panic!("seed {seed} has no solution"));
        assert!(solves(&level, &plan), "seed {seed}");
    }
    eprintln!("500 levels generated and solved in {:?}", started.elapsed());
}

#[test]
fn larger_levels_with_two_boxes_are_solvable() {
    let p = params(8, 2);
    for seed in 0..50 {
        let level = generate(&p, seed);
        assert_eq!(level.boxes.len(), 2);
        let plan = solve(&level).unwrap_or_else(|| panic!("seed {seed} has no solution"));
        assert!(solves(&level, &plan));
    }
}

#[test]
fn the_seed_alone_decides_the_level() {
    let p = params(6, 1);
    assert_eq!(generate(&p, 9), generate(&p, 9));
    let distinct: std::collections::HashSet<_> = (0..60).map(|s| generate(&p, s)).collect();
    assert!(distinct.len() > 55, "only {} distinct levels in 60 seeds", distinct.len());
}

#[test]
fn pushing_follows_the_rules_and_rewards() {
    // #####
    // #P X_O
    let mut cells = vec![Cell::Wall; 7 * 3];
    for x in 1..6 {
        cells[7 + x] = Cell::Floor;
    }
    cells[7 + 5] = Cell::Target;
    let level = Level { width: 7, height: 3, cells, boxes: vec![7 + 3], player: 7 + 1 };
    let mut env = Sokoban::new(Config::default()).unwrap();
    env.level = level;
    let s = env.step("Up, Right");
    assert_eq!((s.valid_actions, s.effective_actions), (2, 1), "Up is blocked by the wall");
    assert!((s.reward - (-0.2)).abs() < 1e-9);
    let s = env.step("Right, Right");
    assert!(s.done && s.success);
    assert!((s.reward - (-0.2 + 1.0 + 10.0)).abs() < 1e-9, "{}", s.reward);
    assert!(s.observation.text.contains('√'), "{}", s.observation.text);
}

#[test]
fn the_oracle_plays_whole_episodes() {
    let mut env = Sokoban::new(Config::default()).unwrap();
    for seed in 0..100 {
        env.reset(seed);
        let mut done = false;
        for _ in 0..40 {
            let a = env.oracle().expect("an answer while unsolved");
            let s = env.step(&a);
            if s.done {
                assert!(s.success);
                done = true;
                break;
            }
        }
        assert!(done, "seed {seed}");
    }
}

#[test]
fn alternate_symbols_and_images() {
    let config = Config {
        symbols: Symbols { wall: 'W', ..Symbols::default() },
        observation: ObservationMode::TextAndImage,
        tile_pixels: 10,
        ..Config::default()
    };
    let mut env = Sokoban::new(config).unwrap();
    let obs = env.reset(4);
    assert!(obs.text.contains('W') && !obs.text.contains('#'));
    assert_eq!(obs.images.len(), 1);
    assert_eq!((obs.images[0].width, obs.images[0].height), (60, 60));
    assert!(env.describe_state().starts_with("0 of 1 boxes are on targets."));
}

#[test]
fn bad_values_name_the_field() {
    for (c, field) in [
        (Config { width: 3, ..Config::default() }, "width"),
        (Config { boxes: 5, ..Config::default() }, "boxes"),
        (Config { symbols: Symbols { floor: '#', ..Symbols::default() }, ..Config::default() }, "symbols"),
    ] {
        let Err(EnvError::BadConfig(m)) = Sokoban::new(c) else { panic!("accepted bad {field}") };
        assert!(m.contains(field), "{m}");
    }
}
