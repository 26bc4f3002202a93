// Counts the ATen operators the calling thread dispatches, through libtorch's
// RecordFunction callbacks (what its profiler uses): top-level operators only (those our
// code calls, not the ones they call inside), and apart from them the operators that make
// the host wait for a device (a scalar read, `nonzero`, `masked_select`, a copy to the
// host): a regression in either shows on any machine, GPU or not.

#include <ATen/record_function.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {
thread_local int64_t depth = 0;
thread_local int64_t ops = 0;
thread_local int64_t waits = 0;
thread_local at::CallbackHandle handle = 0;
// `VAGEN_OP_COUNT_NAMES=1`: each counted operator's name on stderr, to see where they go.
const bool print_names = std::getenv("VAGEN_OP_COUNT_NAMES") != nullptr;

bool waits_for_device(const char* name) {
  static const char* const names[] = {"aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select",
                                      "aten::item", "aten::_assert_async"};
  for (const char* n : names) {
    if (std::strcmp(name, n) == 0) return true;
  }
  return false;
}

std::unique_ptr<at::ObserverContext> enter(const at::RecordFunction& fn) {
  if (depth++ == 0) {
    ops++;
    if (print_names) std::fprintf(stderr, "op %s\n", fn.name());
  }
  if (waits_for_device(fn.name())) waits++;
  return nullptr;
}

void leave(const at::RecordFunction&, at::ObserverContext*) { depth--; }
}  // namespace

extern "C" {
// Starts counting on this thread (from zero); a second start restarts.
void vagen_op_count_start() {
  if (handle != 0) at::removeCallback(handle);
  depth = ops = waits = 0;
  handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(enter, leave).scopes({at::RecordScope::FUNCTION}).needsInputs(false));
}

// Stops counting; the operators and the waits seen since the start.
void vagen_op_count_stop(int64_t* out_ops, int64_t* out_waits) {
  if (handle != 0) at::removeCallback(handle);
  handle = 0;
  *out_ops = ops;
  *out_waits = waits;
}
}
