use super::*;

fn env(config: Config) -> FrozenLake {
    FrozenLake::new(config).unwrap()
}

fn run_oracle(e: &mut FrozenLake, seed: u64) -> Step {
    e.reset(seed);
    for _ in 0..20 {
        let answer = e.oracle().expect("oracle has an answer while running");
        let s = e.step(&answer);
        if s.done {
            return s;
        }
    }
    panic!("oracle did not finish seed {seed}");
}

#[test]
fn every_seed_gives_a_solvable_map_with_distinct_start_and_goal() {
    for seed in 0..2000 {
        let m = Map::generate(4, 0.8, seed);
        assert_ne!(m.start, m.goal);
        assert_eq!(m.tile(m.start), Tile::Frozen);
        assert!(m.steps_from(m.start).is_some(), "seed {seed}");
    }
    // Nearly all holes: the forced path still connects start and goal.
    let m = Map::generate(6, 0.01, 3);
    assert!(m.steps_from(m.start).is_some());
}

#[test]
fn the_seed_alone_decides_the_map() {
    assert_eq!(Map::generate(4, 0.8, 42), Map::generate(4, 0.8, 42));
    let distinct: std::collections::HashSet<_> = (0..50).map(|s| format!("{:?}", Map::generate(4, 0.8, s))).collect();
    assert!(distinct.len() > 40, "only {} distinct maps in 50 seeds", distinct.len());
}

#[test]
fn oracle_succeeds_on_non_slippery_lakes() {
    let mut e = env(Config::default());
    for seed in 0..200 {
        let s = run_oracle(&mut e, seed);
        assert!(s.success, "seed {seed}");
        assert_eq!(s.reward, 10.0);
    }
}

#[test]
fn oracle_walks_a_shortest_path_and_breaks_ties_by_seed() {
    let mut e = env(Config { max_actions_per_turn: 1, ..Config::default() });
    let (mut ties, mut not_first) = (0, 0);
    for seed in 0..200 {
        e.reset(seed);
        let shortest = e.map.steps_from(e.player).unwrap();
        let (dx, dy) = (e.player.0.abs_diff(e.map.goal.0), e.player.1.abs_diff(e.map.goal.1));
        assert!(shortest >= dx + dy, "seed {seed}: {shortest} steps, closer than the goal's distance");
        let first = e.oracle().unwrap();
        e.reset(seed);
        assert_eq!(e.oracle().unwrap(), first, "seed {seed}: a replay answers alike");
        for turn in 1..=shortest {
            let options = e.map.shortest_moves(e.player, &e.map.steps_to_goal());
            let answer = e.oracle().unwrap();
            let pick = options.iter().position(|&m| ACTIONS[m as usize] == answer);
            assert!(pick.is_some(), "seed {seed}: {answer} is not on a shortest path");
            if options.len() > 1 {
                ties += 1;
                not_first += usize::from(pick != Some(0));
            }
            assert_eq!(e.step(&answer).done, turn == shortest, "seed {seed} turn {turn}");
        }
    }
    // A fixed tie-break would always take the first option.
    assert!(ties > 100, "{ties} turns with two shortest moves");
    assert!((ties / 3..ties * 2 / 3).contains(&not_first), "{not_first} of {ties} ties took a later option");
}

#[test]
fn walking_into_a_hole_ends_the_episode_without_success() {
    let mut e = env(Config::default());
    // Find a seed whose start has a hole next to it, then step into it.
    for seed in 0..500 {
        e.reset(seed);
        let Some(m) =
            Move::ALL.into_iter().find(|&m| e.map.neighbour(e.player, m).is_some_and(|q| e.map.tile(q) == Tile::Hole))
        else {
            continue;
        };
        let s = e.step(ACTIONS[m as usize]);
        assert!(s.done && !s.success);
        assert_eq!((s.valid_actions, s.effective_actions, s.reward), (1, 1, 0.0));
        assert!(s.observation.text.contains('X'), "{}", s.observation.text);
        return;
    }
    panic!("no seed with a hole next to the start");
}

#[test]
fn edge_moves_are_valid_but_not_effective() {
    let mut e = env(Config::default());
    e.reset(1);
    e.player = (0, 0);
    e.map.tiles[0] = Tile::Frozen;
    let s = e.step("Left, Up");
    assert_eq!((s.valid_actions, s.effective_actions), (2, 0));
    assert!(s.observation.text.contains("2 of them hit the edge"), "{}", s.observation.text);
    let s = e.step("Fly, Left");
    assert_eq!(s.valid_actions, 0, "VAGEN stops at the first invalid action");
    assert!(s.observation.text.contains("Invalid action \"Fly\""));
}

