//! A device tensor's copy to the host, started now and waited for later: the engine queues
//! a decode step's tokens for the host, launches the next step, and only then waits, so the
//! host checks one step's stops while the device runs the next. On CUDA the copy lands in
//! page-locked memory (libtorch pins a non-blocking copy's destination) and a mark (an event
//! on the stream, `cpp/cuda_graph.cpp`) says when it ran; elsewhere it is made at once.

use crate::Result;
use crate::cuda_graph::Mark;
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
