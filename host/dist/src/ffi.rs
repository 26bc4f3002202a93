//! The bridge's C functions (`bridge.cpp`). Tensors cross as tch's `C_tensor` pointers,
//! which are `at::Tensor*` on the C++ side.

use std::os::raw::{c_char, c_int};
use torch_sys::C_tensor;

#[repr(C)]
pub struct vd_store {
    _private: [u8; 0],
}

#[repr(C)]
pub struct vd_group {
    _private: [u8; 0],
}

unsafe extern "C" {
    pub fn vd_free(p: *mut c_char);
    pub fn vd_store_new(
        host: *const c_char,
        port: c_int,
        server: c_int,
        wait: c_int,
        timeout_ms: i64,
        prefix: *const c_char,
        listen_fd: c_int,
        out: *mut *mut vd_store,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn vd_store_free(s: *mut vd_store);
    pub fn vd_store_set(
        s: *mut vd_store,
        key: *const c_char,
        data: *const u8,
        len: usize,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn vd_store_get(
        s: *mut vd_store,
        key: *const c_char,
        data: *mut *mut u8,
        len: *mut usize,
        found: *mut c_int,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn vd_gloo_new(
        s: *mut vd_store,
        rank: c_int,
        size: c_int,
        timeout_ms: i64,
        out: *mut *mut vd_group,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn vd_nccl_new(
        s: *mut vd_store,
        rank: c_int,
        size: c_int,
        timeout_ms: i64,
        out: *mut *mut vd_group,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn vd_group_free(g: *mut vd_group);
    pub fn vd_all_reduce(g: *mut vd_group, t: *const C_tensor, op: c_int, err: *mut *mut c_char) -> c_int;
    pub fn vd_broadcast(g: *mut vd_group, t: *const C_tensor, root: c_int, err: *mut *mut c_char) -> c_int;
    pub fn vd_all_gather(
        g: *mut vd_group,
        out: *const C_tensor,
        input: *const C_tensor,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn vd_reduce_scatter(
        g: *mut vd_group,
        out: *const C_tensor,
        input: *const C_tensor,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn vd_barrier(g: *mut vd_group, err: *mut *mut c_char) -> c_int;
}

/// Runs a bridge call, turning its error message into a `String`.
pub fn call(f: impl FnOnce(*mut *mut c_char) -> c_int) -> Result<(), String> {
    let mut err: *mut c_char = std::ptr::null_mut();
    if f(&mut err) == 0 {
        return Ok(());
    }
    if err.is_null() {
        return Err("the c10d bridge failed without a message".into());
    }
    // SAFETY: the bridge sets `err` to a NUL-terminated malloc'd string on failure.
    let message = unsafe { std::ffi::CStr::from_ptr(err) }.to_string_lossy().into_owned();
    unsafe { vd_free(err) };
    Err(message)
}
