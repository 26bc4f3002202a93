//! The SVG plugin in the sandbox: hostile answers are refused within the call deadline,
//! the heaviest drawing its limits allow stays within it, and `.wasm` and `.so` agree.

use std::time::{Duration, Instant};
use vagen_runtime::{Environment, Limits};
use vagen_tests::load;

fn hostile_answers() -> Vec<(&'static str, String)> {
    vec![
        ("a 1e9 viewBox", "<svg viewBox=\"0 0 1e9 1e9\"><rect width=\"1e9\" height=\"1e9\"/></svg>".into()),
        ("10^5 nested groups", format!("<svg>{}{}</svg>", "<g>".repeat(100_000), "</g>".repeat(100_000))),
        ("a 10 MB answer", format!("<svg>{}</svg>", "<rect width=\"1\" height=\"1\"/>".repeat(400_000))),
        ("malformed XML", "<svg viewBox=\"0 0 48 48\"><rect width=\"9\" height=\"9\"><g></svg>".into()),
        ("a radius of 1e38", "<svg viewBox=\"0 0 48 48\"><circle cx=\"24\" cy=\"24\" r=\"1e38\"/></svg>".into()),
        ("10^10 elements through <use>", {
            let mut s = String::from("<svg><defs><rect id=\"l0\" width=\"1\" height=\"1\"/>");
            for level in 1..10 {
                s.push_str(&format!(
                    "<g id=\"l{level}\">{}</g>",
                    format!("<use href=\"#l{}\"/>", level - 1).repeat(10)
                ));
            }
            s + "</defs><use href=\"#l9\"/></svg>"
        }),
    ]
}

#[test]
fn hostile_answers_are_refused_within_the_call_deadline() {
    // The env's own byte cap is under test: the host's cut (`max_answer_bytes`, 64 KiB) is
    // lifted past the largest answer here.
    let limits = Limits { max_answer_bytes: 4 << 20, ..Limits::default() };
    let deadline = Duration::from_millis(limits.call_timeout_ms);
    let (plugin, _dir) = load("svg", limits);
    let mut env = plugin.create("").unwrap();
    for (what, answer) in hostile_answers() {
        env.reset(0).unwrap();
        let started = Instant::now();
        let step = env.step(&answer).unwrap_or_else(|e| panic!("{what}: {e}"));
        let took = started.elapsed();
        assert_eq!(step.valid_actions, 0, "{what} was drawn");
        assert!(
            step.observation.text.starts_with("Your answer could not be drawn: "),
            "{what}: {}",
            step.observation.text
        );
        assert!(took < deadline / 4, "{what}: {took:?}");
    }
    // With the byte limit raised past the answer, the nesting itself is refused.
    let mut roomy = plugin.create(r#"{"max_answer_bytes": 1000000}"#).unwrap();
    roomy.reset(0).unwrap();
    let nested = format!("<svg>{}{}</svg>", "<g>".repeat(100_000), "</g>".repeat(100_000));
    let started = Instant::now();
    let step = roomy.step(&nested).unwrap();
    assert!(step.observation.text.contains("XML nodes"), "{}", step.observation.text);
    assert!(started.elapsed() < deadline / 4, "{:?}", started.elapsed());
}

/// A drawing close to the default limits on painted pixels and segments: each layer a
/// stroked path of 150 curves and twelve rounded rectangles over the whole canvas, all
/// with gradients.
#[test]
fn the_heaviest_drawing_the_limits_allow_stays_well_within_the_deadline() {
    let limits = Limits::default();
    let (plugin, _dir) = load("svg", limits.clone());
    let mut env = plugin.create("").unwrap();
    env.reset(0).unwrap();
    let wave: String =
        (0..150).map(|i| format!(" Q{} {} {} {}", (i * 7) % 48, 48 * (i % 2), (i * 13) % 48, (i * 5) % 48)).collect();
    let layer = format!(
        "<g opacity=\"0.5\"><path d=\"M0 0{wave} L48 48 Z\" fill=\"url(#r)\" stroke=\"url(#l)\" stroke-width=\"3\"/>{}</g>",
        "<rect width=\"48\" height=\"48\" fill=\"url(#l)\" rx=\"9\"/>".repeat(12)
    );
    let svg = format!(
        "<svg viewBox=\"0 0 48 48\"><defs>\
         <linearGradient id=\"l\"><stop offset=\"0\" stop-color=\"red\"/><stop offset=\"1\" stop-color=\"blue\"/></linearGradient>\
         <radialGradient id=\"r\"><stop offset=\"0\" stop-color=\"green\"/><stop offset=\"1\" stop-color=\"#0000\"/></radialGradient>\
         <g id=\"layer\">{layer}</g></defs>{}</svg>",
        "<use href=\"#layer\"/>".repeat(6)
    );
    let started = Instant::now();
    let step = env.step(&svg).unwrap();
    let took = started.elapsed();
    assert_eq!(step.valid_actions, 1, "{}", step.observation.text);
    // 123 ms alone on this machine; half the deadline leaves room for a loaded CI machine.
    assert!(took < Duration::from_millis(limits.call_timeout_ms) / 2, "{took:?}");
}

#[test]
fn targets_and_scores_are_identical_as_wasm_and_so() {
    let (wasm, _a) = load("svg", Limits::default());
    let (native, _b) = load("svg.so", Limits::default());
    let (mut w, mut n) = (wasm.create("").unwrap(), native.create("").unwrap());
    for seed in 0..30 {
        assert_eq!(w.reset(seed).unwrap(), n.reset(seed).unwrap(), "seed {seed}");
        let oracle = w.oracle().unwrap().unwrap();
        let moved =
            oracle.replacen("\">", "\"><g transform=\"translate(1.3 0.6)\">", 1).replace("</svg>", "</g></svg>");
        for answer in
            [moved.as_str(), "<svg viewBox=\"0 0 48 48\"><circle cx=\"20\" cy=\"24\" r=\"14\" fill=\"teal\"/></svg>"]
        {
            let (sw, sn) = (w.step(answer).unwrap(), n.step(answer).unwrap());
            assert_eq!(sw, sn, "seed {seed}: {answer}");
            if sw.done {
                break;
            }
        }
    }
}

#[test]
fn the_state_description_is_the_same_text_an_oracle_episode_sees_in_text_mode() {
    let (plugin, _dir) = load("svg", Limits::default());
    let mut image = plugin.create("").unwrap();
    let mut text = plugin.create(r#"{"preset": "text"}"#).unwrap();
    for seed in 0..5 {
        image.reset(seed).unwrap();
        let obs = text.reset(seed).unwrap();
        let described = image.describe_state().unwrap();
        assert!(obs.images.is_empty());
        assert!(obs.text.ends_with(&described), "{} / {described}", obs.text);
        let env: &mut dyn Environment = text.as_mut();
        let answer = env.oracle().unwrap().unwrap();
        assert_eq!(env.step(&answer).unwrap().reward, 1.0);
    }
}
