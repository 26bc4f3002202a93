//! Tests against a real worker: they need the ManiSkill venv (`cargo xtask maniskill`, which
//! `cargo xtask test` runs first) and fail naming it when it is missing.

use super::*;

fn env(json: &str) -> PrimitiveSkill {
    let config = vagen_sdk::resolve_config::<PrimitiveSkill>(json).expect("config");
    PrimitiveSkill::new(config).expect("a ManiSkill venv (cargo xtask maniskill)")
}

fn signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill").args([sig, &pid.to_string()]).status().expect("kill");
    assert!(status.success());
}

#[test]
fn a_killed_worker_fails_its_episode_by_name_and_the_next_episode_plays() {
    let mut e = env(r#"{"task": "StackThreeCube"}"#);
    e.try_reset(3).expect("reset");
    let first = e.oracle().expect("an oracle answer");
    signal(e.worker.as_ref().expect("a worker").pid(), "-KILL");
    let err = e.try_step(&first).expect_err("the worker is dead");
    assert!(matches!(&err, EnvError::Failed(m) if m.contains("worker died") && m.contains("signal: 9")), "{err}");
    // The next episode starts a new worker and plays to the end.
    e.try_reset(3).expect("reset after the failure");
    let mut won = false;
    for _ in 0..5 {
        let answer = e.oracle().expect("oracle");
        let s = e.try_step(&answer).expect("step");
        if s.done {
            won = s.success;
            break;
        }
    }
    assert!(won, "the oracle wins seed 3 after the restart");
}

#[test]
fn a_stalled_worker_is_killed_at_the_deadline_and_replaced() {
    let mut e = env(r#"{"task": "AlignTwoCube", "call_timeout_s": 2}"#);
    e.try_reset(0).expect("reset");
    let pid = e.worker.as_ref().expect("a worker").pid();
    signal(pid, "-STOP");
    let started = std::time::Instant::now();
    let err = e.try_step("pick(120,0,20)").expect_err("the worker is stopped");
    assert!(matches!(&err, EnvError::Failed(m) if m.contains("stalled") && m.contains("2.0 s")), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let obs = e.try_reset(0).expect("a new worker");
    assert!(obs.text.contains("Human Instruction: Please align"));
    assert_ne!(e.worker.as_ref().unwrap().pid(), pid);
}

#[test]
fn a_malformed_action_is_an_invalid_action_with_feedback_and_the_episode_goes_on() {
    let mut e = env(r#"{"task": "PlaceTwoCube"}"#);
    let start = e.try_reset(5).expect("reset");
    assert!(start.text.contains("[(80, -100, 0), (80, 100, 0), ("), "{}", start.text);
    for bad in ["pick(1,2)", "grab(10,10,10)", "place(x,y,z)", "pick(nan,0,20)", "<answer>"] {
        let s = e.try_step(bad).expect("a malformed action is not a failure");
        assert_eq!((s.valid_actions, s.done), (0, false), "{bad}");
        assert!(s.observation.text.contains("Invalid action"), "{bad}: {}", s.observation.text);
        assert_eq!(s.reward, 0.0, "nothing ran, nothing changed");
    }
    // A valid action before a malformed one runs; the malformed one is named.
    let pick = e.oracle().unwrap().split('|').next().unwrap().to_string();
    let s = e.try_step(&format!("{pick}|place(1,2)")).expect("step");
    assert_eq!(s.valid_actions, 1);
    assert!(s.observation.text.contains(&format!("['{pick}']")) && s.observation.text.contains("\"place(1,2)\""));
    assert!(e.describe_state().contains("The gripper holds the red cube"), "{}", e.describe_state());
}

#[test]
fn put_apple_in_drawer_is_refused_naming_its_assets() {
    let config = vagen_sdk::resolve_config::<PrimitiveSkill>(r#"{"task": "PutAppleInDrawer"}"#).unwrap();
    let Err(EnvError::BadConfig(m)) = PrimitiveSkill::new(config) else { panic!("accepted") };
    assert!(m.contains("partnet_mobility_cabinet") && m.contains("ycb:013_apple"), "{m}");
}

#[test]
fn a_dropped_instance_leaves_its_worker_to_the_next_one() {
    // Its own start timeout keeps this launch apart from the other tests' workers.
    let config = r#"{"task": "AlignTwoCube", "start_timeout_s": 177}"#;
    let mut a = env(config);
    let first = a.try_reset(2).expect("reset");
    let pid = a.worker.as_ref().unwrap().pid();
    drop(a);
    let mut b = env(config);
    let again = b.try_reset(2).expect("reset");
    assert_eq!(b.worker.as_ref().unwrap().pid(), pid, "the idle worker is reused");
    assert_eq!(first, again, "and the seed replays on it");
}
