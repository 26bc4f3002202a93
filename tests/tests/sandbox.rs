//! A hostile plugin must end in a typed error, and never take the host or a healthy
//! neighbour in the same pool down with it.

use std::time::{Duration, Instant};
use vagen_runtime::{EnvPool, Error, Limits};
use vagen_tests::load;

fn limits() -> Limits {
    Limits { call_timeout_ms: 500, memory_mib: 64, ..Limits::default() }
}

/// Env 0 misbehaves in its first step; env 1 is healthy and must finish its episode.
fn hostile_beside_healthy(mode: &str) -> (Error, Duration) {
    let (plugin, _cache) = load("hostile", limits());
    let bad = plugin.create(&format!(r#"{{"mode": "{mode}"}}"#)).unwrap();
    let good = plugin.create(r#"{"mode": "healthy"}"#).unwrap();
    let mut pool = EnvPool::new(vec![bad, good]);
    for r in pool.reset_all(&[1, 2]) {
        r.unwrap();
    }
    let started = Instant::now();
    let first = pool.step_all(&[Some("go".into()), Some("go".into())]);
    let elapsed = started.elapsed();
    let mut results = first.into_iter();
    let err = results.next().unwrap().unwrap().expect_err("the hostile step must fail");
    results.next().unwrap().unwrap().expect("the healthy env steps normally");
    // The healthy env finishes its episode; the faulty one is skipped (None).
    let mut done = false;
    for _ in 0..5 {
        let r = pool.step_all(&[None, Some("go".into())]);
        assert!(r[0].is_none());
        let s = r[1].as_ref().unwrap().as_ref().expect("healthy env keeps working");
        if s.done {
            assert!(s.success);
            done = true;
            break;
        }
    }
    assert!(done, "the healthy env finished its episode");
    // The faulty instance was discarded; a reset brings up a fresh one.
    let env = pool.get_mut(0);
    env.reset(3).expect("re-created after the fault");
    (err, elapsed)
}

#[test]
fn an_infinite_loop_is_a_timeout_within_twice_the_deadline() {
    let (err, elapsed) = hostile_beside_healthy("loop");
    assert!(matches!(err, Error::Timeout { call: "step", .. }), "{err}");
    assert!(elapsed < Duration::from_millis(1000), "took {elapsed:?} for a 500 ms deadline");
    assert!(elapsed >= Duration::from_millis(500), "ended before the deadline: {elapsed:?}");
}

#[test]
fn unbounded_allocation_is_out_of_memory() {
    let (err, _) = hostile_beside_healthy("alloc");
    let Error::OutOfMemory { call, cap_mib, requested_mib } = err else { panic!("{err}") };
    assert_eq!((call, cap_mib), ("step", 64));
    assert!(requested_mib > 64);
}

#[test]
fn a_panic_is_a_trap_that_carries_the_message() {
    let (err, _) = hostile_beside_healthy("panic");
    let Error::Trap { call, stderr, .. } = &err else { panic!("{err}") };
    assert_eq!(*call, "step");
    assert!(stderr.contains("hostile plugin panics on purpose"), "stderr: {stderr}");
    assert!(err.to_string().contains("panics on purpose"));
}

#[test]
fn the_guest_cannot_open_files_or_see_the_environment() {
    let (plugin, _cache) = load("hostile", limits());
    let mut env = plugin.create(r#"{"mode": "open-file"}"#).unwrap();
    env.reset(0).unwrap();
    let text = env.step("go").unwrap().observation.text;
    assert!(text.starts_with("open failed:"), "{text}");
    assert!(text.contains("list failed:"), "{text}");
    assert!(text.ends_with("0 env vars"), "{text}");
}

#[test]
fn a_fuel_budget_ends_a_loop_as_out_of_fuel() {
    let limits = Limits { fuel_millions_per_call: Some(50), call_timeout_ms: 10_000, ..limits() };
    let (plugin, _cache) = load("hostile", limits);
    let mut env = plugin.create(r#"{"mode": "loop"}"#).unwrap();
    env.reset(0).unwrap();
    let err = env.step("go").unwrap_err();
    assert!(matches!(err, Error::OutOfFuel { call: "step", fuel: 50_000_000 }), "{err}");
}

#[test]
fn malformed_results_are_typed_errors_naming_the_problem() {
    let (plugin, _cache) = load("hostile", limits());
    for (mode, needle) in [("wrong-image", "1 images"), ("nan-reward", "reward NaN")] {
        let mut env = plugin.create(&format!(r#"{{"mode": "{mode}"}}"#)).unwrap();
        env.reset(0).unwrap();
        let err = env.step("go").unwrap_err();
        assert!(matches!(err, Error::Malformed { call: "step", .. }), "{mode}: {err}");
        assert!(err.to_string().contains(needle), "{mode}: {err}");
        assert!(err.is_fault());
    }
}

#[test]
fn output_beyond_the_cap_is_dropped_without_failing_the_guest() {
    // 100,000 lines of output are 100,000 host calls: on a loaded machine they take longer
    // than the other tests' 500 ms deadline, which is not what this test is about.
    let (plugin, _cache) = load("hostile", Limits { output_bytes: 1024, call_timeout_ms: 20_000, ..limits() });
    let mut env = plugin.create(r#"{"mode": "chatty"}"#).unwrap();
    env.reset(0).unwrap();
    assert_eq!(env.step("go").unwrap().observation.text, "step 1");
}

#[test]
fn step_before_reset_and_after_done_are_errors_not_crashes() {
    let (plugin, _cache) = load("hostile", limits());
    let mut env = plugin.create("").unwrap();
    assert!(matches!(env.step("go"), Err(Error::InvalidState(_))));
    env.reset(0).unwrap();
    while !env.step("go").unwrap().done {}
    let err = env.step("go").unwrap_err();
    assert!(matches!(&err, Error::InvalidState(m) if m.contains("after the episode ended")), "{err}");
    assert!(!err.is_fault());
    env.reset(1).expect("a finished episode can be followed by another");
}

#[test]
fn sleeping_takes_virtual_time_not_host_time() {
    // A real one-hour sleep would hold the host thread where no deadline reaches it.
    let (plugin, _cache) = load("hostile", limits());
    let mut env = plugin.create(r#"{"mode": "sleep"}"#).unwrap();
    env.reset(0).unwrap();
    let started = Instant::now();
    let text = env.step("go").unwrap().observation.text;
    assert!(started.elapsed() < Duration::from_millis(500), "slept on the host for {:?}", started.elapsed());
    assert_eq!(text, "slept 3600 s", "the guest's clock moved by the sleep");
}
