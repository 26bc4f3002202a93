//! The data environments exchange with the vagen host, and the C ABI of native plugins.
//!
//! WebAssembly plugins speak the WIT contract (`wit/`); native plugins (`.so`, for heavy
//! simulators that cannot live in WASM) export the functions below. Both carry the same
//! data: the types in [`types`], which native plugins encode with postcard.
//!
//! Native functions (all `extern "C"`, all exported by `vagen_sdk::export_env!`):
//!
//! | symbol | signature |
//! |---|---|
//! | `vagen_native_abi_version` | `() -> u32` ([`NATIVE_ABI_VERSION`]) |
//! | `vagen_native_manifest` | `(out: *mut Buffer) -> i32` — out: `Manifest` |
//! | `vagen_native_create` | `(config: *const u8, len: usize, env: *mut *mut c_void, out: *mut Buffer) -> i32` |
//! | `vagen_native_call` | `(env: *mut c_void, op: u32, arg: *const u8, len: usize, out: *mut Buffer) -> i32` |
//! | `vagen_native_destroy` | `(env: *mut c_void)` |
//! | `vagen_native_free` | `(buf: Buffer)` — every `out` buffer goes back through this |
//!
//! A call returns a [`status`]: `OK` with the op's result in `out`, `ENV_ERROR` with an
//! encoded [`EnvError`], or `PANIC` with the panic message as UTF-8.

#![deny(missing_docs)]

mod types;

pub use types::{ActionSpace, EnvError, IMAGE_MARKER, Image, Manifest, Message, Modality, Observation, Step, ToolCall};

use serde::{Serialize, de::DeserializeOwned};

/// Bumped on any change to the symbols, signatures, ops or encodings of native plugins.
/// 2 added `Op::ActionSpace`.
pub const NATIVE_ABI_VERSION: u32 = 2;

/// The oldest version the host still loads: a version-1 plugin has no `ActionSpace` op,
/// and its manifest's action fields stand for every instance.
pub const OLDEST_NATIVE_ABI_VERSION: u32 = 1;

/// Symbol names, NUL-terminated for dynamic loaders.
pub mod symbols {
    /// `vagen_native_abi_version`.
    pub const ABI_VERSION: &[u8] = b"vagen_native_abi_version\0";
    /// `vagen_native_manifest`.
    pub const MANIFEST: &[u8] = b"vagen_native_manifest\0";
    /// `vagen_native_create`.
    pub const CREATE: &[u8] = b"vagen_native_create\0";
    /// `vagen_native_call`.
    pub const CALL: &[u8] = b"vagen_native_call\0";
    /// `vagen_native_destroy`.
    pub const DESTROY: &[u8] = b"vagen_native_destroy\0";
    /// `vagen_native_free`.
    pub const FREE: &[u8] = b"vagen_native_free\0";
}

/// What a native call returns.
pub mod status {
    /// The call succeeded; `out` holds its result.
    pub const OK: i32 = 0;
    /// The env refused: `out` holds an encoded `EnvError`.
    pub const ENV_ERROR: i32 = 1;
    /// The plugin panicked: `out` holds the message as UTF-8.
    pub const PANIC: i32 = 2;
}

/// What `vagen_native_call` does. Argument and result encodings:
///
/// | op | argument | result |
/// |---|---|---|
/// | `SystemPrompt` | none | `String` |
/// | `Reset` | seed, 8 bytes little-endian | `Observation` |
/// | `Step` | the answer, UTF-8 | `Step` |
/// | `DescribeState` | none | `String` |
/// | `Oracle` | none | `Option<String>` |
/// | `ActionSpace` (ABI 2) | none | `ActionSpace` |
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// The env's rules.
    SystemPrompt = 1,
    /// Starts an episode.
    Reset = 2,
    /// Applies an answer.
    Step = 3,
    /// The state in words.
    DescribeState = 4,
    /// An expert answer.
    Oracle = 5,
    /// How this instance reads actions.
    ActionSpace = 6,
}

