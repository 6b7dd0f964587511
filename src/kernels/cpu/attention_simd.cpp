// SIMD attention kernels (see attention.h). Highway, compiled per x86 target, chosen at run time.
//
// The matrix products inside a tile use one register-blocked micro-kernel, C[4 x 4 vectors] +=
// A[4 x K] B[K x 4 vectors] (B row-major, A values broadcast): 16 accumulators, 4 loads and 4
// broadcasts per step of K. Keys are transposed once per batch-head (k^T [E, S padded to 64]) so
// that q k^T is such a product; v, dO, q and k are used in place when their widths are multiples
// of the vector length, else copied once into padded buffers.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/attention_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "foundry/core/parallel.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/transpose.h"

HWY_BEFORE_NAMESPACE();
namespace foundry::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
constexpr int64_t kBlk = 64;  // queries x keys per tile

inline int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// C[4 x 4N] (+)= A[4 x K] B[K x 4N]; with kTransA, A is stored transposed ([K x 4], A(r, k) at
// A[k * lda + r]).
template <bool kTransA>
HWY_INLINE void Micro4x4(float* HWY_RESTRICT C, int64_t ldc, const float* HWY_RESTRICT A, int64_t lda,
                         const float* HWY_RESTRICT B, int64_t ldb, int64_t K, bool acc) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  using V = hn::Vec<DF>;
  V c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33;
  if (acc) {
    c00 = hn::LoadU(d, C), c01 = hn::LoadU(d, C + N), c02 = hn::LoadU(d, C + 2 * N), c03 = hn::LoadU(d, C + 3 * N);
    c10 = hn::LoadU(d, C + ldc), c11 = hn::LoadU(d, C + ldc + N), c12 = hn::LoadU(d, C + ldc + 2 * N),
    c13 = hn::LoadU(d, C + ldc + 3 * N);
    c20 = hn::LoadU(d, C + 2 * ldc), c21 = hn::LoadU(d, C + 2 * ldc + N), c22 = hn::LoadU(d, C + 2 * ldc + 2 * N),
    c23 = hn::LoadU(d, C + 2 * ldc + 3 * N);
    c30 = hn::LoadU(d, C + 3 * ldc), c31 = hn::LoadU(d, C + 3 * ldc + N), c32 = hn::LoadU(d, C + 3 * ldc + 2 * N),
    c33 = hn::LoadU(d, C + 3 * ldc + 3 * N);
  } else {
    c00 = c01 = c02 = c03 = c10 = c11 = c12 = c13 = c20 = c21 = c22 = c23 = c30 = c31 = c32 = c33 = hn::Zero(d);
  }
  // Element (r, kk) of A.
  const int64_t rs = kTransA ? 1 : lda, ks = kTransA ? lda : 1;
  for (int64_t kk = 0; kk < K; ++kk) {
    const float* b = B + kk * ldb;
    const float* a = A + kk * ks;
    const V b0 = hn::LoadU(d, b), b1 = hn::LoadU(d, b + N), b2 = hn::LoadU(d, b + 2 * N), b3 = hn::LoadU(d, b + 3 * N);
    V av = hn::Set(d, a[0]);
    c00 = hn::MulAdd(av, b0, c00), c01 = hn::MulAdd(av, b1, c01), c02 = hn::MulAdd(av, b2, c02), c03 = hn::MulAdd(av, b3, c03);
    av = hn::Set(d, a[rs]);
    c10 = hn::MulAdd(av, b0, c10), c11 = hn::MulAdd(av, b1, c11), c12 = hn::MulAdd(av, b2, c12), c13 = hn::MulAdd(av, b3, c13);
    av = hn::Set(d, a[2 * rs]);
    c20 = hn::MulAdd(av, b0, c20), c21 = hn::MulAdd(av, b1, c21), c22 = hn::MulAdd(av, b2, c22), c23 = hn::MulAdd(av, b3, c23);
    av = hn::Set(d, a[3 * rs]);
    c30 = hn::MulAdd(av, b0, c30), c31 = hn::MulAdd(av, b1, c31), c32 = hn::MulAdd(av, b2, c32), c33 = hn::MulAdd(av, b3, c33);
  }
  hn::StoreU(c00, d, C), hn::StoreU(c01, d, C + N), hn::StoreU(c02, d, C + 2 * N), hn::StoreU(c03, d, C + 3 * N);
  hn::StoreU(c10, d, C + ldc), hn::StoreU(c11, d, C + ldc + N), hn::StoreU(c12, d, C + ldc + 2 * N),
  hn::StoreU(c13, d, C + ldc + 3 * N);
  hn::StoreU(c20, d, C + 2 * ldc), hn::StoreU(c21, d, C + 2 * ldc + N), hn::StoreU(c22, d, C + 2 * ldc + 2 * N),
  hn::StoreU(c23, d, C + 2 * ldc + 3 * N);
  hn::StoreU(c30, d, C + 3 * ldc), hn::StoreU(c31, d, C + 3 * ldc + N), hn::StoreU(c32, d, C + 3 * ldc + 2 * N),
  hn::StoreU(c33, d, C + 3 * ldc + 3 * N);
}

