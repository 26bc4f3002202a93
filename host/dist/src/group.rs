//! Safe handles on the bridge: the rendezvous store and a process group.

use crate::ffi::{self, call};
use std::ffi::CString;
use std::os::raw::c_int;
use std::ptr::NonNull;
use std::time::Duration;
use tch::Tensor;

/// A collective or store call that failed, with libtorch's message.
#[derive(Debug, thiserror::Error)]
#[error("{op}: {message}")]
pub struct CommError {
    pub op: &'static str,
    pub message: String,
}

fn comm(op: &'static str) -> impl FnOnce(String) -> CommError {
    move |message| CommError { op, message }
}

/// c10d's TCPStore (through a prefix when the launcher hosts it).
pub struct Store(NonNull<ffi::vd_store>);

// SAFETY: c10d's TCPStore serialises its client calls with a lock of its own.
unsafe impl Send for Store {}
unsafe impl Sync for Store {}

impl Store {
    /// Connects, or hosts the store when `server`. With `wait` > 0 every caller counts itself
    /// in and the server waits up to `timeout` until `wait` have (0: a launcher's store).
    /// A server listens on `host`'s interface only (loopback when `host` is); a client that
    /// reaches something at `host:port` which never answers gives up after `timeout`.
    pub fn connect(
        host: &str,
        port: u16,
        server: bool,
        wait: usize,
        timeout: Duration,
        prefix: Option<&str>,
    ) -> Result<Self, CommError> {
        let cstr = |s: &str, what: &str| CString::new(s).map_err(|_| comm("store")(format!("NUL in the {what}")));
        let (host_c, prefix_c) = (cstr(host, "address")?, cstr(prefix.unwrap_or(""), "prefix")?);
        let listen_fd = match server {
            true => {
                use std::os::fd::IntoRawFd;
                let listener = std::net::TcpListener::bind((host, port))
                    .map_err(|e| comm("hosting the rendezvous store")(format!("binding {host}:{port}: {e}")))?;
                listener.into_raw_fd()
            }
            false => -1,
        };
        let connect = move || {
            let mut out = std::ptr::null_mut();
            call(|err| unsafe {
                ffi::vd_store_new(
                    host_c.as_ptr(),
                    port as c_int,
                    server as c_int,
                    wait as c_int,
                    timeout.as_millis() as i64,
                    prefix_c.as_ptr(),
                    listen_fd,
                    &mut out,
                    err,
                )
            })
            .map(|()| Store(NonNull::new(out).expect("the bridge returns a store on success")))
            .map_err(comm("connecting to the rendezvous store"))
        };
        if server {
            return connect();
        }
        // c10d's client waits without end for a listener that accepts and never answers:
        // the connection runs on its own thread, given `timeout` and a little more.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("store-connect".into())
            .spawn(move || {
                let _ = tx.send(connect());
            })
            .map_err(|e| comm("connecting to the rendezvous store")(e.to_string()))?;
        rx.recv_timeout(timeout + Duration::from_secs(2)).unwrap_or_else(|_| {
            Err(comm("connecting to the rendezvous store")(format!(
                "{host}:{port} did not answer within {} s (timeout_s): is MASTER_ADDR/MASTER_PORT the store \
                 of rank 0 or the launcher?",
                timeout.as_secs_f64()
            )))
        })
    }

    pub fn set(&self, key: &str, value: &[u8]) -> Result<(), CommError> {
        let k = CString::new(key).expect("keys are ours, without NUL");
        call(|err| unsafe { ffi::vd_store_set(self.0.as_ptr(), k.as_ptr(), value.as_ptr(), value.len(), err) })
            .map_err(comm("store set"))
    }

    /// The key's value, `None` when no rank has set it (never waits).
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, CommError> {
        let k = CString::new(key).expect("keys are ours, without NUL");
        let (mut data, mut len, mut found) = (std::ptr::null_mut(), 0usize, 0 as c_int);
        call(|err| unsafe { ffi::vd_store_get(self.0.as_ptr(), k.as_ptr(), &mut data, &mut len, &mut found, err) })
            .map_err(comm("store get"))?;
        if found == 0 {
            return Ok(None);
        }
        // SAFETY: on `found` the bridge hands over a malloc'd buffer of `len` bytes.
        let v = unsafe { std::slice::from_raw_parts(data, len) }.to_vec();
        unsafe { ffi::vd_free(data.cast()) };
        Ok(Some(v))
    }

    pub(crate) fn raw(&self) -> *mut ffi::vd_store {
        self.0.as_ptr()
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        unsafe { ffi::vd_store_free(self.0.as_ptr()) }
    }
}

/// Which collectives library carries tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Library {
    Gloo,
    Nccl,
}

/// A c10d process group over all ranks.
pub struct ProcessGroup {
    raw: NonNull<ffi::vd_group>,
    pub library: Library,
}

// SAFETY: used from one thread at a time (the trainer's); c10d's groups are thread-safe.
unsafe impl Send for ProcessGroup {}

#[derive(Clone, Copy)]
pub enum ReduceOp {
    Sum = 0,
    Max = 1,
    Min = 2,
}

impl ProcessGroup {
    pub fn new(
        library: Library,
        store: &Store,
        rank: usize,
        world: usize,
        timeout: Duration,
    ) -> Result<Self, CommError> {
        let mut out = std::ptr::null_mut();
        let (r, w, t) = (rank as c_int, world as c_int, timeout.as_millis() as i64);
        call(|err| unsafe {
            match library {
                Library::Gloo => ffi::vd_gloo_new(store.raw(), r, w, t, &mut out, err),
                Library::Nccl => ffi::vd_nccl_new(store.raw(), r, w, t, &mut out, err),
            }
        })
        .map_err(comm(match library {
            Library::Gloo => "creating the gloo process group",
            Library::Nccl => "creating the NCCL process group",
        }))?;
        Ok(ProcessGroup { raw: NonNull::new(out).expect("a group on success"), library })
    }

    /// In place, on every rank.
    pub fn all_reduce(&self, t: &mut Tensor, op: ReduceOp) -> Result<(), CommError> {
        call(|err| unsafe { ffi::vd_all_reduce(self.raw.as_ptr(), t.as_ptr(), op as c_int, err) })
            .map_err(comm("all-reduce"))
    }

    pub fn broadcast(&self, t: &mut Tensor, root: usize) -> Result<(), CommError> {
        call(|err| unsafe { ffi::vd_broadcast(self.raw.as_ptr(), t.as_ptr(), root as c_int, err) })
            .map_err(comm("broadcast"))
    }

    /// `out` (world × `input`'s elements, contiguous) takes every rank's `input`, in rank order.
    pub fn all_gather(&self, out: &mut Tensor, input: &Tensor) -> Result<(), CommError> {
        call(|err| unsafe { ffi::vd_all_gather(self.raw.as_ptr(), out.as_ptr(), input.as_ptr(), err) })
            .map_err(comm("all-gather"))
    }

    /// `out` takes this rank's 1/world slice of the sum of every rank's `input`.
    pub fn reduce_scatter(&self, out: &mut Tensor, input: &Tensor) -> Result<(), CommError> {
        call(|err| unsafe { ffi::vd_reduce_scatter(self.raw.as_ptr(), out.as_ptr(), input.as_ptr(), err) })
            .map_err(comm("reduce-scatter"))
    }

    pub fn barrier(&self) -> Result<(), CommError> {
        call(|err| unsafe { ffi::vd_barrier(self.raw.as_ptr(), err) }).map_err(comm("barrier"))
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        unsafe { ffi::vd_group_free(self.raw.as_ptr()) }
    }
}
