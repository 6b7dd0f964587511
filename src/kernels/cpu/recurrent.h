// The time recurrences of the recurrent architectures, each run over a whole sequence inside one
// kernel (no per-token op dispatch), parallel over batch x channels:
//  - RWKV-4's WKV in the numerically stable form of transformers' rwkv_linear_attention_cpu:
//    numerator, denominator and a running max exponent per channel;
//  - Mamba's selective scan (S6): h_t = exp(delta_t A) h_{t-1} + delta_t B_t u_t, y_t = C_t h_t + D u_t.
// Forward kernels read and update a state (generation continues from it); backward kernels
// recompute the forward per channel and run the recurrence in reverse. Float32 forward runs SIMD
// (Highway, dispatched at run time); float64 and the backward are scalar templates.
#pragma once

#include <cstdint>

namespace foundry::kernels {

/// key, value, y: [B, T, C] contiguous; w = -exp(time_decay), u = time_first: [C]; state [B, 3, C]
/// (numerator, denominator, max exponent; a fresh state is 0, 0, -1e38) read and overwritten.
template <typename S>
void rwkv_wkv_forward(const S* w, const S* u, const S* k, const S* v, S* y, S* state, int64_t B, int64_t T, int64_t C);
void rwkv_wkv_forward_f32(const float* w, const float* u, const float* k, const float* v, float* y, float* state,
                          int64_t B, int64_t T, int64_t C);
/// Gradients of y with respect to w (summed over batch and time: [C]), u ([C]), key and value
/// ([B, T, C]) from a fresh state.
template <typename S>
void rwkv_wkv_backward(const S* w, const S* u, const S* k, const S* v, const S* gy, S* gw, S* gu, S* gk, S* gv,
                       int64_t B, int64_t T, int64_t C);

/// x (the scan input u), delta, y: [B, L, D]; A: [D, N]; Bm, Cm: [B, L, N]; Dv: [D]; state
/// [B, D, N] read and overwritten (a fresh state is zeros).
template <typename S>
void selective_scan_forward(const S* x, const S* delta, const S* A, const S* Bm, const S* Cm, const S* Dv, S* y,
                            S* state, int64_t B, int64_t L, int64_t D, int64_t N);
void selective_scan_forward_f32(const float* x, const float* delta, const float* A, const float* Bm, const float* Cm,
                                const float* Dv, float* y, float* state, int64_t B, int64_t L, int64_t D, int64_t N);
/// Gradients from a zero state: gx, gdelta [B, L, D]; gA [D, N]; gB, gC [B, L, N]; gD [D].
template <typename S>
void selective_scan_backward(const S* x, const S* delta, const S* A, const S* Bm, const S* Cm, const S* Dv,
                             const S* gy, S* gx, S* gdelta, S* gA, S* gB, S* gC, S* gD, int64_t B, int64_t L, int64_t D,
                             int64_t N);

}  // namespace foundry::kernels
