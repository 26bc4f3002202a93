#![no_main]
//! `cargo fuzz run countdown_expr --fuzz-dir tests/fuzz`: the expression parser must return
//! for any input, without panicking.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = countdown::evaluate(&String::from_utf8_lossy(data));
});
