//! CUDA graphs (libtorch's `at::cuda::CUDAGraph` through `cpp/cuda_graph.cpp`): a forward
//! captured once and replayed, so a decode step costs one launch instead of one per
//! operator. What a graph reads and writes is fixed at capture (the addresses of its
//! inputs, weights, cache and outputs): the caller keeps those tensors, writes new inputs
//! into them before each replay, and captures again when any of them moves. Beside them, a
//! mark on a stream (an event), which a read that overlaps the next step waits for.

use crate::Result;

/// One engine's capture stream and private memory pool: its graphs' intermediate tensors
/// reuse one another's memory, which is safe because one engine replays one graph at a time
/// and reads each graph's outputs before the next replay. Its graphs must be dropped first.
pub(crate) struct Capturer {
    #[cfg(vagen_cuda_graphs)]
    raw: *mut std::ffi::c_void,
    #[cfg(not(vagen_cuda_graphs))]
    _never: std::convert::Infallible,
}

/// One captured forward.
pub(crate) struct CudaGraph {
    #[cfg(vagen_cuda_graphs)]
    raw: *mut std::ffi::c_void,
    #[cfg(not(vagen_cuda_graphs))]
    _never: std::convert::Infallible,
}

/// An event on a CUDA stream: what was queued there before it.
pub(crate) struct Mark {
    #[cfg(vagen_cuda_graphs)]
    raw: *mut std::ffi::c_void,
    #[cfg(not(vagen_cuda_graphs))]
    _never: std::convert::Infallible,
}

#[cfg(vagen_cuda_graphs)]
mod ffi {
    use std::ffi::{c_char, c_int, c_void};
    unsafe extern "C" {
        pub fn vagen_capturer_new(device: c_int, out: *mut *mut c_void, err: *mut c_char, len: usize) -> c_int;
        pub fn vagen_capturer_free(c: *mut c_void);
        pub fn vagen_capturer_enter(c: *mut c_void, err: *mut c_char, len: usize) -> c_int;
        pub fn vagen_capturer_exit(c: *mut c_void, err: *mut c_char, len: usize) -> c_int;
        pub fn vagen_graph_begin(c: *mut c_void, out: *mut *mut c_void, err: *mut c_char, len: usize) -> c_int;
        pub fn vagen_graph_end(c: *mut c_void, g: *mut c_void, err: *mut c_char, len: usize) -> c_int;
        pub fn vagen_graph_replay(c: *mut c_void, g: *mut c_void, err: *mut c_char, len: usize) -> c_int;
        pub fn vagen_graph_free(g: *mut c_void);
        pub fn vagen_mark_new(device: c_int, out: *mut *mut c_void, err: *mut c_char, len: usize) -> c_int;
        pub fn vagen_mark_wait(m: *mut c_void, err: *mut c_char, len: usize) -> c_int;
        pub fn vagen_mark_free(m: *mut c_void);
    }
}

/// Runs a shim call, its error named for the graph step `what`.
#[cfg(vagen_cuda_graphs)]
fn call(what: &str, f: impl FnOnce(*mut std::ffi::c_char, usize) -> std::ffi::c_int) -> Result<()> {
    crate::error::shim_call(|| format!("CUDA graph {what}"), f)
}