// C[4 x N] (+)= A[4 x K] B[K x N] (one vector of columns).
template <bool kTransA>
HWY_INLINE void Micro4x1(float* HWY_RESTRICT C, int64_t ldc, const float* HWY_RESTRICT A, int64_t lda,
                         const float* HWY_RESTRICT B, int64_t ldb, int64_t K, bool acc) {
  const DF d;
  using V = hn::Vec<DF>;
  V c0 = acc ? hn::LoadU(d, C) : hn::Zero(d), c1 = acc ? hn::LoadU(d, C + ldc) : hn::Zero(d);
  V c2 = acc ? hn::LoadU(d, C + 2 * ldc) : hn::Zero(d), c3 = acc ? hn::LoadU(d, C + 3 * ldc) : hn::Zero(d);
  const int64_t rs = kTransA ? 1 : lda, ks = kTransA ? lda : 1;
  for (int64_t kk = 0; kk < K; ++kk) {
    const V b = hn::LoadU(d, B + kk * ldb);
    const float* a = A + kk * ks;
    c0 = hn::MulAdd(hn::Set(d, a[0]), b, c0);
    c1 = hn::MulAdd(hn::Set(d, a[rs]), b, c1);
    c2 = hn::MulAdd(hn::Set(d, a[2 * rs]), b, c2);
    c3 = hn::MulAdd(hn::Set(d, a[3 * rs]), b, c3);
  }
  hn::StoreU(c0, d, C), hn::StoreU(c1, d, C + ldc), hn::StoreU(c2, d, C + 2 * ldc), hn::StoreU(c3, d, C + 3 * ldc);
}

// C[M x N] (+)= A[M x K] B[K x N], row-major; M % 4 == 0, N % lanes == 0. kTransA: A is given as
// its transpose [K x M] (lda its row stride).
template <bool kTransA = false>
void Gemm(float* C, int64_t ldc, const float* A, int64_t lda, const float* B, int64_t ldb, int64_t M, int64_t Nc,
          int64_t K, bool acc) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  for (int64_t i = 0; i < M; i += 4) {
    const float* a = kTransA ? A + i : A + i * lda;
    int64_t j = 0;
    for (; j + 4 * N <= Nc; j += 4 * N) Micro4x4<kTransA>(C + i * ldc + j, ldc, a, lda, B + j, ldb, K, acc);
    for (; j < Nc; j += N) Micro4x1<kTransA>(C + i * ldc + j, ldc, a, lda, B + j, ldb, K, acc);
  }
}

// A [BH][rows][cols] tensor copied into [BH][rows][ld] (zero padded), or used in place.
const float* Padded(const float* src, int64_t BH, int64_t rows, int64_t cols, int64_t ld, ScratchArray<float>& buf) {
  if (ld == cols) return src;
  buf = ScratchArray<float>(size_t(BH * rows * ld));
  parallel_for(0, BH * rows, 4096 / std::max<int64_t>(cols, 1) + 1, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      std::memcpy(buf.data() + r * ld, src + r * cols, size_t(cols) * sizeof(float));
      std::fill(buf.data() + r * ld + cols, buf.data() + (r + 1) * ld, 0.0f);
    }
  });
  return buf.data();
}

