// Counts the ATen operators the calling thread dispatches, through libtorch's
// RecordFunction callbacks (what its profiler uses): top-level operators only (those our
// code calls, not the ones they call inside), and apart from them the operators that make
// the host wait for a device (a scalar read, `nonzero`, `masked_select`, a copy to the
// host): a regression in either shows on any machine, GPU or not.
//
// Of the top-level operators, those that compute are counted apart: an operator whose
// schema returns an alias of its input (`view`, `narrow`, `transpose`, ...) and that calls
// nothing but such operators inside only re-describes memory: no kernel, no allocation, and
// nothing a CUDA graph records. `reshape` or `to` that copy call a computing operator
// inside (`clone`, `_to_copy`), so they count as computing.

#include <ATen/core/function_schema.h>
#include <ATen/record_function.h>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {
thread_local int64_t depth = 0;
thread_local int64_t ops = 0;
thread_local int64_t waits = 0;
thread_local int64_t computing = 0;
// Whether the top-level operator now running has computed (itself or inside).
thread_local bool computed = false;
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

// An operator whose first result aliases an input without writing it (a view).
bool is_view(const at::RecordFunction& fn) {
  thread_local std::unordered_map<std::string, bool> known;
  auto [it, fresh] = known.try_emplace(fn.name(), false);
  if (fresh) {
    auto schema = fn.operator_schema();
    if (schema && !schema->returns().empty()) {
      const auto* alias = schema->returns()[0].alias_info();
      it->second = alias != nullptr && !alias->isWrite();
    }
  }
  return it->second;
}

std::unique_ptr<at::ObserverContext> enter(const at::RecordFunction& fn) {
  if (depth++ == 0) {
    ops++;
    computed = false;
  }
  if (!is_view(fn)) computed = true;
  if (waits_for_device(fn.name())) waits++;
  return nullptr;
}

void leave(const at::RecordFunction& fn, at::ObserverContext*) {
  if (--depth == 0) {
    if (computed) computing++;
    if (print_names) std::fprintf(stderr, "op %s%s\n", fn.name(), computed ? "" : " (view)");
  }
}
}  // namespace

extern "C" {
// Starts counting on this thread (from zero); a second start restarts.
void vagen_op_count_start() {
  if (handle != 0) at::removeCallback(handle);
  depth = ops = waits = computing = 0;
  handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(enter, leave).scopes({at::RecordScope::FUNCTION}).needsInputs(false));
}

// Stops counting; the operators, those of them that computed, and the waits seen since
// the start.
void vagen_op_count_stop(int64_t* out_ops, int64_t* out_computing, int64_t* out_waits) {
  if (handle != 0) at::removeCallback(handle);
  handle = 0;
  *out_ops = ops;
  *out_computing = computing;
  *out_waits = waits;
}
}
