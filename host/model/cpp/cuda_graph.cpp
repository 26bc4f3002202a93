// CUDA graphs for the engine's decode forward: libtorch's `at::cuda::CUDAGraph`, which tch
// does not bind. A graph is captured on a side stream taken from the pool (capture refuses
// the default stream), with every graph of one engine drawing on one private memory pool,
// and replayed on the caller's current stream. Every call returns 0 or writes the C++
// error's text into `err` and returns 1: nothing throws across the boundary.

// Streams, events and guards go through c10's device-generic types (dispatched to c10_cuda
// at run time), never CUDA's runtime API inline: this object links libtorch_cuda and
// c10_cuda only, not libcudart, which the binary could not find where torch keeps it.
#include <ATen/cuda/CUDAGraph.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>

namespace {
struct Graph {
  at::cuda::CUDAGraph graph;
  c10::DeviceIndex device;
  c10::Stream side;
  // The caller's stream while the side stream is current (between enter and exit).
  std::optional<c10::Stream> caller;
  std::optional<c10::StreamGuard> guard;
  bool capturing = false;

  explicit Graph(c10::DeviceIndex d) : device(d), side(c10::cuda::getStreamFromPool(false, d)) {}
};

template <typename F>
int guarded(char* err, size_t len, F&& f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    if (len > 0) {
      std::strncpy(err, e.what(), len - 1);
      err[len - 1] = '\0';
    }
    return 1;
  }
}

// `to` waits for what is queued on `from` so far.
void order(const c10::Stream& from, const c10::Stream& to) {
  c10::Event done(c10::DeviceType::CUDA);
  done.record(from);
  done.block(to);
}
}  // namespace

extern "C" {
// A private memory pool for the graphs of one engine (two integers: libtorch's MempoolId_t).
int vagen_graph_pool(uint64_t* a, uint64_t* b, char* err, size_t len) {
  return guarded(err, len, [&] {
    auto id = at::cuda::graph_pool_handle();
    *a = id.first;
    *b = id.second;
  });
}

int vagen_graph_new(int device, void** out, char* err, size_t len) {
  return guarded(err, len, [&] { *out = new Graph(static_cast<c10::DeviceIndex>(device)); });
}

// Makes the side stream current (after what the caller's stream queued): warm-up forwards
// and the capture run there.
int vagen_graph_enter(void* g, char* err, size_t len) {
  auto* graph = static_cast<Graph*>(g);
  return guarded(err, len, [&] {
    c10::Stream caller = c10::cuda::getCurrentCUDAStream(graph->device);
    order(caller, graph->side);
    graph->caller.emplace(caller);
    graph->guard.emplace(graph->side);
  });
}

int vagen_graph_begin(void* g, uint64_t pool_a, uint64_t pool_b, char* err, size_t len) {
  auto* graph = static_cast<Graph*>(g);
  return guarded(err, len, [&] {
    graph->graph.capture_begin({pool_a, pool_b}, cudaStreamCaptureModeThreadLocal);
    graph->capturing = true;
  });
}

int vagen_graph_end(void* g, char* err, size_t len) {
  auto* graph = static_cast<Graph*>(g);
  return guarded(err, len, [&] {
    graph->capturing = false;
    graph->graph.capture_end();
  });
}

// The caller's stream is current again and waits for the side stream's work.
int vagen_graph_exit(void* g, char* err, size_t len) {
  auto* graph = static_cast<Graph*>(g);
  return guarded(err, len, [&] {
    if (graph->capturing) {
      // A forward that failed inside the capture: end it so the stream is usable again
      // (its error is the one reported; this one is not).
      graph->capturing = false;
      try {
        graph->graph.capture_end();
      } catch (...) {
      }
    }
    graph->guard.reset();
    if (graph->caller) order(graph->side, *graph->caller);
    graph->caller.reset();
  });
}

int vagen_graph_replay(void* g, char* err, size_t len) {
  auto* graph = static_cast<Graph*>(g);
  return guarded(err, len, [&] {
    c10::DeviceGuard on(c10::Device(c10::DeviceType::CUDA, graph->device));
    graph->graph.replay();
  });
}

void vagen_graph_free(void* g) {
  try {
    delete static_cast<Graph*>(g);
  } catch (...) {
  }
}
}
