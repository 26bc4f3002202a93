// Variable-length flash attention (`aten::_flash_attention_forward` with `seqused_k`), which
// tch does not bind. Declared in every libtorch; only CUDA builds have a kernel for it, so on
// another device the call fails with the dispatcher's message, returned like any error:
// nothing throws across the boundary.

#include <ATen/ATen.h>
#include <ATen/ops/_flash_attention_forward.h>

#include "guarded.h"

extern "C" {
// q `[total_q, heads, d]`, k and v `[total_k, kv_heads, d]`; sequence i's queries are
// `cu_q[i]..cu_q[i + 1]`, its keys the `seqused_k[i]` from `cu_k[i]` on (int32, on q's
// device); `causal`: query j of a sequence of n sees its keys up to `seqused_k[i] - n + j`.
// Writes `[total_q, heads, d]` into `*out` (a new tensor the caller frees).
int vagen_flash_varlen(const at::Tensor* q, const at::Tensor* k, const at::Tensor* v, const at::Tensor* cu_q,
                       const at::Tensor* cu_k, const at::Tensor* seqused_k, int64_t max_q, int64_t max_k,
                       int causal, at::Tensor** out, char* err, size_t len) {
  return guarded(err, len, [&] {
    auto result = at::_flash_attention_forward(*q, *k, *v, *cu_q, *cu_k, max_q, max_k, 0.0, causal != 0,
                                               /*return_debug_mask=*/false, std::nullopt, std::nullopt,
                                               std::nullopt, *seqused_k, std::nullopt);
    *out = new at::Tensor(std::get<0>(result));
  });
}
}