#[test]
fn slippery_episodes_replay_exactly() {
    let mut a = env(Config { slippery: true, ..Config::default() });
    let mut b = env(Config { slippery: true, ..Config::default() });
    for seed in 0..20 {
        a.reset(seed);
        b.reset(seed);
        for _ in 0..5 {
            let (sa, sb) = (a.step("Right, Down, Left"), b.step("Right, Down, Left"));
            assert_eq!(sa, sb);
            if sa.done {
                break;
            }
        }
    }
}

#[test]
fn image_observations_match_their_markers() {
    let mut e = env(Config { observation: ObservationMode::TextAndImage, ..Config::default() });
    let obs = e.reset(5);
    assert_eq!(obs.text.matches("<image>").count(), obs.images.len());
    assert_eq!(obs.images.len(), 1);
    let img = &obs.images[0];
    assert_eq!((img.width, img.height, img.rgb.len()), (256, 256, 256 * 256 * 3));
}

/// The centred view: 2·size − 1 cells a side, the player always in the middle cell, what is
/// left of it always in the cell left of the middle, cells off the lake dark.
#[test]
fn the_centred_view_keeps_the_player_in_the_middle_cell() {
    let config =
        Config { observation: ObservationMode::Image, view: View::Centered, image_size: 196, ..Config::default() };
    let mut e = env(config);
    e.reset(0);
    e.map.tiles = vec![Tile::Frozen; 16];
    e.map.goal = (3, 3);
    e.map.tiles[15] = Tile::Goal;
    e.map.tiles[4] = Tile::Hole; // (0, 1)
    let pixel = |img: &vagen_sdk::Image, cx: u32, cy: u32| {
        let i = ((cy * 28 + 14) * img.width + cx * 28 + 14) as usize * 3;
        [img.rgb[i], img.rgb[i + 1], img.rgb[i + 2]]
    };
    for player in [(1, 1), (0, 0), (3, 2)] {
        e.player = player;
        let img = render::image(&e.map, e.player, 196, View::Centered);
        assert_eq!((img.width, img.height), (196, 196));
        assert_eq!(pixel(&img, 3, 3), [214, 48, 49], "the player at the centre for {player:?}");
        // The hole at (0, 1) is drawn where it lies relative to the player, off-lake cells dark.
        let (hx, hy) = (3 + 0 - player.0 as i64, 3 + 1 - player.1 as i64);
        assert_eq!(pixel(&img, hx as u32, hy as u32), [22, 40, 92], "the hole for {player:?}");
        let off = (3 - player.0 as i64 - 1, 3 - player.1 as i64);
        if off.0 >= 0 {
            assert_eq!(pixel(&img, off.0 as u32, off.1 as u32), [70, 76, 84], "left of the lake for {player:?}");
        }
    }
}

#[test]
fn describe_state_names_the_goal_and_the_moves_into_a_hole() {
    let mut e = env(Config::default());
    e.reset(0);
    e.player = (1, 1);
    e.map.goal = (2, 3);
    e.map.tiles = vec![Tile::Frozen; 16];
    e.map.tiles[e.map.goal.1 * 4 + e.map.goal.0] = Tile::Goal;
    e.map.tiles[4] = Tile::Hole; // (0, 1): left of the player
    assert_eq!(
        e.describe_state(),
        "The goal is 2 rows below and 1 column to the right of you. Holes next to you: Left."
    );
    e.player = (3, 3);
    assert_eq!(e.describe_state(), "The goal is 1 column to the left of you (same row). No hole next to you.");
    e.map.tiles[2 * 4 + 1] = Tile::Hole; // (1, 2): right of (0, 2), whose Up is (0, 1)
    e.player = (0, 2);
    assert_eq!(
        e.describe_state(),
        "The goal is 1 row below and 2 columns to the right of you. Holes next to you: Right, Up."
    );
}

#[test]
fn bad_values_are_rejected_with_the_field_name() {
    for (c, field) in [
        (Config { size: 1, ..Config::default() }, "size"),
        (Config { frozen_prob: 0.0, ..Config::default() }, "frozen_prob"),
        (Config { separator: " ".into(), ..Config::default() }, "separator"),
        (Config { success_reward: f64::NAN, ..Config::default() }, "success_reward"),
    ] {
        let Err(EnvError::BadConfig(m)) = FrozenLake::new(c) else { panic!("accepted bad {field}") };
        assert!(m.contains(field), "{m}");
    }
}
