// The C face of libtorch's c10d for Rust: a TCPStore rendezvous, a gloo process group (CPU
// tensors, and the metadata every step exchanges) and, where the libtorch has CUDA, an NCCL
// one (bridge_nccl.cpp). Nothing here communicates by itself: every byte crosses c10d.
//
// Every function catches C++ exceptions and returns them as a malloc'd message in `*err`
// (freed with vd_free), so no exception ever unwinds into Rust.

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>
#include <cstring>
#include <string>

// Defined in bridge_nccl.cpp when the libtorch has CUDA and the build found NCCL's headers.
c10::intrusive_ptr<c10d::Backend> vd_make_nccl(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout);

extern "C" {

struct vd_store {
  c10::intrusive_ptr<c10d::Store> store;
};

struct vd_group {
  c10::intrusive_ptr<c10d::Backend> backend;
  std::chrono::milliseconds timeout;
};

void vd_free(char* p) { std::free(p); }

static int fail(char** err, const char* what) {
  *err = strdup(what);
  return 1;
}

// c10's errors carry a C++ stack trace in what(); the message alone goes to the user.
#define VD_TRY(...)                                   \
  try {                                               \
    __VA_ARGS__;                                      \
    return 0;                                         \
  } catch (const c10::Error& e) {                     \
    return fail(err, e.what_without_backtrace());     \
  } catch (const std::exception& e) {                 \
    return fail(err, e.what());                       \
  } catch (...) {                                     \
    return fail(err, "an unknown C++ exception");     \
  }

// Meets the others at host:port. `server`: this process hosts the store (rank 0 when no
// launcher does, or the launcher); `wait`: every rank counts itself in and the server waits
// for that many (0: no count, as clients of a launcher's store);
// `prefix`: keys live under it (torchrun's agent store is shared by every restart);
// `listen_fd` (a server's, or -1): a socket the caller bound to the interface the store must
// listen on (c10d's own binds every interface).
int vd_store_new(const char* host, int port, int server, int wait, int64_t timeout_ms, const char* prefix,
                 int listen_fd, vd_store** out, char** err) {
  VD_TRY({
    c10d::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(port);
    o.isServer = server != 0;
    if (listen_fd >= 0) o.masterListenFd = listen_fd;
    if (wait > 0) o.numWorkers = static_cast<size_t>(wait);
    o.waitWorkers = wait > 0;
    o.timeout = std::chrono::milliseconds(timeout_ms);
    c10::intrusive_ptr<c10d::Store> s = c10::make_intrusive<c10d::TCPStore>(std::string(host), o);
    if (prefix && *prefix) {
      s = c10::make_intrusive<c10d::PrefixStore>(std::string(prefix), s);
    }
    *out = new vd_store{s};
  })
}

void vd_store_free(vd_store* s) { delete s; }

int vd_store_set(vd_store* s, const char* key, const uint8_t* data, size_t len, char** err) {
  VD_TRY({ s->store->set(std::string(key), std::vector<uint8_t>(data, data + len)); })
}

// `*found` = 0 when the key is absent (never waits for it).
int vd_store_get(vd_store* s, const char* key, uint8_t** data, size_t* len, int* found, char** err) {
  VD_TRY({
    std::string k(key);
    *found = s->store->check({k}) ? 1 : 0;
    *data = nullptr;
    *len = 0;
    if (*found) {
      auto v = s->store->get(k);
      *data = static_cast<uint8_t*>(std::malloc(v.size() > 0 ? v.size() : 1));
      std::memcpy(*data, v.data(), v.size());
      *len = v.size();
    }
  })
}

// A gloo group over the store: its device binds GLOO_SOCKET_IFNAME's interface when set (as
// torch.distributed does), else the address this host's name resolves to.
int vd_gloo_new(vd_store* s, int rank, int size, int64_t timeout_ms, vd_group** out, char** err) {
  VD_TRY({
    auto timeout = std::chrono::milliseconds(timeout_ms);
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    if (ifname && *ifname) {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(std::string(ifname)));
    } else {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    auto store = c10::make_intrusive<c10d::PrefixStore>("gloo/", s->store);
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
    *out = new vd_group{pg, timeout};
  })
}

int vd_nccl_new(vd_store* s, int rank, int size, int64_t timeout_ms, vd_group** out, char** err) {
  VD_TRY({
    auto timeout = std::chrono::milliseconds(timeout_ms);
    auto store = c10::make_intrusive<c10d::PrefixStore>("nccl/", s->store);
    *out = new vd_group{vd_make_nccl(store, rank, size, timeout), timeout};
  })
}

void vd_group_free(vd_group* g) { delete g; }

static void finish(vd_group* g, const c10::intrusive_ptr<c10d::Work>& work) {
  if (!work->wait(g->timeout)) {
    throw std::runtime_error("the collective did not complete within the timeout");
  }
}

// op: 0 sum, 1 max, 2 min.
int vd_all_reduce(vd_group* g, at::Tensor* t, int op, char** err) {
  VD_TRY({
    c10d::AllreduceOptions o;
    o.reduceOp = op == 1 ? c10d::ReduceOp::MAX : op == 2 ? c10d::ReduceOp::MIN : c10d::ReduceOp::SUM;
    o.timeout = g->timeout;
    std::vector<at::Tensor> ts{*t};
    finish(g, g->backend->allreduce(ts, o));
  })
}

int vd_broadcast(vd_group* g, at::Tensor* t, int root, char** err) {
  VD_TRY({
    c10d::BroadcastOptions o;
    o.rootRank = root;
    o.timeout = g->timeout;
    std::vector<at::Tensor> ts{*t};
    finish(g, g->backend->broadcast(ts, o));
  })
}

// `out` holds every rank's `in`, in rank order (size × in's numel).
int vd_all_gather(vd_group* g, at::Tensor* out, at::Tensor* in, char** err) {
  VD_TRY({
    c10d::AllgatherOptions o;
    o.timeout = g->timeout;
    finish(g, g->backend->_allgather_base(*out, *in, o));
  })
}

// `out` (in's numel ÷ size) is this rank's slice of the sum of every rank's `in`.
int vd_reduce_scatter(vd_group* g, at::Tensor* out, at::Tensor* in, char** err) {
  VD_TRY({
    c10d::ReduceScatterOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    o.timeout = g->timeout;
    finish(g, g->backend->_reduce_scatter_base(*out, *in, o));
  })
}

int vd_barrier(vd_group* g, char** err) {
  VD_TRY({
    c10d::BarrierOptions o;
    o.timeout = g->timeout;
    finish(g, g->backend->barrier(o));
  })
}

}  // extern "C"

#ifndef VD_HAVE_NCCL
c10::intrusive_ptr<c10d::Backend> vd_make_nccl(
    const c10::intrusive_ptr<c10d::Store>&, int, int, std::chrono::milliseconds) {
  throw std::runtime_error(
      "this build has no NCCL: its libtorch has no CUDA, or NCCL's headers were not found when it was built "
      "(use distributed.backend = \"gloo\")");
}
#endif
