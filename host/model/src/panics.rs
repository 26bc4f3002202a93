//! Failures that reach Rust as panics (tch's calls without `f_` unwrap libtorch's errors):
//! caught where a whole load can be refused instead, and printed without libtorch's C++
//! backtrace wherever they are not.

use crate::error::without_cpp_backtrace;
use crate::{Error, Result};
use std::cell::Cell;

thread_local! {
    /// How many [`catch_panic`] calls this thread is inside: their panics become errors and
    /// are not printed.
    static CATCHING: Cell<u32> = const { Cell::new(0) };
}

/// Runs `f`; a panic in it becomes [`Error::Panic`] with its message (libtorch's without the
/// backtrace), printed by no one but the caller.
pub fn catch_panic<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    install_panic_hook();
    CATCHING.with(|c| c.set(c.get() + 1));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(c.get() - 1));
    outcome.unwrap_or_else(|payload| Err(Error::Panic(without_cpp_backtrace(&payload_text(&*payload)).to_string())))
}

/// Wraps the process's panic hook (once): silent for panics [`catch_panic`] turns into
/// errors, libtorch's message without its C++ frames, any other panic as before.
pub fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if CATCHING.with(Cell::get) > 0 {
                return;
            }
            let text = payload_text(info.payload());
            if text.contains("Exception raised from") {
                let thread = std::thread::current();
                let location = info.location().map(|l| format!(" at {l}")).unwrap_or_default();
                eprintln!(
                    "thread '{}' panicked{location}:\n{}",
                    thread.name().unwrap_or("<unnamed>"),
                    without_cpp_backtrace(&text)
                );
            } else {
                previous(info);
            }
        }));
    });
}

fn payload_text(payload: &(dyn std::any::Any + Send)) -> String {
    match (payload.downcast_ref::<&str>(), payload.downcast_ref::<String>()) {
        (Some(s), _) => s.to_string(),
        (_, Some(s)) => s.clone(),
        _ => "a panic without a message".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_libtorch_panic_becomes_an_error_without_the_cpp_backtrace() {
        // tch's non-`f_` calls panic on libtorch's errors: here a negative size.
        let err = catch_panic(|| Ok(tch::Tensor::zeros([-3], (tch::Kind::Float, tch::Device::Cpu)))).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("must be non-negative"), "{text}");
        assert!(!text.contains("frame #") && !text.contains("Exception raised from"), "{text}");
        let err = crate::Error::from(tch::Tensor::f_zeros([-3], (tch::Kind::Float, tch::Device::Cpu)).unwrap_err());
        assert!(!err.to_string().contains("frame #"), "{err}");
        assert_eq!(catch_panic(|| Ok(7)).unwrap(), 7);
    }
}
