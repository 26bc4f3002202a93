// The NCCL process group, compiled only when the libtorch has CUDA and NCCL's and CUDA's
// headers are found (build.rs): its symbols live in libtorch_cuda.

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

c10::intrusive_ptr<c10d::Backend> vd_make_nccl(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
  auto o = c10d::ProcessGroupNCCL::Options::create();
  o->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, o);
}
