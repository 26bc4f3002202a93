//! A plugin as an attacker would write it: native code behind a `.wasm` name, a turn limit
//! of `u32::MAX`, a 100 MB error full of terminal escapes, rewards and counts that overflow
//! sums, an oracle that traps. Each is contained: refused, capped or one failed episode.

use std::time::Duration;
use vagen_rollout::{EpisodeShape, Format, OraclePolicy, RandomPolicy, RolloutConfig, metrics, rollout};
use vagen_runtime::fuzz::{FuzzOptions, Reproducer, fuzz, replay};
use vagen_runtime::{Error, Limits, MAX_GUEST_TEXT};
use vagen_tests::{load, plugin_path, runtime};

#[test]
fn native_code_loads_only_from_a_native_name_and_from_shared_files_only_when_allowed() {
    let (rt, dir) = runtime(Limits::default());
    let disguised = dir.path().join("frozenlake.wasm");
    std::fs::copy(plugin_path("frozenlake.so"), &disguised).unwrap();
    let e = rt.load(&disguised).err().expect("an ELF file behind a .wasm name is refused");
    assert!(matches!(e, Error::NotWasm { .. }) && e.to_string().contains("native plugins load only from a .so"), "{e}");
    // A path read from a file someone may have shared: native only with the opt-in.
    let so = plugin_path("frozenlake.so");
    let shared = dir.path().join("reproducer.json");
    let e = rt.load_named_in(&so, &shared, false).err().expect("refused without --allow-native");
    assert!(matches!(e, Error::NativeNotAllowed { .. }) && e.to_string().contains("--allow-native"), "{e}");
    assert_eq!(rt.load_named_in(&so, &shared, true).unwrap().info().kind, "native");
    assert_eq!(rt.load_named_in(plugin_path("frozenlake"), &shared, false).unwrap().info().kind, "wasm");
    // Not a regular file: refused before anything is read.
    let e = rt.load("/dev/zero").err().expect("a device is no plugin");
    assert!(e.to_string().contains("not a regular file"), "{e}");
}

#[test]
fn the_hosts_turn_cap_bounds_a_plugin_that_asks_for_u32_max_turns() {
    let limits = Limits { max_turns: 40, ..Limits::default() };
    let (plugin, _cache) = load("endless", limits.clone());
    assert_eq!(plugin.manifest().default_max_turns, u32::MAX);
    assert_eq!(plugin.max_turns(None), 40);
    assert_eq!(plugin.max_turns(Some(7)), 7);
    // The fuzzer once sized its answer script by the manifest (96 GiB for u32::MAX).
    let opts = FuzzOptions { iterations: Some(3), duration: Some(Duration::from_secs(30)), ..Default::default() };
    let report = fuzz(plugin.as_ref(), &opts).unwrap();
    assert_eq!(report.episodes, 3);
    assert!(report.steps <= 3 * 42, "{} steps", report.steps);
    // The rollout driver: episodes end at the cap, not done.
    let config = RolloutConfig { format: Format::NoThink, ..Default::default() };
    let trajs = rollout(
        plugin.as_ref(),
        "",
        &[1, 2],
        &config,
        &EpisodeShape::default(),
        &mut RandomPolicy { format: Format::NoThink },
    )
    .unwrap();
    assert!(trajs.iter().all(|t| t.turns.len() == 40 && !t.done), "{:?}", trajs[0].turns.len());
    // A reproducer is a file anyone can send: its loops are checked before they run.
    let mut r = Reproducer::failure(plugin.as_ref(), "", 0, vec!["go".into(); 43], "x", None);
    let e = replay(plugin.as_ref(), &r).err().expect("more answers than an episode can take");
    assert!(matches!(e, Error::BadReproducer(_)), "{e}");
    r.answers.truncate(2);
    r.repeat = u32::MAX;
    assert!(replay(plugin.as_ref(), &r).unwrap_err().to_string().contains("repeat 4294967295"));
}

