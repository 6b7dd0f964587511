// Memory-efficient attention (FlashAttention-2 style, for CPU): softmax(q k^T * scale + mask) v
// computed over 64 x 64 tiles of queries x keys with an online softmax (running max and sum), so
// the L x S score matrix is never materialised. The SIMD kernels (Highway, run-time dispatch)
// are float32; float16/bfloat16 run through float32 and float64 runs the scalar reference twins
// below (which the tests also check the SIMD kernels against).
//
// Layout: q [BH, L, E], k [BH, S, E], v [BH, S, Ev], out [BH, L, Ev], lse [BH, L] (the row
// log-sum-exp of the scaled, masked scores), all contiguous. The optional additive mask is read
// as mask[mask_off[b] + i * ms_i + j * ms_j] for query i and key j of batch-head b (strides may be
// 0 for broadcast dims; -inf masks out). `causal` keeps keys j <= i (top-left aligned, as
// PyTorch).
// A query row whose keys are all masked out gets NaN (as the math formula).
//
// Backward: D_i = sum_c dO_ic O_ic - dlse_i (dlse: the gradient of lse, if any); P = exp(s - lse);
// dV = P^T dO; dP = dO V^T; dS = P (dP - D); dQ = scale dS K; dK = scale dS^T Q. With at least as many batch-heads as
// threads, one task per batch-head does all five products of each tile; otherwise it runs in two
// passes (over key blocks for dK/dV, over query blocks for dQ). Every output element is written by
// one task and sums its terms in the same order either way, so results do not depend on the
// thread count.
#pragma once

#include <cstdint>

#include "foundry/core/tensor.h"

namespace foundry::kernels {

struct AttnShape {
  int64_t BH = 1, L = 1, S = 1, E = 1, Ev = 1;
  double scale = 1.0;
  bool causal = false;
  const void* mask = nullptr;         // additive; float (float32 kernels) or the reference's T
  const int64_t* mask_off = nullptr;  // per batch-head offset into mask
  int64_t ms_i = 0, ms_j = 0;
  const void* dlse = nullptr;  // backward only: gradient of lse [BH, L] (float or the reference's T)
};

/// float32 SIMD kernels.
void attention_forward_f32(const float* q, const float* k, const float* v, float* out, float* lse, const AttnShape& s);
void attention_backward_f32(const float* q, const float* k, const float* v, const float* out, const float* lse,
                            const float* dout, float* dq, float* dk, float* dv, const AttnShape& s);

/// Reference twins (plain loops, double accumulation) for float and double; the mask pointer of
/// AttnShape is reinterpreted as T (float64 callers pass a double mask).
template <typename T>
void attention_forward_ref(const T* q, const T* k, const T* v, T* out, T* lse, const AttnShape& s);
template <typename T>
void attention_backward_ref(const T* q, const T* k, const T* v, const T* out, const T* lse, const T* dout, T* dq,
                            T* dk, T* dv, const AttnShape& s);

/// Tensor-level drivers. q/k/v: [..., L, E] / [..., S, E] / [..., S, Ev] with equal batch dims;
/// mask: undefined, bool (true keeps) or floating (added), broadcastable to [..., L, S].
/// Returns {out [..., L, Ev], lse [..., L]} (lse in float32, or float64 for float64 inputs).
std::vector<Tensor> attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                      bool causal, double scale);
/// Returns {dq, dk, dv}. dlse (the gradient of lse) may be undefined.
std::vector<Tensor> attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& out, const Tensor& lse, const Tensor& dlse, const Tensor& mask,
                                       bool causal, double scale);

/// Forces the reference loops for float32 too (tests compare the two).
void set_attention_use_reference(bool on);

}  // namespace foundry::kernels
