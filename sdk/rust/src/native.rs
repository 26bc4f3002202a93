//! The native export (`.so`): the C ABI of `vagen-abi`, each call guarded so a panic becomes
//! a `PANIC` status with its message instead of unwinding into the host.

use crate::session::{Package, Session, manifest_of};
use crate::{Env, EnvError};
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
pub use vagen_abi::Buffer;
use vagen_abi::{Op, encode, status};

pub const ABI_VERSION: u32 = vagen_abi::NATIVE_ABI_VERSION;

/// Runs `f`, writes its bytes to `out`, returns the status.
unsafe fn guarded(out: *mut Buffer, f: impl FnOnce() -> Result<Vec<u8>, EnvError>) -> i32 {
    let (code, bytes) = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(bytes)) => (status::OK, bytes),
        Ok(Err(e)) => (status::ENV_ERROR, encode(&e)),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic with a non-string payload".into());
            (status::PANIC, msg.into_bytes())
        }
    };
    if !out.is_null() {
        // SAFETY: the host passes a valid, writable Buffer.
        unsafe { out.write(Buffer::from_vec(bytes)) };
    }
    code
}

unsafe fn bytes<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
    // SAFETY: the host passes `len` readable bytes at `ptr` (or null with 0).
    if ptr.is_null() { &[] } else { unsafe { std::slice::from_raw_parts(ptr, len) } }
}

/// # Safety
/// `out` is a valid `Buffer` to write.
pub unsafe fn manifest<T: Env + Package>(out: *mut Buffer) -> i32 {
    unsafe { guarded(out, || Ok(encode(&manifest_of::<T>()))) }
}

/// # Safety
/// `config` holds `len` bytes; `env` and `out` are valid to write.
pub unsafe fn create<T: Env + Package>(config: *const u8, len: usize, env: *mut *mut c_void, out: *mut Buffer) -> i32 {
    let config = unsafe { bytes(config, len) };
    unsafe {
        guarded(out, || {
            let config = std::str::from_utf8(config).map_err(|e| EnvError::BadConfig(format!("not UTF-8: {e}")))?;
            let session = Box::new(Session::<T>::create(config)?);
            env.write(Box::into_raw(session).cast());
            Ok(Vec::new())
        })
    }
}

/// # Safety
/// `env` comes from `create::<T>` and is used by one thread at a time; `arg` holds `len`
/// bytes; `out` is valid to write.
pub unsafe fn call<T: Env + Package>(env: *mut c_void, op: u32, arg: *const u8, len: usize, out: *mut Buffer) -> i32 {
    let arg = unsafe { bytes(arg, len) };
    // SAFETY: as the caller guarantees.
    let session = unsafe { &mut *env.cast::<Session<T>>() };
    unsafe {
        guarded(out, || {
            let text = || std::str::from_utf8(arg).map_err(|e| EnvError::Failed(format!("answer is not UTF-8: {e}")));
            match Op::from_u32(op) {
                Some(Op::SystemPrompt) => Ok(encode(&session.system_prompt())),
                Some(Op::Reset) => {
                    let seed =
                        <[u8; 8]>::try_from(arg).map_err(|_| EnvError::Failed("reset takes an 8-byte seed".into()))?;
                    Ok(encode(&session.reset(u64::from_le_bytes(seed))?))
                }
                Some(Op::Step) => Ok(encode(&session.step(text()?)?)),
                Some(Op::DescribeState) => Ok(encode(&session.describe_state())),
                Some(Op::Oracle) => Ok(encode(&session.oracle())),
                Some(Op::ActionSpace) => Ok(encode(&session.action_space())),
                None => Err(EnvError::Failed(format!("unknown op {op}"))),
            }
        })
    }
}

/// # Safety
/// `env` comes from `create::<T>` and is not used afterwards.
pub unsafe fn destroy<T: Env>(env: *mut c_void) {
    if !env.is_null() {
        // SAFETY: as the caller guarantees.
        drop(unsafe { Box::from_raw(env.cast::<Session<T>>()) });
    }
}

/// # Safety
/// `buf` was written by one of the functions above and not freed before.
pub unsafe fn free(buf: Buffer) {
    drop(unsafe { buf.into_vec() });
}