#[test]
fn a_100_mb_error_becomes_one_capped_line_without_escape_sequences() {
    let (plugin, _cache) = load("hostile", Limits::default());
    let mut env = plugin.create(r#"{"mode": "huge-error"}"#).unwrap();
    env.reset(0).unwrap();
    let e = env.step("go").unwrap_err().to_string();
    assert!(e.len() < MAX_GUEST_TEXT + 100, "{} bytes", e.len());
    assert!(e.contains("red alert\\nINFO all good\\u{202e}"), "{}", &e[..200]);
    assert!(!e.contains(['\n', '\u{1b}', '\u{202e}']), "{}", &e[..200]);
    assert!(e.ends_with("bytes more"), "{}", &e[e.len() - 60..]);
}

#[test]
fn a_reward_or_count_that_would_overflow_a_sum_fails_its_episode_naming_the_field() {
    let (plugin, _cache) = load("hostile", Limits::default());
    for (mode, field) in [("huge-reward", "reward 1e39 is beyond"), ("max-valid", "valid-actions 4294967295")] {
        let mut env = plugin.create(&format!(r#"{{"mode": "{mode}"}}"#)).unwrap();
        env.reset(0).unwrap();
        let e = env.step("go").unwrap_err();
        assert!(matches!(e, Error::Malformed { .. }) && e.to_string().contains(field), "{mode}: {e}");
        // Through the driver: every episode fails with that reason; the rollout goes on.
        let config = RolloutConfig { format: Format::NoThink, ..Default::default() };
        let policy = &mut OraclePolicy { format: Format::NoThink };
        let trajs = rollout(
            plugin.as_ref(),
            &format!(r#"{{"mode": "{mode}"}}"#),
            &[1, 2],
            &config,
            &EpisodeShape::default(),
            policy,
        )
        .unwrap();
        assert!(
            trajs.iter().all(|t| t.failure.as_ref().is_some_and(|f| f.to_string().contains(field))),
            "{:?}",
            trajs[0].failure
        );
        assert_eq!(metrics(&trajs).failed, 2);
    }
}

#[test]
fn failed_episodes_count_as_failures_and_a_trapping_oracle_fails_its_episode() {
    let (plugin, _cache) = load("hostile", Limits::default());
    let config = RolloutConfig { format: Format::NoThink, ..Default::default() };
    let seeds: Vec<u64> = (0..9).collect();
    // One seed in three cannot start; the others are won.
    let policy = &mut OraclePolicy { format: Format::NoThink };
    let trajs =
        rollout(plugin.as_ref(), r#"{"mode": "reset-fails"}"#, &seeds, &config, &EpisodeShape::default(), policy)
            .unwrap();
    let m = metrics(&trajs);
    assert_eq!((m.episodes, m.failed), (9, 3));
    assert_eq!(
        m.failures.iter().map(|(k, &n)| (k.as_str(), n)).collect::<Vec<_>>(),
        [("reset:failed", 3)],
        "counted by call and kind"
    );
    assert!((m.success - 6.0 / 9.0).abs() < 1e-12, "success {} counts the failed episodes", m.success);
    assert!((m.pass_at_group - 6.0 / 9.0).abs() < 1e-12);
    // An oracle that traps is the episode's failure, not an empty answer to act on.
    let trajs =
        rollout(plugin.as_ref(), r#"{"mode": "oracle-traps"}"#, &[1, 2], &config, &EpisodeShape::default(), policy)
            .unwrap();
    for t in &trajs {
        let f = t.failure.as_ref().expect("failed");
        assert_eq!((f.call, f.kind), (vagen_rollout::FailedCall::Oracle { turn: 0 }, "trap"), "{f:?}");
        assert!(f.to_string().contains("oracle"), "{f}");
        assert!(t.turns.is_empty());
    }
    // An oracle with no answer: in a format, an empty (invalid) answer the env is stepped
    // with; without one, nothing to send, so the episode fails, saying why.
    let silent = r#"{"mode": "oracle-none"}"#;
    let trajs = rollout(plugin.as_ref(), silent, &[1], &config, &EpisodeShape::default(), policy).unwrap();
    assert!(trajs[0].failure.is_none() && trajs[0].turns[0].answer.is_empty(), "{:?}", trajs[0].failure);
    let raw = RolloutConfig { format: Format::Raw, ..Default::default() };
    let trajs = rollout(
        plugin.as_ref(),
        silent,
        &[1],
        &raw,
        &EpisodeShape::default(),
        &mut OraclePolicy { format: Format::Raw },
    )
    .unwrap();
    let f = trajs[0].failure.as_ref().expect("failed");
    assert_eq!((f.call, f.kind), (vagen_rollout::FailedCall::Oracle { turn: 0 }, "no-answer"));
}

#[test]
fn compiled_code_is_run_from_the_cache_only_when_this_cache_wrote_it_for_that_plugin() {
    let (rt, dir) = runtime(Limits::default());
    let load = |name: &str| rt.load(plugin_path(name)).unwrap();
    let entry = |sha: &str| {
        std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.path()).find(|p| {
            p.file_name().unwrap().to_string_lossy().starts_with(sha) && p.extension().is_some_and(|x| x == "cwasm")
        })
    };
    let (fl, sk) = (load("frozenlake"), load("sokoban"));
    assert!(load("sokoban").info().from_cache, "an entry of this cache's own is used");
    // FrozenLake's compiled code put under Sokoban's key: refused, Sokoban compiled afresh.
    let (fl_entry, sk_entry) = (entry(&fl.info().sha256).unwrap(), entry(&sk.info().sha256).unwrap());
    std::fs::copy(&fl_entry, &sk_entry).unwrap();
    let again = load("sokoban");
    assert!(!again.info().from_cache && again.manifest().name == "sokoban");
    // A flipped byte in the code: refused.
    let mut bytes = std::fs::read(&fl_entry).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&fl_entry, bytes).unwrap();
    assert!(!load("frozenlake").info().from_cache);
    assert!(load("frozenlake").info().from_cache, "the rewritten entry is good again");
    // A folder of ours that others may write (made under umask 002) is made private first.
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let open = tempfile::tempdir().unwrap();
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let rt = vagen_runtime::Runtime::with_cache_dir(Limits::default(), Some(open.path().into())).unwrap();
    assert_eq!(std::fs::metadata(open.path()).unwrap().mode() & 0o777, 0o700);
    rt.load(plugin_path("frozenlake")).unwrap();
    assert!(rt.load(plugin_path("frozenlake")).unwrap().info().from_cache);
    // Another user's folder is not used at all (only root can make one to try).
    if std::fs::metadata("/proc/self").unwrap().uid() == 0 {
        let theirs = tempfile::tempdir().unwrap();
        std::os::unix::fs::chown(theirs.path(), Some(65534), Some(65534)).unwrap();
        let rt = vagen_runtime::Runtime::with_cache_dir(Limits::default(), Some(theirs.path().into())).unwrap();
        rt.load(plugin_path("frozenlake")).unwrap();
        assert!(!rt.load(plugin_path("frozenlake")).unwrap().info().from_cache);
        assert_eq!(std::fs::read_dir(theirs.path()).unwrap().count(), 0, "nothing written there");
    }
}

#[test]
fn a_plugin_that_calls_exit_is_named_as_such() {
    let (plugin, _cache) = load("hostile", Limits::default());
    let mut env = plugin.create(r#"{"mode": "exit"}"#).unwrap();
    env.reset(0).unwrap();
    let e = env.step("go").unwrap_err();
    assert!(matches!(e, Error::Trap { .. }) && e.to_string().contains("the plugin called exit("), "{e}");
}

#[test]
fn an_episode_and_all_instances_together_are_held_to_their_memory_caps() {
    // 1 MiB of text per step, never done: the episode fails at its cap, naming it.
    let (plugin, _cache) = load("endless", Limits { max_episode_mib: 4, ..Limits::default() });
    let mut env = plugin.create(r#"{"text_kib": 1024}"#).unwrap();
    env.reset(0).unwrap();
    let steps: Vec<_> = (0..6).map(|_| env.step("go")).collect();
    assert!(steps[..3].iter().all(Result::is_ok));
    let e = steps.iter().find_map(|s| s.as_ref().err()).expect("the cap is reached");
    assert!(e.to_string().contains("max_episode_mib 4"), "{e}");
    // Two instances that each stay under 64 MiB, but not under 80 MiB together.
    let limits = Limits { memory_mib: 64, total_memory_mib: 80, ..Limits::default() };
    let (plugin, _cache) = load("hostile", limits);
    let leak = r#"{"mode": "leak"}"#;
    let mut first = plugin.create(leak).unwrap();
    for seed in 0..45 {
        first.reset(seed).unwrap(); // 1 MiB more each time, never freed
    }
    let mut second = plugin.create(leak).unwrap();
    let e = (0..60).find_map(|seed| second.reset(seed).err()).expect("the pool runs out");
    assert!(matches!(e, Error::OutOfTotalMemory { cap_mib: 80, .. }), "{e}");
    // Memory comes back when an instance goes.
    drop(first);
    let mut third = plugin.create(leak).unwrap();
    (0..20).for_each(|seed| third.reset(seed).map(drop).unwrap());
}

#[test]
fn the_episode_loop_hands_over_chunks_and_stops_once_the_failure_rate_is_past() {
    use vagen_rollout::{Episodes, FailedCall, FailurePolicy};
    let (plugin, _cache) = load("hostile", Limits::default());
    let (config, shape) = (RolloutConfig { format: Format::NoThink, ..Default::default() }, EpisodeShape::groups_of(2));
    // Seeds 1, 4, 7, … cannot start: a third of the episodes fail, over a 20% limit.
    let failures = FailurePolicy { max_rate: 0.2, min_episodes: 8 };
    let env_config = r#"{"mode": "reset-fails"}"#;
    let episodes = Episodes { plugin: plugin.as_ref(), env_config, config: &config, shape, failures, chunk_groups: 3 };
    let seeds: Vec<u64> = (0..30).collect();
    let mut chunks = Vec::new();
    let policy = &mut OraclePolicy { format: Format::NoThink };
    let outcome = episodes
        .run(&seeds, policy, &mut |chunk| {
            chunks.push(chunk.iter().map(|t| (t.group, t.seed)).collect::<Vec<_>>());
            Ok(())
        })
        .unwrap();
    // Judged from 8 episodes on: after the second chunk (12 episodes, 4 failed).
    assert_eq!(chunks.len(), 2, "{chunks:?}");
    assert_eq!(chunks[1], vec![(3, 3), (3, 3), (4, 4), (4, 4), (5, 5), (5, 5)], "groups numbered across chunks");
    assert_eq!((outcome.trajectories.len(), outcome.requested), (12, 60));
    let e = outcome.verdict.unwrap_err();
    assert_eq!((e.failed, e.total, e.seed), (4, 12, 1));
    assert_eq!((e.failure.call, e.failure.kind), (FailedCall::Reset, "failed"));
    let r = e.reproducer(plugin.as_ref(), env_config);
    assert_eq!((r.seed, r.failed_call), (1, Some(0)), "a failed reset replays as call 0");
    // Within a lenient policy every chunk is played and nothing is judged too many.
    let lenient = Episodes { failures: FailurePolicy::new(0.5), ..episodes };
    let outcome = lenient.run(&seeds, policy, &mut |_| Ok(())).unwrap();
    assert_eq!(outcome.trajectories.len(), 60);
    assert!(outcome.verdict.is_ok());
}
