//! Data-parallel ranks on libtorch's own collectives (c10d: TCPStore rendezvous,
//! ProcessGroupGloo, ProcessGroupNCCL) through a small C++ bridge compiled against the
//! libtorch tch links: no byte of a collective crosses sockets of ours.
//!
//! - [`Rendezvous`]: this process's rank from torchrun / PyTorchJob / Slurm variables.
//! - [`Ranks`]: the trainer's view: its share of a list, gathers and sums, and a watchdog
//!   that stops every rank, naming the culprit, when one dies, hangs or fails.
//! - [`Store`] / [`ProcessGroup`]: the c10d objects themselves (the `--nproc` launcher hosts
//!   a store as torchrun's agent does).

mod config;
mod ffi;
mod group;
mod ranks;
mod rendezvous;

pub use config::{Backend, DistributedConfig};
pub use group::{CommError, Library, ProcessGroup, ReduceOp, Store};
pub use ranks::{DistError, EXIT_PEER_LOST, Ranks, share};
pub use rendezvous::{DEFAULT_PORT, Rendezvous, RendezvousError};
