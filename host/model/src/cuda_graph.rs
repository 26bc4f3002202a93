//! CUDA graphs (libtorch's `at::cuda::CUDAGraph` through `cpp/cuda_graph.cpp`): a forward
//! captured once and replayed, so a decode step costs one launch instead of one per
//! operator. What a graph reads and writes is fixed at capture (the addresses of its
//! inputs, weights, cache and outputs): the caller keeps those tensors, writes new inputs
//! into them before each replay, and captures again when any of them moves.

use crate::{Error, Result};

/// A private memory pool shared by the graphs of one engine: their intermediate tensors
/// reuse one another's memory, which is safe because one engine replays one graph at a
/// time and reads each graph's outputs before the next replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GraphPool(u64, u64);

/// One captured forward.
pub(crate) struct CudaGraph {
    #[cfg(vagen_cuda_graphs)]
    raw: *mut std::ffi::c_void,
    #[cfg(not(vagen_cuda_graphs))]
    _never: std::convert::Infallible,
}

#[cfg(vagen_cuda_graphs)]
mod ffi {
    use std::ffi::{c_char, c_int, c_void};
    unsafe extern "C" {
        pub fn vagen_graph_pool(a: *mut u64, b: *mut u64, err: *mut c_char, len: usize) -> c_int;
        pub fn vagen_graph_new(device: c_int, out: *mut *mut c_void, err: *mut c_char, len: usize) -> c_int;
        pub fn vagen_graph_enter(g: *mut c_void, err: *mut c_char, len: usize) -> c_int;
        pub fn vagen_graph_begin(g: *mut c_void, a: u64, b: u64, err: *mut c_char, len: usize) -> c_int;
        pub fn vagen_graph_end(g: *mut c_void, err: *mut c_char, len: usize) -> c_int;
        pub fn vagen_graph_exit(g: *mut c_void, err: *mut c_char, len: usize) -> c_int;
        pub fn vagen_graph_replay(g: *mut c_void, err: *mut c_char, len: usize) -> c_int;
        pub fn vagen_graph_free(g: *mut c_void);
    }
}

/// Runs a shim call, turning its error text into an [`Error`] naming `what`.
#[cfg(vagen_cuda_graphs)]
fn call(what: &str, f: impl FnOnce(*mut std::ffi::c_char, usize) -> std::ffi::c_int) -> Result<()> {
    let mut err = [0 as std::ffi::c_char; 1024];
    if f(err.as_mut_ptr(), err.len()) == 0 {
        return Ok(());
    }
    // SAFETY: the shim wrote a NUL-terminated string within the buffer.
    let text = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) }.to_string_lossy();
    let first = text.lines().next().unwrap_or("").to_string();
    Err(Error::Invalid(format!("CUDA graph {what}: {first} (engine.cuda_graphs = false decodes without graphs)")))
}

#[cfg(vagen_cuda_graphs)]
impl GraphPool {
    pub fn new() -> Result<Self> {
        let (mut a, mut b) = (0u64, 0u64);
        // SAFETY: the pointers are to live locals.
        call("pool", |e, n| unsafe { ffi::vagen_graph_pool(&mut a, &mut b, e, n) })?;
        Ok(GraphPool(a, b))
    }
}

#[cfg(vagen_cuda_graphs)]
impl CudaGraph {
    /// Captures `forward` on device `device` (run once before capture, eagerly, so lazy
    /// set-up such as cuBLAS workspaces happens outside it) and returns the graph with the
    /// captured call's output. Capture runs nothing: replay to compute it.
    pub fn capture<T>(device: usize, pool: GraphPool, mut forward: impl FnMut() -> T) -> Result<(CudaGraph, T)> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: the out pointer is a live local.
        call("creation", |e, n| unsafe { ffi::vagen_graph_new(device as std::ffi::c_int, &mut raw, e, n) })?;
        let graph = CudaGraph { raw };
        // SAFETY: `graph.raw` is live until `graph` drops.
        call("side stream", |e, n| unsafe { ffi::vagen_graph_enter(graph.raw, e, n) })?;
        let captured = (|| -> Result<T> {
            crate::panics::catch_panic(|| {
                drop(forward());
                Ok(())
            })?;
            call("capture", |e, n| unsafe { ffi::vagen_graph_begin(graph.raw, pool.0, pool.1, e, n) })?;
            let out = crate::panics::catch_panic(|| Ok(forward()))?;
            call("capture", |e, n| unsafe { ffi::vagen_graph_end(graph.raw, e, n) })?;
            Ok(out)
        })();
        // Whatever happened, the caller's stream is current again (a failed capture ended).
        let exited = call("side stream", |e, n| unsafe { ffi::vagen_graph_exit(graph.raw, e, n) });
        let out = captured?;
        exited?;
        Ok((graph, out))
    }

    /// Runs the captured forward on the current stream.
    pub fn replay(&self) -> Result<()> {
        // SAFETY: `self.raw` is live.
        call("replay", |e, n| unsafe { ffi::vagen_graph_replay(self.raw, e, n) })
    }
}

// SAFETY: a graph is a heap object of libtorch's, used by one thread at a time (its owner,
// behind `&mut`); capture and replay name their device and stream, not the thread's.
#[cfg(vagen_cuda_graphs)]
unsafe impl Send for CudaGraph {}

#[cfg(vagen_cuda_graphs)]
impl Drop for CudaGraph {
    fn drop(&mut self) {
        // SAFETY: created by `vagen_graph_new`, freed once.
        unsafe { ffi::vagen_graph_free(self.raw) }
    }
}

#[cfg(not(vagen_cuda_graphs))]
impl GraphPool {
    pub fn new() -> Result<Self> {
        Err(Error::Invalid(
            "this build has no CUDA graphs (its libtorch has no CUDA, or CUDA's headers were not found); \
             engine.cuda_graphs = false decodes without them"
                .into(),
        ))
    }
}

#[cfg(not(vagen_cuda_graphs))]
impl CudaGraph {
    pub fn capture<T>(_: usize, _: GraphPool, _: impl FnMut() -> T) -> Result<(CudaGraph, T)> {
        Err(GraphPool::new().expect_err("no graphs in this build"))
    }

    pub fn replay(&self) -> Result<()> {
        match self._never {}
    }
}