#[cfg(vagen_cuda_graphs)]
impl Capturer {
    pub fn new(device: usize) -> Result<Self> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: the out pointer is a live local.
        call("set-up", |e, n| unsafe { ffi::vagen_capturer_new(device as std::ffi::c_int, &mut raw, e, n) })?;
        Ok(Capturer { raw })
    }

    /// Captures `forward` (run once before capture, eagerly, so lazy set-up such as cuBLAS
    /// workspaces happens outside it) and returns the graph with the captured call's
    /// output. Capture runs nothing: replay to compute it.
    pub fn capture<T>(&mut self, mut forward: impl FnMut() -> T) -> Result<(CudaGraph, T)> {
        let c = self.raw;
        // SAFETY (every call below): `c` is live while `self` is; pointers are to live locals.
        call("side stream", |e, n| unsafe { ffi::vagen_capturer_enter(c, e, n) })?;
        let captured = (|| -> Result<(CudaGraph, T)> {
            crate::panics::catch_panic(|| {
                drop(forward());
                Ok(())
            })?;
            let mut raw = std::ptr::null_mut();
            call("capture", |e, n| unsafe { ffi::vagen_graph_begin(c, &mut raw, e, n) })?;
            let out = crate::panics::catch_panic(|| Ok(forward()));
            let ended = call("capture", |e, n| unsafe { ffi::vagen_graph_end(c, raw, e, n) });
            match (out, ended) {
                (Ok(out), Ok(())) => Ok((CudaGraph { raw }, out)),
                (Err(e), Ok(())) => {
                    drop(CudaGraph { raw });
                    Err(e)
                }
                // Not freed: after a failed end the allocator may still name the graph.
                (_, Err(e)) => Err(e),
            }
        })();
        // Whatever happened, the caller's stream is current again.
        let exited = call("side stream", |e, n| unsafe { ffi::vagen_capturer_exit(c, e, n) });
        let out = captured?;
        exited?;
        Ok(out)
    }

    /// Runs `graph` (captured by this capturer) on the current stream.
    pub fn replay(&self, graph: &CudaGraph) -> Result<()> {
        // SAFETY: both are live.
        call("replay", |e, n| unsafe { ffi::vagen_graph_replay(self.raw, graph.raw, e, n) })
    }
}

// SAFETY: a capturer, a graph and a mark are heap objects of libtorch's, used by one thread at
// a time (their owner, behind `&mut`); capture, replay and marks name their device and stream,
// not the thread's.
#[cfg(vagen_cuda_graphs)]
unsafe impl Send for Capturer {}
#[cfg(vagen_cuda_graphs)]
unsafe impl Send for CudaGraph {}
#[cfg(vagen_cuda_graphs)]
unsafe impl Send for Mark {}

#[cfg(vagen_cuda_graphs)]
impl Mark {
    /// Follows what device `device`'s current stream has queued so far.
    pub fn new(device: usize) -> Result<Self> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: the out pointer is a live local.
        call("mark", |e, n| unsafe { ffi::vagen_mark_new(device as std::ffi::c_int, &mut raw, e, n) })?;
        Ok(Mark { raw })
    }

    /// Blocks until what the mark follows has run.
    pub fn wait(&self) -> Result<()> {
        // SAFETY: `raw` is live while `self` is.
        call("mark", |e, n| unsafe { ffi::vagen_mark_wait(self.raw, e, n) })
    }
}

#[cfg(vagen_cuda_graphs)]
impl Drop for Mark {
    fn drop(&mut self) {
        // SAFETY: created by `vagen_mark_new`, freed once.
        unsafe { ffi::vagen_mark_free(self.raw) }
    }
}

#[cfg(vagen_cuda_graphs)]
impl Drop for Capturer {
    fn drop(&mut self) {
        // SAFETY: created by `vagen_capturer_new`, freed once.
        unsafe { ffi::vagen_capturer_free(self.raw) }
    }
}

#[cfg(vagen_cuda_graphs)]
impl Drop for CudaGraph {
    fn drop(&mut self) {
        // SAFETY: created by `vagen_graph_begin` and ended, freed once.
        unsafe { ffi::vagen_graph_free(self.raw) }
    }
}

#[cfg(not(vagen_cuda_graphs))]
impl Capturer {
    pub fn new(_: usize) -> Result<Self> {
        Err(crate::Error::Invalid(
            "this build has no CUDA graphs (its libtorch has no CUDA, or CUDA's headers were not found)".into(),
        ))
    }

    pub fn capture<T>(&mut self, _: impl FnMut() -> T) -> Result<(CudaGraph, T)> {
        match self._never {}
    }

    pub fn replay(&self, _: &CudaGraph) -> Result<()> {
        match self._never {}
    }
}

#[cfg(not(vagen_cuda_graphs))]
impl Mark {
    pub fn new(_: usize) -> Result<Self> {
        Err(crate::Error::Invalid("this build has no CUDA stream marks".into()))
    }

    pub fn wait(&self) -> Result<()> {
        match self._never {}
    }
}