// [BH][rows][cols] -> [BH][cols][Sp] (zero padded columns).
void TransposeAll(const float* src, int64_t BH, int64_t rows, int64_t cols, int64_t Sp, ScratchArray<float>& dst) {
  dst = ScratchArray<float>(size_t(BH * cols * Sp));
  parallel_for(0, BH, 1, [&](int64_t b, int64_t e) {
    for (int64_t bh = b; bh < e; ++bh) {
      float* out = dst.data() + bh * cols * Sp;
      transpose_tiles<TileWalk::AlongDestination>(src + bh * rows * cols, cols, out, Sp, rows, cols);
      for (int64_t c = 0; c < cols; ++c) std::fill(out + c * Sp + rows, out + (c + 1) * Sp, 0.0f);
    }
  });
}

// Runs body(thread_buffers, item) for items [0, n) on the pool, handing items out one at a time
// from a shared counter: a thread slowed down (a busy core) simply takes fewer tiles. The result
// of an item never depends on which thread ran it.
template <typename Scratch, typename F>
void ForEachItem(int64_t n, const std::function<Scratch()>& make_scratch, F body) {
  std::atomic<int64_t> next{0};
  const int64_t nt = std::min<int64_t>(get_num_threads(), n);
  parallel_for(0, nt, 1, [&](int64_t, int64_t) {
    Scratch scratch = make_scratch();
    for (int64_t item = next++; item < n; item = next++) body(scratch, item);
  });
}

// The zigzag order of query blocks: 0, n-1, 1, n-2, ... so that contiguous ranges of work items
// carry similar causal work.
inline int64_t Zigzag(int64_t t, int64_t n) { return (t % 2 == 0) ? t / 2 : n - 1 - t / 2; }

// Scales row i of a score tile, adds the mask, and sets masked / out-of-range keys to -inf.
// Returns the number of leading keys that can be valid (<= 0: the whole row is masked); sets `nan`
// when a kept score is NaN (the exp and max below would silently drop it).
HWY_INLINE int64_t ScoreRow(float* HWY_RESTRICT row, const AttnShape& s, int64_t bh, int64_t qi, int64_t k0,
                            int64_t kc, bool& nan) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t nvalid = kc;
  if (s.causal) nvalid = std::min(kc, qi - k0 + 1);
  if (nvalid <= 0) return nvalid;
  const auto vs = hn::Set(d, float(s.scale));
  const auto ninf = hn::Set(d, -std::numeric_limits<float>::infinity());
  const float* mk = s.mask ? static_cast<const float*>(s.mask) + s.mask_off[bh] + qi * s.ms_i + k0 * s.ms_j : nullptr;
  for (int64_t j = 0; j < kBlk; j += N) {
    auto x = hn::Mul(hn::LoadU(d, row + j), vs);
    if (mk) {
      if (s.ms_j == 1) {
        if (j + N <= kc) {
          x = hn::Add(x, hn::LoadU(d, mk + j));
        } else {
          alignas(64) float tmp[64] = {};
          for (int64_t t = 0; t < N && j + t < kc; ++t) tmp[t] = mk[j + t];
          x = hn::Add(x, hn::LoadU(d, tmp));
        }
      } else {
        x = hn::Add(x, hn::Set(d, mk[0]));  // broadcast over keys (ms_j == 0)
      }
    }
    const int64_t left = nvalid - j;
    const auto keep = hn::FirstN(d, size_t(std::max<int64_t>(0, std::min<int64_t>(left, N))));
    if (!hn::AllFalse(d, hn::And(keep, hn::IsNaN(x)))) nan = true;
    hn::StoreU(hn::IfThenElse(keep, x, ninf), d, row + j);
  }
  return nvalid;
}

HWY_INLINE float RowMax(const float* row) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  auto m = hn::LoadU(d, row);
  for (int64_t j = N; j < kBlk; j += N) m = hn::Max(m, hn::LoadU(d, row + j));
  return hn::GetLane(hn::MaxOfLanes(d, m));
}

// row = exp(row - shift); returns the sum (masked entries at -inf become 0).
HWY_INLINE float ExpRow(float* row, float shift) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto vm = hn::Set(d, shift);
  auto sum = hn::Zero(d);
  for (int64_t j = 0; j < kBlk; j += N) {
    auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, row + j), vm));
    hn::StoreU(e, d, row + j);
    sum = hn::Add(sum, e);
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

