// What tch does not expose about a tensor or the thread, for caches derived from weights:
// whether autograd records this thread's operations, and a tensor's version counter (bumped
// by every in-place write: an optimizer step, a weight load, a refresh).

#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>
#include <cstdint>

extern "C" {
int vagen_grad_enabled() { return c10::GradMode::is_enabled() ? 1 : 0; }

int64_t vagen_tensor_version(const at::Tensor* t) { return static_cast<int64_t>(t->_version()); }
}
