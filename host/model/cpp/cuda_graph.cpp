// CUDA graphs for the engine's decode forward: libtorch's `at::cuda::CUDAGraph`, which tch
// does not bind. One capturer per engine holds a side stream (capture refuses the default
// stream; one stream, as torch.cuda.graph's, so the graphs' intermediates can reuse one
// another's memory: the allocator hands a block only to its own stream) and a private memory
// pool the capturer keeps a reference to, so the pool outlives the graphs dropped when the
// cache moves and is captured into again. Graphs replay on the caller's current stream.
// Every call returns 0 or writes the C++ error's text into `err` and returns 1: nothing
// throws across the boundary.
//
// Streams, events and guards go through c10's device-generic types (dispatched to c10_cuda
// at run time), never CUDA's runtime API inline: this object links libtorch_cuda and
// c10_cuda only, not libcudart, which the binary could not find where torch keeps it.

#include <ATen/cuda/CUDAGraph.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>

#include "guarded.h"

#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>

namespace {
namespace alloc = c10::cuda::CUDACachingAllocator;

c10::Device cuda(c10::DeviceIndex d) { return c10::Device(c10::DeviceType::CUDA, d); }

struct Capturer {
  c10::DeviceIndex device;
  c10::MempoolId_t pool;
  c10::Stream side;
  // The caller's stream while the side stream is current (between enter and exit).
  std::optional<c10::Stream> caller;
  std::optional<c10::StreamGuard> guard;

  Capturer(c10::DeviceIndex d, c10::MempoolId_t p, c10::Stream s) : device(d), pool(p), side(s) {}
};

// `to` waits for what is queued on `from` so far.
void order(const c10::Stream& from, const c10::Stream& to) {
  c10::Event done(c10::DeviceType::CUDA);
  done.record(from);
  done.block(to);
}
}  // namespace

extern "C" {
int vagen_capturer_new(int device, void** out, char* err, size_t len) {
  return guarded(err, len, [&] {
    auto d = static_cast<c10::DeviceIndex>(device);
    c10::DeviceGuard on(cuda(d));
    auto pool = at::cuda::graph_pool_handle();
    alloc::createOrIncrefPool(d, pool);
    *out = new Capturer(d, pool, c10::cuda::getStreamFromPool(false, d));
  });
}

// The capturer's pool is released once its graphs are freed (the caller frees them first).
void vagen_capturer_free(void* c) {
  auto* capturer = static_cast<Capturer*>(c);
  try {
    alloc::releasePool(capturer->device, capturer->pool);
  } catch (...) {
  }
  delete capturer;
}

// Makes the side stream current (after what the caller's stream queued): warm-up forwards
// and captures run there.
int vagen_capturer_enter(void* c, char* err, size_t len) {
  auto* capturer = static_cast<Capturer*>(c);
  return guarded(err, len, [&] {
    c10::Stream caller = c10::cuda::getCurrentCUDAStream(capturer->device);
    order(caller, capturer->side);
    capturer->caller.emplace(caller);
    capturer->guard.emplace(capturer->side);
  });
}

// The caller's stream is current again and waits for the side stream's work.
int vagen_capturer_exit(void* c, char* err, size_t len) {
  auto* capturer = static_cast<Capturer*>(c);
  return guarded(err, len, [&] {
    capturer->guard.reset();
    if (capturer->caller) order(capturer->side, *capturer->caller);
    capturer->caller.reset();
  });
}

// A new graph, capturing into the capturer's pool from now on (between enter and exit).
int vagen_graph_begin(void* c, void** out, char* err, size_t len) {
  auto* capturer = static_cast<Capturer*>(c);
  return guarded(err, len, [&] {
    c10::DeviceGuard on(cuda(capturer->device));
    auto graph = std::make_unique<at::cuda::CUDAGraph>();
    graph->capture_begin(capturer->pool, cudaStreamCaptureModeThreadLocal);
    *out = graph.release();
  });
}

// Ends the capture (and instantiates the graph). On an error (an operation the capture
// refused invalidated it, or the forward failed part-way) the allocator is told the pool no
// longer records, which capture_end skips when ending the stream's capture fails; the caller
// must then never free the graph (the allocator may still name it).
int vagen_graph_end(void* c, void* g, char* err, size_t len) {
  auto* capturer = static_cast<Capturer*>(c);
  int failed = guarded(err, len, [&] { static_cast<at::cuda::CUDAGraph*>(g)->capture_end(); });
  if (failed) {
    try {
      alloc::endAllocateToPool(capturer->device, capturer->pool);
    } catch (...) {
    }
  }
  return failed;
}

int vagen_graph_replay(void* c, void* g, char* err, size_t len) {
  auto* capturer = static_cast<Capturer*>(c);
  return guarded(err, len, [&] {
    c10::DeviceGuard on(cuda(capturer->device));
    static_cast<at::cuda::CUDAGraph*>(g)->replay();
  });
}

void vagen_graph_free(void* g) {
  try {
    delete static_cast<at::cuda::CUDAGraph*>(g);
  } catch (...) {
  }
}
}

// Marks on a stream, for reads that overlap the next step: the engine queues a step's copy
// to the host, marks it, launches the next step, and then waits for the mark alone (not for
// the device, which is running that next step).
extern "C" {
// An event recorded on the device's current stream: it follows what was queued there so far.
int vagen_mark_new(int device, void** out, char* err, size_t len) {
  return guarded(err, len, [&] {
    auto d = static_cast<c10::DeviceIndex>(device);
    auto event = std::make_unique<c10::Event>(c10::DeviceType::CUDA);
    event->record(c10::cuda::getCurrentCUDAStream(d));
    *out = event.release();
  });
}

// Blocks the host until what the mark follows has run.
int vagen_mark_wait(void* m, char* err, size_t len) {
  return guarded(err, len, [&] { static_cast<c10::Event*>(m)->synchronize(); });
}

void vagen_mark_free(void* m) {
  try {
    delete static_cast<c10::Event*>(m);
  } catch (...) {
  }
}
}