HWY_INLINE void ScaleRow(float* row, int64_t n, float a) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto va = hn::Set(d, a);
  for (int64_t j = 0; j < n; j += N) hn::StoreU(hn::Mul(hn::LoadU(d, row + j), va), d, row + j);
}

void AttentionForwardF32(const float* q, const float* k, const float* v, float* out, float* lse, const AttnShape& s) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const int64_t BH = s.BH, L = s.L, S = s.S, E = s.E, Ev = s.Ev;
  const int64_t Sp = RoundUp(S, kBlk), Evp = RoundUp(Ev, N);
  ScratchArray<float> kt, vp;
  TransposeAll(k, BH, S, E, Sp, kt);
  const float* vv = Padded(v, BH, S, Ev, Evp, vp);
  const int64_t nq = (L + kBlk - 1) / kBlk;
  const float ninf = -std::numeric_limits<float>::infinity();
  struct Scratch {
    std::vector<float> qb, sb, ob, m, l;
  };
  ForEachItem<Scratch>(BH * nq, [&] {
    return Scratch{std::vector<float>(size_t(kBlk * E)), std::vector<float>(size_t(kBlk * kBlk)),
                   std::vector<float>(size_t(kBlk * Evp)), std::vector<float>(kBlk), std::vector<float>(kBlk)};
  }, [&](Scratch& sc, int64_t item) {
    std::vector<float>&qb = sc.qb, &sb = sc.sb, &ob = sc.ob, &m = sc.m, &l = sc.l;
    bool nan_row[kBlk] = {};  // a NaN score makes the whole output row NaN (as the math formula)
    {
      const int64_t bh = item / nq, q0 = Zigzag(item % nq, nq) * kBlk;
      const int64_t qc = std::min(kBlk, L - q0), Mr = RoundUp(qc, 4);
      std::fill(qb.begin(), qb.end(), 0.0f);
      std::memcpy(qb.data(), q + (bh * L + q0) * E, size_t(qc * E) * sizeof(float));
      std::fill(ob.begin(), ob.begin() + Mr * Evp, 0.0f);
      std::fill(m.begin(), m.end(), ninf);
      std::fill(l.begin(), l.end(), 0.0f);
      const int64_t kend = s.causal ? std::min(S, q0 + qc) : S;
      for (int64_t k0 = 0; k0 < kend; k0 += kBlk) {
        const int64_t kc = std::min(kBlk, S - k0);
        Gemm(sb.data(), kBlk, qb.data(), E, kt.data() + bh * E * Sp + k0, Sp, Mr, kBlk, E, false);
        for (int64_t i = 0; i < Mr; ++i) {
          float* row = sb.data() + i * kBlk;
          const int64_t nvalid = i < qc ? ScoreRow(row, s, bh, q0 + i, k0, kc, nan_row[i]) : 0;
          if (nvalid <= 0 || nan_row[i]) {
            std::fill(row, row + kBlk, 0.0f);
            continue;
          }
          const float m_new = std::max(m[size_t(i)], RowMax(row));
          if (m_new == ninf) {  // every key so far is masked out
            std::fill(row, row + kBlk, 0.0f);
            continue;
          }
          const float alpha = std::exp(m[size_t(i)] - m_new);
          const float sum = ExpRow(row, m_new);
          l[size_t(i)] = l[size_t(i)] * alpha + sum;
          m[size_t(i)] = m_new;
          if (alpha != 1.0f) ScaleRow(ob.data() + i * Evp, Evp, alpha);
        }
        Gemm(ob.data(), Evp, sb.data(), kBlk, vv + (bh * S + k0) * Evp, Evp, Mr, Evp, kc, true);
      }
      for (int64_t i = 0; i < qc; ++i) {
        const float inv = 1.0f / l[size_t(i)];  // l == 0 (all keys masked): NaN, as the math formula
        float* o = out + (bh * L + q0 + i) * Ev;
        const float* src = ob.data() + i * Evp;
        const bool undefined = l[size_t(i)] == 0.0f || nan_row[i];
        for (int64_t c = 0; c < Ev; ++c) o[c] = undefined ? std::numeric_limits<float>::quiet_NaN() : src[c] * inv;
        lse[bh * L + q0 + i] =
            nan_row[i] ? std::numeric_limits<float>::quiet_NaN() : m[size_t(i)] + std::log(l[size_t(i)]);
      }
    }
  });
}