impl Op {
    /// The op numbered `op`, if any.
    pub fn from_u32(op: u32) -> Option<Op> {
        [Op::SystemPrompt, Op::Reset, Op::Step, Op::DescribeState, Op::Oracle, Op::ActionSpace]
            .into_iter()
            .find(|o| *o as u32 == op)
    }
}

/// Bytes owned by the plugin's allocator, handed to the host and returned through
/// `vagen_native_free`.
#[repr(C)]
#[derive(Debug)]
pub struct Buffer {
    /// The first byte.
    pub ptr: *mut u8,
    /// Bytes in use.
    pub len: usize,
    /// Bytes allocated.
    pub cap: usize,
}

impl Buffer {
    /// No bytes.
    pub fn empty() -> Self {
        Self { ptr: std::ptr::null_mut(), len: 0, cap: 0 }
    }

    /// Hands `v`'s bytes over without copying them.
    pub fn from_vec(v: Vec<u8>) -> Self {
        let mut v = std::mem::ManuallyDrop::new(v);
        Self { ptr: v.as_mut_ptr(), len: v.len(), cap: v.capacity() }
    }

    /// Takes the bytes back. Only the side that allocated them may call this.
    ///
    /// # Safety
    /// `self` must come from [`Buffer::from_vec`] in this same binary, not yet reclaimed.
    pub unsafe fn into_vec(self) -> Vec<u8> {
        if self.ptr.is_null() {
            return Vec::new();
        }
        // SAFETY: the caller guarantees the parts came from `from_vec` here.
        unsafe { Vec::from_raw_parts(self.ptr, self.len, self.cap) }
    }

    /// Views the bytes without taking them.
    ///
    /// # Safety
    /// `ptr` must point to `len` readable bytes for the lifetime of the view.
    pub unsafe fn as_slice(&self) -> &[u8] {
        if self.ptr.is_null() {
            return &[];
        }
        // SAFETY: as the caller guarantees.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// `vagen_native_abi_version`.
pub type AbiVersionFn = unsafe extern "C" fn() -> u32;
/// `vagen_native_manifest`.
pub type ManifestFn = unsafe extern "C" fn(out: *mut Buffer) -> i32;
/// `vagen_native_create`.
pub type CreateFn =
    unsafe extern "C" fn(config: *const u8, len: usize, env: *mut *mut std::ffi::c_void, out: *mut Buffer) -> i32;
/// `vagen_native_call`.
pub type CallFn =
    unsafe extern "C" fn(env: *mut std::ffi::c_void, op: u32, arg: *const u8, len: usize, out: *mut Buffer) -> i32;
/// `vagen_native_destroy`.
pub type DestroyFn = unsafe extern "C" fn(env: *mut std::ffi::c_void);
/// `vagen_native_free`.
pub type FreeFn = unsafe extern "C" fn(buf: Buffer);

/// `value` as native plugins send it (postcard).
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    // Our types hold only strings, numbers, vectors and enums: encoding cannot fail.
    postcard::to_stdvec(value).expect("postcard encodes plain data")
}

/// A value sent by [`encode`].
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    postcard::from_bytes(bytes).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        let step = Step {
            observation: Observation {
                text: "<image>".into(),
                images: vec![Image { width: 1, height: 1, rgb: vec![1, 2, 3] }],
            },
            reward: -0.1,
            metrics: vec![("m".into(), 2.5)],
            ..Step::default()
        };
        assert_eq!(decode::<Step>(&encode(&step)).unwrap(), step);
        assert!(decode::<Step>(&[0xff, 0xff, 0xff]).is_err());
        let buf = Buffer::from_vec(vec![7, 8]);
        assert_eq!(unsafe { buf.as_slice() }, &[7, 8]);
        assert_eq!(unsafe { buf.into_vec() }, vec![7, 8]);
        assert_eq!(Op::from_u32(3), Some(Op::Step));
        assert_eq!(Op::from_u32(6), Some(Op::ActionSpace));
        assert_eq!(Op::from_u32(9), None);
    }
}
