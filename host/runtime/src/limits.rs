//! Everything a plugin is allowed, in user units, in one struct a config file can hold.

use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Wall-clock budget of one call into a plugin (`reset`, `step`, `oracle`, ...), in
    /// milliseconds. Enforced by epoch interruption: the call ends as a timeout error
    /// at most two ticks (20 ms) after the budget, never before it.
    pub call_timeout_ms: u64,
    /// Budget for bringing up an instance (instantiation plus `create`), in milliseconds.
    /// Interpreted guests (Python, JavaScript) initialise far more slowly than compiled ones.
    pub create_timeout_ms: u64,
    /// Linear memory one instance may hold in total, in MiB.
    pub memory_mib: u64,
    /// Fuel (roughly, WebAssembly instructions) per call, in millions; `None` turns fuel
    /// metering off. Deterministic, unlike the wall-clock budget, but costs 10–20 %.
    pub fuel_millions_per_call: Option<u64>,
    /// Bytes of stdout and of stderr kept per instance; the rest is dropped silently.
    pub output_bytes: usize,
    /// Largest observation text, in bytes.
    pub max_text_bytes: usize,
    /// Most images in one observation.
    pub max_images: usize,
    /// Largest image, in pixels (width × height).
    pub max_image_pixels: u64,
    /// Most metrics in one step result.
    pub max_metrics: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            call_timeout_ms: 2_000,
            create_timeout_ms: 20_000,
            memory_mib: 256,
            fuel_millions_per_call: None,
            output_bytes: 64 * 1024,
            max_text_bytes: 1 << 20,
            max_images: 16,
            max_image_pixels: 4096 * 4096,
            max_metrics: 256,
        }
    }
}

impl Limits {
    pub fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.call_timeout_ms)
    }

    pub fn create_timeout(&self) -> Duration {
        Duration::from_millis(self.create_timeout_ms)
    }

    pub fn memory_bytes(&self) -> usize {
        (self.memory_mib as usize).saturating_mul(1 << 20)
    }

    pub fn fuel_per_call(&self) -> Option<u64> {
        self.fuel_millions_per_call.map(|m| m.saturating_mul(1_000_000))
    }
}