// Recomputes the probabilities P (in sb) and dS (in ds) of one tile; rows >= qc are zero.
// Rows with fix_inv != 0 rebuild P from their own max and 1 / sum (see RowNormalizers).
HWY_INLINE void TileGrad(const float* qb, const float* dob, const float* kt, const float* vt, int64_t Sp,
                         const float* lse, const float* fix_m, const float* fix_inv, const float* D, float* sb,
                         float* ds, const AttnShape& s, int64_t bh, int64_t q0, int64_t qc, int64_t Mr, int64_t k0,
                         int64_t kc) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  Gemm(sb, kBlk, qb, s.E, kt + k0, Sp, Mr, kBlk, s.E, false);
  Gemm(ds, kBlk, dob, s.Ev, vt + k0, Sp, Mr, kBlk, s.Ev, false);  // dP
  for (int64_t i = 0; i < Mr; ++i) {
    float* row = sb + i * kBlk;
    float* dr = ds + i * kBlk;
    bool nan = false;
    const int64_t nvalid = i < qc ? ScoreRow(row, s, bh, q0 + i, k0, kc, nan) : 0;
    if (nvalid <= 0) {
      std::fill(row, row + kBlk, 0.0f);
      std::fill(dr, dr + kBlk, 0.0f);
      continue;
    }
    if (nan || std::isnan(lse[q0 + i])) {  // undefined row: NaN gradients, as the math formula
      std::fill(row, row + nvalid, std::numeric_limits<float>::quiet_NaN());
      std::fill(dr, dr + nvalid, std::numeric_limits<float>::quiet_NaN());
      std::fill(row + nvalid, row + kBlk, 0.0f);
      std::fill(dr + nvalid, dr + kBlk, 0.0f);
      continue;
    }
    if (fix_inv[q0 + i] != 0.0f) {
      ExpRow(row, fix_m[q0 + i]);
      ScaleRow(row, kBlk, fix_inv[q0 + i]);
    } else {
      ExpRow(row, lse[q0 + i]);
    }
    const auto vd = hn::Set(d, D[q0 + i]);
    for (int64_t j = 0; j < kBlk; j += N) {
      const auto p = hn::LoadU(d, row + j);
      hn::StoreU(hn::Mul(p, hn::Sub(hn::LoadU(d, dr + j), vd)), d, dr + j);
    }
  }
}

