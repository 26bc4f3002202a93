//! Reward functions as components: loaded and scored as the contract says, and contained
//! when they misbehave, with the judge as their only capability.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vagen_runtime::reward::{Judge, JudgePart, JudgeRequest, Turn};
use vagen_runtime::{Error, Limits};
use vagen_tests::{plugin_path, runtime};

fn turns(n: usize) -> Vec<Turn> {
    (0..n)
        .map(|i| Turn {
            env_name: "frozenlake".into(),
            format: "grounding".into(),
            response: format!("<observation>goal below</observation><answer>Down</answer> #{i}"),
            observation: Some("The goal is below you".into()),
            answer: Some("Down".into()),
            format_ok: i % 2 == 0,
            env_reward: i as f64,
            state_before: "The goal is below you.".into(),
            state_after: "You are on the goal.".into(),
            ..Turn::default()
        })
        .collect()
}

fn limits() -> Limits {
    Limits { call_timeout_ms: 500, memory_mib: 64, ..Limits::default() }
}

#[test]
fn the_rule_based_reward_scores_grounding_for_turns_in_format() {
    let (rt, _dir) = runtime(limits());
    let plugin = rt.load_reward(plugin_path("state-match")).unwrap();
    let m = plugin.manifest();
    assert_eq!(m.name, "state-match");
    assert!(m.default_config.contains("grounding_weight"), "{m:?}");
    let mut scorer = plugin.create("{}", None).unwrap();
    let scores = scorer.score(&turns(4)).unwrap();
    assert_eq!(scores.len(), 4);
    for (i, s) in scores.iter().enumerate() {
        let s = s.as_ref().unwrap();
        let grounding = s.metrics.iter().find(|m| m.name == "grounding").unwrap().value;
        // "the goal is below you" against "The goal is below you.": every word matches.
        assert!((grounding - 1.0).abs() < 1e-12);
        let expected = if i % 2 == 0 { 0.5 } else { 0.0 };
        assert!((s.reward - expected).abs() < 1e-12, "turn {i}: {s:?}");
    }
    let err = plugin.create(r#"{"threshold": 3}"#, None).err().unwrap();
    assert!(matches!(&err, Error::BadConfig(m) if m.contains("threshold")), "{err}");
    let err = plugin.create(r#"{"grounding": 1}"#, None).err().unwrap();
    assert!(matches!(&err, Error::BadConfig(m) if m.contains("grounding")), "{err}");
}

#[test]
fn a_hostile_reward_is_contained_with_a_typed_error_and_the_next_call_works() {
    let (rt, _dir) = runtime(limits());
    let plugin = rt.load_reward(plugin_path("hostile-reward")).unwrap();
    let cases: [(&str, fn(&Error) -> bool); 4] = [
        ("loop", |e| matches!(e, Error::Timeout { call: "score", .. })),
        ("memory", |e| matches!(e, Error::OutOfMemory { call: "score", .. })),
        (
            "trap",
            |e| matches!(e, Error::Trap { call: "score", message, .. } if message.contains("unreachable") || message.contains("panic")),
        ),
        (
            "short",
            |e| matches!(e, Error::Malformed { call: "score", detail } if detail.contains("2 scores for 3 turns")),
        ),
    ];
    for (mode, expected) in cases {
        let mut scorer = plugin.create(&format!(r#"{{"mode": "{mode}"}}"#), None).unwrap();
        let started = Instant::now();
        let err = scorer.score(&turns(3)).unwrap_err();
        assert!(expected(&err), "{mode}: {err}");
        assert!(started.elapsed() < Duration::from_secs(5), "{mode} took {:?}", started.elapsed());
    }
    // Turn-level failures are per turn, never a silent 0.
    let mut nan = plugin.create(r#"{"mode": "nan"}"#, None).unwrap();
    for s in nan.score(&turns(2)).unwrap() {
        assert!(s.unwrap_err().contains("not a finite number"));
    }
    // A reward past max_abs_reward (1e6, as environments') is refused like a NaN (issue 41:
    // 1e300 was accepted and logged).
    let mut far = plugin.create(r#"{"mode": "constant", "value": 1e300}"#, None).unwrap();
    for s in far.score(&turns(2)).unwrap() {
        assert!(s.unwrap_err().contains("max_abs_reward"));
    }
    let mut refuse = plugin.create(r#"{"mode": "refuse"}"#, None).unwrap();
    assert!(refuse.score(&turns(2)).unwrap()[1].as_ref().unwrap_err().contains("cannot score"));
    // Huge answers: the error text is cut to a readable length, too many metrics refuse the turn.
    let mut huge = plugin.create(r#"{"mode": "huge"}"#, None).unwrap();
    let s = huge.score(&turns(2)).unwrap();
    assert!(s[0].as_ref().unwrap_err().len() < 5_000, "the error is cut");
    assert!(s[1].as_ref().unwrap_err().contains("max_metrics"), "{:?}", s[1].as_ref().err());
    // After a fault the scorer is re-created and scores again.
    let mut trap = plugin.create(r#"{"mode": "trap"}"#, None).unwrap();
    assert!(trap.score(&turns(1)).is_err());
    let mut echo = plugin.create(r#"{"mode": "echo"}"#, None).unwrap();
    let s = echo.score(&turns(3)).unwrap();
    assert_eq!(s[2].as_ref().unwrap().reward, 2.0);
    let err = plugin.create(r#"{"mode": "fly"}"#, None).err().unwrap();
    assert!(matches!(&err, Error::BadConfig(m) if m.contains("fly")), "{err}");
}

/// A judge that answers YES to odd turns, counts its calls, and can take its time.
struct Scripted {
    calls: AtomicUsize,
    asked: Mutex<Vec<String>>,
    delay: Duration,
}

impl Judge for Scripted {
    fn complete(&self, requests: &[JudgeRequest]) -> Vec<Result<String, String>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        requests
            .iter()
            .map(|r| {
                let JudgePart::Text(t) = &r.messages[0].content[0] else { return Err("no text".into()) };
                self.asked.lock().unwrap().push(t.clone());
                let odd = t.trim_end().ends_with(['1', '3', '5', '7', '9']);
                Ok(if odd { "YES".into() } else { "NO".into() })
            })
            .collect()
    }
}

#[test]
fn the_judge_is_asked_once_per_batch_and_its_time_is_not_the_components() {
    let (rt, _dir) = runtime(limits());
    let plugin = rt.load_reward(plugin_path("hostile-reward")).unwrap();
    // The judge takes three times the component's deadline: its time is the host's.
    let judge = Arc::new(Scripted { calls: 0.into(), asked: Mutex::new(vec![]), delay: Duration::from_millis(1500) });
    let mut scorer = plugin.create(r#"{"mode": "judge"}"#, Some(judge.clone())).unwrap();
    let scores = scorer.score(&turns(4)).unwrap();
    assert_eq!(judge.calls.load(Ordering::SeqCst), 1, "one judge call for the batch");
    assert_eq!(judge.asked.lock().unwrap().len(), 4);
    let rewards: Vec<f64> = scores.iter().map(|s| s.as_ref().unwrap().reward).collect();
    assert_eq!(rewards, [0.0, 1.0, 0.0, 1.0]);
    // Without a judge every request is an error, and so every turn.
    let mut alone = plugin.create(r#"{"mode": "judge"}"#, None).unwrap();
    for s in alone.score(&turns(2)).unwrap() {
        assert!(s.unwrap_err().contains("no judge"));
    }
}

/// Issue 41: judge calls used to credit a tick each, however short, so a component calling
/// the judge in a loop was never interrupted. Now: no requests traps the call; more than
/// `max_judge_calls` calls traps it; only the time really spent in the judge is credited, and
/// at most `judge_credit_ms` of it.
#[test]
fn a_component_spinning_on_the_judge_cannot_stall_its_deadline() {
    let fast = || Arc::new(Scripted { calls: 0.into(), asked: Mutex::new(vec![]), delay: Duration::ZERO });
    let cases: [(&str, Limits, u64, fn(&Error) -> bool); 3] = [
        ("judge-empty", limits(), 1, |e| matches!(e, Error::Trap { message, .. } if message.contains("no requests"))),
        (
            "judge-spin",
            limits(),
            1,
            |e| matches!(e, Error::Trap { message, .. } if message.contains("more than 8 times") && message.contains("max_judge_calls")),
        ),
        // Calls allowed without end: the component's own time runs out, the judge's few
        // microseconds a call credit nothing.
        ("judge-spin", Limits { max_judge_calls: u32::MAX, ..limits() }, 3, |e| matches!(e, Error::Timeout { .. })),
    ];
    for (mode, limits, seconds, expected) in cases {
        let (rt, _dir) = runtime(limits);
        let plugin = rt.load_reward(plugin_path("hostile-reward")).unwrap();
        let mut scorer = plugin.create(&format!(r#"{{"mode": "{mode}"}}"#), Some(fast())).unwrap();
        let started = Instant::now();
        let err = scorer.score(&turns(2)).unwrap_err();
        assert!(expected(&err), "{mode}: {err}");
        assert!(started.elapsed() < Duration::from_secs(seconds), "{mode} took {:?}", started.elapsed());
    }
    // A slow judge is credited its real time, but no more than judge_credit_ms a call: the
    // call ends 500 ms (its own) + 400 ms (credit) after it began, after 3 judge calls of
    // 300 ms (a credit counted from the moment the deadline fired would allow a 4th).
    let slow = Arc::new(Scripted { calls: 0.into(), asked: Mutex::new(vec![]), delay: Duration::from_millis(300) });
    let (rt, _dir) = runtime(Limits { max_judge_calls: 1_000, judge_credit_ms: 400, ..limits() });
    let plugin = rt.load_reward(plugin_path("hostile-reward")).unwrap();
    let mut scorer = plugin.create(r#"{"mode": "judge-spin"}"#, Some(slow.clone())).unwrap();
    let started = Instant::now();
    let err = scorer.score(&turns(2)).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(800) && took < Duration::from_millis(2_000), "took {took:?}");
    assert!(slow.calls.load(Ordering::SeqCst) <= 3, "{} judge calls", slow.calls.load(Ordering::SeqCst));
}

#[test]
fn an_environment_is_not_a_reward_function() {
    let (rt, _dir) = runtime(limits());
    let err = rt.load_reward(plugin_path("frozenlake")).err().unwrap();
    assert!(err.to_string().contains("vagen:env/reward@0.3.0"), "{err}");
}

/// Says YES to grounding questions and NO to world-modeling ones, counting the images it
/// is shown.
struct Grader {
    calls: AtomicUsize,
    requests: AtomicUsize,
    images: AtomicUsize,
}

impl Judge for Grader {
    fn complete(&self, requests: &[JudgeRequest]) -> Vec<Result<String, String>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.requests.fetch_add(requests.len(), Ordering::SeqCst);
        requests
            .iter()
            .map(|r| {
                let user = &r.messages[1].content;
                let images = user.iter().filter(|p| matches!(p, JudgePart::Image(_))).count();
                self.images.fetch_add(images, Ordering::SeqCst);
                let Some(JudgePart::Text(text)) = user.last() else { return Err("no question".into()) };
                assert!(text.contains("The goal is below you.") || text.contains("You are on the goal."), "{text}");
                Ok(if text.contains("agent's observation") { "YES".into() } else { "NO".into() })
            })
            .collect()
    }
}

#[test]
fn the_visual_reasoning_reward_asks_the_judge_for_turns_in_format() {
    let (rt, _dir) = runtime(limits());
    let plugin = rt.load_reward(plugin_path("visual-reasoning")).unwrap();
    let judge = Arc::new(Grader { calls: 0.into(), requests: 0.into(), images: 0.into() });
    let mut scorer = plugin.create(r#"{"images": true}"#, Some(judge.clone())).unwrap();
    let mut t = turns(4);
    for turn in &mut t {
        turn.prediction = Some("I reach the goal".into());
        turn.images_before = vec![Arc::new(vagen_runtime::Image { width: 1, height: 1, rgb: vec![0, 0, 0] })];
    }
    let scores = scorer.score(&t).unwrap();
    // Turns 0 and 2 are in format: a grounding and a world-modeling question each, in one call.
    assert_eq!(judge.calls.load(Ordering::SeqCst), 1);
    assert_eq!(judge.requests.load(Ordering::SeqCst), 4);
    assert_eq!(judge.images.load(Ordering::SeqCst), 2, "the picture before the move, with each grounding question");
    for (i, s) in scores.iter().enumerate() {
        let s = s.as_ref().unwrap();
        let m: Vec<(&str, f64)> = s.metrics.iter().map(|m| (m.name.as_str(), m.value)).collect();
        if i % 2 == 0 {
            assert_eq!(s.reward, 0.5);
            assert_eq!(m, [("grounding", 1.0), ("worldmodeling", 0.0), ("unparsed", 0.0)]);
        } else {
            assert_eq!(s.reward, 0.0, "a turn out of format is not judged");
        }
    }
}
