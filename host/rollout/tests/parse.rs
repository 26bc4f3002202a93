//! Table tests for every format: correct, malformed, truncated, nested, repeated, unicode,
//! megabyte-long responses; and no input makes the parser panic.

use proptest::prelude::*;
use vagen_rollout::{Format, parse};

use Format::*;

const FT: &str = "<think>go left</think><answer>Left</answer>";
const GR: &str =
    "<think><observation>P at 0,0</observation><reasoning>goal is left</reasoning></think><answer>Left</answer>";
const WM: &str =
    "<think><reasoning>goal is left</reasoning><prediction>P at 0,1</prediction></think><answer>Left</answer>";
const GWM: &str = "<think><observation>o</observation><reasoning>r</reasoning><prediction>p</prediction></think><answer>Left</answer>";

#[test]
fn format_correctness_table() {
    let long = "x".repeat(1 << 20);
    let long_ft = format!("<think>{long}</think><answer>Up</answer>");
    #[rustfmt::skip]
    let table: Vec<(Format, &str, bool)> = vec![
        (NoThink, "<answer>Left</answer>", true),
        (NoThink, "  \n<answer>Left, Up</answer>\n ", true),
        (NoThink, "<answer></answer>", true),
        (NoThink, FT, false),                                   // a think part is not allowed
        (NoThink, "Left", false),
        (NoThink, "<answer>Left", false),                       // truncated
        (NoThink, "<answer>Left</answer> and more", false),     // trailing text
        (NoThink, "<answer>Left</answer><answer>Up</answer>", false), // repeated
        (FreeThink, FT, true),
        (FreeThink, "<think>\nhmm\n</think>\n<answer> Left </answer>", true),
        (FreeThink, "<answer>Left</answer>", false),            // missing think
        (FreeThink, "<think>a</think>", false),                 // missing answer
        (FreeThink, "<think>a<think>b</think></think><answer>L</answer>", false), // nested
        (FreeThink, "<think>a</think><think>b</think><answer>L</answer>", false), // repeated
        (FreeThink, "<think>a <answer>L</answer></think><answer>L</answer>", false), // tag inside
        (FreeThink, "<answer>L</answer><think>a</think>", false), // order
        (FreeThink, "<think>a</think><answer>Left</answ", false), // truncated
        (FreeThink, "<THINK>a</THINK><answer>L</answer>", false), // case matters
        (FreeThink, "<think>日本語 🎉 ünïcode</think><answer>Left</answer>", true),
        (FreeThink, &long_ft, true),
        (FreeThink, "", false),
        (Grounding, GR, true),
        (Grounding, FT, false),
        (Grounding, "<think><reasoning>r</reasoning><observation>o</observation></think><answer>L</answer>", false),
        (Grounding, "<think><observation>o</observation> <reasoning>r</reasoning> </think> <answer>L</answer>", true),
        (Grounding, "<think><observation>o</observation>stray<reasoning>r</reasoning></think><answer>L</answer>", false),
        (WorldModeling, WM, true),
        (WorldModeling, GR, false),
        (GroundingWorldModeling, GWM, true),
        (GroundingWorldModeling, WM, false),
        (GroundingWorldModeling, "<think><observation>o</observation><reasoning>r</reasoning><prediction>p</think><answer>L</answer>", false),
    ];
    for (format, response, ok) in table {
        let p = parse(response, format, ",", 3);
        let shown: String = response.chars().take(80).collect();
        assert_eq!(p.format_ok, ok, "{} on {shown:?}", format.name());
    }
}

#[test]
fn parts_and_actions_are_extracted() {
    let p = parse(GWM, GroundingWorldModeling, ",", 3);
    assert_eq!(p.observation.as_deref(), Some("o"));
    assert_eq!(p.reasoning.as_deref(), Some("r"));
    assert_eq!(p.prediction.as_deref(), Some("p"));
    assert_eq!(p.answer.as_deref(), Some("Left"));
    assert_eq!(p.actions, ["Left"]);
    assert!(p.think.as_deref().unwrap().starts_with("<observation>"));

    // Separator split, trim, empties dropped, capped at max actions.
    let p = parse("<think>t</think><answer> Left ,, Up,Down , Right,Left</answer>", FreeThink, ",", 3);
    assert_eq!(p.actions, ["Left", "Up", "Down"]);
    assert_eq!(p.extra_actions, 2, "Right and Left are beyond the 3 a turn takes");
    assert_eq!(p.step_answer(","), "Left,Up,Down");
    let p = parse("<answer>Left || Up</answer>", NoThink, "||", 0);
    assert_eq!((p.actions.as_slice(), p.extra_actions), (["Left", "Up"].map(String::from).as_slice(), 0));

    // A wrong format still yields the first complete answer; none when there is none.
    let p = parse("blah <answer>Up</answer> <answer>Down</answer>", FreeThink, ",", 3);
    assert!(!p.format_ok);
    assert_eq!(p.actions, ["Up"]);
    let p = parse("<answer>Up", FreeThink, ",", 3);
    assert_eq!(p.answer, None);
    assert!(p.actions.is_empty());
    assert_eq!(p.step_answer(","), "");
}

#[test]
fn wrapped_answers_parse_back_in_every_format() {
    for format in Format::ALL {
        let p = parse(&format.wrap("Left, Up"), format, ",", 5);
        assert!(p.format_ok, "{}", format.name());
        assert_eq!(p.actions, ["Left", "Up"]);
        assert!(format.instructions("Left").contains(&format.wrap("Left")));
        assert_eq!(Format::from_name(format.name()), Some(format));
    }
}

#[test]
fn without_a_format_the_whole_response_is_the_answer() {
    let text = "Left,Up, <answer>x</answer>";
    let p = parse(text, Raw, ",", 1);
    assert!(p.format_ok);
    assert_eq!(p.answer.as_deref(), Some(text), "tags mean nothing");
    assert_eq!(p.actions.len(), 3, "counted, not cut: the env decides");
    assert_eq!(Raw.wrap("Left"), "Left");
    assert!(Raw.instructions("Left").is_empty() && Raw.reminder().is_empty() && Raw.stop_strings().is_empty());
    assert!(!Format::ALL.contains(&Raw), "not a format a model is asked for");
    assert_eq!(NoThink.stop_strings(), ["</answer>"]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
    #[test]
    fn any_text_parses_without_panicking(
        pieces in proptest::collection::vec(prop_oneof![
            Just("<think>".to_string()), Just("</think>".to_string()), Just("<answer>".to_string()),
            Just("</answer>".to_string()), Just("<observation>".to_string()), Just("</prediction>".to_string()),
            Just(",".to_string()), Just("<".to_string()), Just("</".to_string()), ".{0,8}",
        ], 0..24),
        format in 0usize..5,
        max in 0usize..4,
    ) {
        let text: String = pieces.concat();
        let p = parse(&text, Format::ALL[format], ",", max);
        if max > 0 { prop_assert!(p.actions.len() <= max); }
        if p.format_ok { prop_assert!(p.answer.is_some()); }
    }

    #[test]
    fn arbitrary_bytes_decoded_lossily_parse(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = parse(&text, Format::GroundingWorldModeling, "||", 3);
    }
}
