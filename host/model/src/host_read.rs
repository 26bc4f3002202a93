//! A device tensor's copy to the host, started now and waited for later: the engine queues
//! a decode step's tokens for the host, launches the next step, and only then waits, so the
//! host checks one step's stops while the device runs the next. On CUDA the copy lands in
//! page-locked memory (libtorch pins a non-blocking copy's destination) and a mark (an event
//! on the stream, `cpp/cuda_graph.cpp`) says when it ran; elsewhere it is made at once.

use crate::Result;
use tch::{Device, Tensor};

pub(crate) struct HostRead {
    tensor: Tensor,
    mark: Option<Mark>,
}

impl HostRead {
    /// Queues the copy of `t` on its device's current stream.
    pub fn start(t: &Tensor) -> Result<Self> {
        match t.device() {
            Device::Cuda(i) if cfg!(vagen_cuda_graphs) => {
                let tensor = t.to_device_(Device::Cpu, t.kind(), true, true);
                Ok(HostRead { tensor, mark: Some(Mark::new(i)?) })
            }
            Device::Cpu => Ok(HostRead { tensor: t.copy(), mark: None }),
            // No marks in this build: a copy that waits for the device.
            _ => Ok(HostRead { tensor: t.to_device(Device::Cpu), mark: None }),
        }
    }

    /// The copy, once it ran.
    pub fn wait(self) -> Result<Tensor> {
        if let Some(mark) = &self.mark {
            mark.wait()?;
        }
        Ok(self.tensor)
    }
}

/// An event on a CUDA stream.
struct Mark {
    #[cfg(vagen_cuda_graphs)]
    raw: *mut std::ffi::c_void,
    #[cfg(not(vagen_cuda_graphs))]
    _never: std::convert::Infallible,
}

#[cfg(vagen_cuda_graphs)]
mod ffi {
    use std::ffi::{c_char, c_int, c_void};
    unsafe extern "C" {
        pub fn vagen_mark_new(device: c_int, out: *mut *mut c_void, err: *mut c_char, len: usize) -> c_int;
        pub fn vagen_mark_wait(m: *mut c_void, err: *mut c_char, len: usize) -> c_int;
        pub fn vagen_mark_free(m: *mut c_void);
    }
}

#[cfg(vagen_cuda_graphs)]
impl Mark {
    /// Follows what device `device`'s current stream has queued so far.
    fn new(device: usize) -> Result<Self> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: the out pointer is a live local.
        crate::error::shim_call(
            || "marking a CUDA stream".into(),
            |e, n| unsafe { ffi::vagen_mark_new(device as std::ffi::c_int, &mut raw, e, n) },
        )?;
        Ok(Mark { raw })
    }

    fn wait(&self) -> Result<()> {
        // SAFETY: `raw` is live while `self` is.
        crate::error::shim_call(
            || "waiting for a CUDA stream".into(),
            |e, n| unsafe { ffi::vagen_mark_wait(self.raw, e, n) },
        )
    }
}

// SAFETY: an event is a heap object of libtorch's, used by its owner alone; recording and
// waiting name the device and stream, not the thread.
#[cfg(vagen_cuda_graphs)]
unsafe impl Send for Mark {}

#[cfg(vagen_cuda_graphs)]
impl Drop for Mark {
    fn drop(&mut self) {
        // SAFETY: created by `vagen_mark_new`, freed once.
        unsafe { ffi::vagen_mark_free(self.raw) }
    }
}

#[cfg(not(vagen_cuda_graphs))]
impl Mark {
    fn new(_: usize) -> Result<Self> {
        Err(crate::Error::Invalid("this build has no CUDA stream marks".into()))
    }

    fn wait(&self) -> Result<()> {
        match self._never {}
    }
}