void AttentionBackwardF32(const float* q, const float* k, const float* v, const float* out, const float* lse,
                          const float* dout, float* dq, float* dk, float* dv, const AttnShape& s) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const int64_t BH = s.BH, L = s.L, S = s.S, E = s.E, Ev = s.Ev;
  const int64_t Sp = RoundUp(S, kBlk), Ep = RoundUp(E, N), Evp = RoundUp(Ev, N);
  ScratchArray<float> kt, vt, qp_buf, kp_buf, dop_buf, Dbuf(size_t(BH * L));
  TransposeAll(k, BH, S, E, Sp, kt);
  TransposeAll(v, BH, S, Ev, Sp, vt);
  const float* qp = Padded(q, BH, L, E, Ep, qp_buf);
  const float* kp = Padded(k, BH, S, E, Ep, kp_buf);
  const float* dop = Padded(dout, BH, L, Ev, Evp, dop_buf);
  // D = rowsum(dO * O)
  parallel_for(0, BH * L, std::max<int64_t>(1, 4096 / std::max<int64_t>(Ev, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < Ev; ++c) acc += double(dout[r * Ev + c]) * double(out[r * Ev + c]);
      if (s.dlse) acc -= double(static_cast<const float*>(s.dlse)[r]);
      Dbuf[size_t(r)] = float(acc);
    }
  });
  // A row whose scores all sit near the lowest float (a finite mask over every key, as HF's masks
  // give a padding query) has lse = m + log(l) rounded to m, so exp(s - lse) would be 1 for every
  // key instead of 1 / l: such rows rebuild P from their own max and sum.
  ScratchArray<float> fix_m(size_t(BH * L)), fix_inv(size_t(BH * L));
  std::fill(fix_m.data(), fix_m.data() + BH * L, 0.0f);
  std::fill(fix_inv.data(), fix_inv.data() + BH * L, 0.0f);
  parallel_for(0, BH * L, 64, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      if (!std::isfinite(lse[r]) || std::fabs(lse[r]) < 1e7f) continue;
      const int64_t bh = r / L, i = r % L, keys = s.causal ? std::min(S, i + 1) : S;
      const float* mk = s.mask ? static_cast<const float*>(s.mask) + s.mask_off[bh] + i * s.ms_i : nullptr;
      std::vector<float> x(static_cast<size_t>(keys));
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < keys; ++j) {
        float dot = 0;
        for (int64_t c = 0; c < E; ++c) dot += q[(bh * L + i) * E + c] * k[(bh * S + j) * E + c];
        x[size_t(j)] = dot * float(s.scale) + (mk ? mk[j * s.ms_j] : 0.0f);
        m = std::max(m, x[size_t(j)]);
      }
      double l = 0;
      for (int64_t j = 0; j < keys; ++j) l += std::exp(double(x[size_t(j)]) - double(m));
      fix_m[size_t(r)] = m;
      fix_inv[size_t(r)] = float(1.0 / l);
    }
  });
  const int64_t nq = (L + kBlk - 1) / kBlk, nk = (S + kBlk - 1) / kBlk;
  const float scale = float(s.scale);
  auto load_rows = [&](std::vector<float>& qb, std::vector<float>& dob, int64_t bh, int64_t q0, int64_t qc) {
    std::fill(qb.begin(), qb.end(), 0.0f);
    std::fill(dob.begin(), dob.end(), 0.0f);
    std::memcpy(qb.data(), q + (bh * L + q0) * E, size_t(qc * E) * sizeof(float));
    std::memcpy(dob.data(), dout + (bh * L + q0) * Ev, size_t(qc * Ev) * sizeof(float));
  };
  struct Scratch {
    std::vector<float> qb, dob, sb, ds, dkb, dvb, dqb;
  };
  auto make_scratch = [&] {
    return Scratch{std::vector<float>(size_t(kBlk * E)),    std::vector<float>(size_t(kBlk * Ev)),
                   std::vector<float>(size_t(kBlk * kBlk)), std::vector<float>(size_t(kBlk * kBlk)),
                   std::vector<float>(size_t(kBlk * Ep)),   std::vector<float>(size_t(kBlk * Evp)),
                   std::vector<float>()};
  };
  // dK and dV of key block kb (summing over its query blocks in order); with dq_acc, also adds
  // dS K into the rows of dq_acc ([L rounded to 4][Ep]).
  auto key_block = [&](Scratch& sc, int64_t bh, int64_t kb, float* dq_acc) {
    const int64_t k0 = kb * kBlk, kc = std::min(kBlk, S - k0);
    std::fill(sc.dkb.begin(), sc.dkb.end(), 0.0f);
    std::fill(sc.dvb.begin(), sc.dvb.end(), 0.0f);
    const int64_t qstart = s.causal ? (k0 / kBlk) * kBlk : 0;
    for (int64_t q0 = qstart; q0 < L; q0 += kBlk) {
      const int64_t qc = std::min(kBlk, L - q0), Mr = RoundUp(qc, 4);
      load_rows(sc.qb, sc.dob, bh, q0, qc);
      TileGrad(sc.qb.data(), sc.dob.data(), kt.data() + bh * E * Sp, vt.data() + bh * Ev * Sp, Sp, lse + bh * L,
               fix_m.data() + bh * L, fix_inv.data() + bh * L, Dbuf.data() + bh * L, sc.sb.data(), sc.ds.data(), s, bh, q0, qc, Mr, k0, kc);
      // dV += P^T dO, dK += dS^T Q (P and dS used transposed in place).
      Gemm<true>(sc.dvb.data(), Evp, sc.sb.data(), kBlk, dop + (bh * L + q0) * Evp, Evp, kBlk, Evp, qc, true);
      Gemm<true>(sc.dkb.data(), Ep, sc.ds.data(), kBlk, qp + (bh * L + q0) * Ep, Ep, kBlk, Ep, qc, true);
      if (dq_acc) Gemm(dq_acc + q0 * Ep, Ep, sc.ds.data(), kBlk, kp + (bh * S + k0) * Ep, Ep, Mr, Ep, kc, true);
    }
    for (int64_t j = 0; j < kc; ++j) {
      for (int64_t c = 0; c < E; ++c) dk[(bh * S + k0 + j) * E + c] = sc.dkb[size_t(j * Ep + c)] * scale;
      for (int64_t c = 0; c < Ev; ++c) dv[(bh * S + k0 + j) * Ev + c] = sc.dvb[size_t(j * Evp + c)];
    }
  };
  if (BH >= get_num_threads()) {
    // One task per batch-head: dQ accumulates across its key blocks (5 products per tile).
    ForEachItem<Scratch>(BH, make_scratch, [&](Scratch& sc, int64_t bh) {
      sc.dqb.assign(size_t(RoundUp(L, 4) * Ep), 0.0f);
      for (int64_t kb = 0; kb < nk; ++kb) key_block(sc, bh, kb, sc.dqb.data());
      for (int64_t i = 0; i < L; ++i)
        for (int64_t c = 0; c < E; ++c) dq[(bh * L + i) * E + c] = sc.dqb[size_t(i * Ep + c)] * scale;
    });
    return;
  }
  // Few batch-heads: parallel over key blocks for dK/dV, then over query blocks for dQ (the
  // products of a tile are recomputed; each dQ element sums its key blocks in the same order as
  // above, so both schedules give identical results).
  ForEachItem<Scratch>(BH * nk, make_scratch, [&](Scratch& sc, int64_t item) {
    key_block(sc, item / nk, Zigzag(item % nk, nk), nullptr);
  });
  ForEachItem<Scratch>(BH * nq, make_scratch, [&](Scratch& sc, int64_t item) {
    const int64_t bh = item / nq, q0 = Zigzag(item % nq, nq) * kBlk;
    const int64_t qc = std::min(kBlk, L - q0), Mr = RoundUp(qc, 4);
    load_rows(sc.qb, sc.dob, bh, q0, qc);
    sc.dqb.assign(size_t(kBlk * Ep), 0.0f);
    const int64_t kend = s.causal ? std::min(S, q0 + qc) : S;
    for (int64_t k0 = 0; k0 < kend; k0 += kBlk) {
      const int64_t kc = std::min(kBlk, S - k0);
      TileGrad(sc.qb.data(), sc.dob.data(), kt.data() + bh * E * Sp, vt.data() + bh * Ev * Sp, Sp, lse + bh * L,
               fix_m.data() + bh * L, fix_inv.data() + bh * L, Dbuf.data() + bh * L, sc.sb.data(), sc.ds.data(), s, bh, q0, qc, Mr, k0, kc);
      Gemm(sc.dqb.data(), Ep, sc.ds.data(), kBlk, kp + (bh * S + k0) * Ep, Ep, Mr, Ep, kc, true);
    }
    for (int64_t i = 0; i < qc; ++i)
      for (int64_t c = 0; c < E; ++c) dq[(bh * L + q0 + i) * E + c] = sc.dqb[size_t(i * Ep + c)] * scale;
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace foundry::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace foundry::kernels {
HWY_EXPORT(AttentionForwardF32);
HWY_EXPORT(AttentionBackwardF32);

void attention_forward_f32(const float* q, const float* k, const float* v, float* out, float* lse, const AttnShape& s) {
  HWY_DYNAMIC_DISPATCH(AttentionForwardF32)(q, k, v, out, lse, s);
}
void attention_backward_f32(const float* q, const float* k, const float* v, const float* out, const float* lse,
                            const float* dout, float* dq, float* dk, float* dv, const AttnShape& s) {
  HWY_DYNAMIC_DISPATCH(AttentionBackwardF32)(q, k, v, out, lse, dout, dq, dk, dv, s);
}
}  // namespace foundry::kernels
#endif
