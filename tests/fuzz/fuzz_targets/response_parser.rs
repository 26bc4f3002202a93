#![no_main]
//! `cargo fuzz run response_parser --fuzz-dir tests/fuzz`: the rollout's response parser
//! must return for any bytes a model can emit, in every format, without panicking, and its
//! results must be consistent.
//!
//! The parser's own source files are compiled in (they need only serde), so this target
//! does not pull in libtorch through vagen-rollout's model dependency.

#[path = "../../../host/rollout/src/format.rs"]
mod format;
#[path = "../../../host/rollout/src/parse.rs"]
mod parse;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // First byte: format and action cap; the rest: the response.
    let Some((&selector, rest)) = data.split_first() else { return };
    let text = String::from_utf8_lossy(rest);
    let format = format::Format::ALL[selector as usize % 5];
    let max = (selector as usize / 5) % 4;
    for separator in [",", "||", ""] {
        let p = parse::parse(&text, format, separator, max);
        if max > 0 {
            assert!(p.actions.len() <= max);
        }
        if p.format_ok {
            assert!(p.answer.is_some());
        }
        assert!(p.actions.iter().all(|a| !a.is_empty() && a.trim() == a));
    }
});
