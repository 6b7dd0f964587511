// Linear algebra: GEMM backends against a naive reference, matmul broadcasting, einsum,
// tensordot, the LAPACK ops on known matrices, error messages, gradcheck for every
// differentiable op and gradgradcheck for the matmul family.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "foundry/autograd/autograd.h"
#include "foundry/core/parallel.h"
#include "foundry/ops/ops.h"
#include "foundry/ops/registry.h"
#include "../../src/core/parallel_testing.h"
#include "../../src/kernels/cpu/gemm.h"  // kernel-level tests (internal header)

namespace foundry {
namespace {

using autograd::gradcheck;
using autograd::gradgradcheck;
using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Deterministic uniform values (an LCG, so tests do not depend on the RNG ops).
Tensor rnd(IntList shape, DType dt = DType::Float64, double lo = -1.0, double hi = 1.0) {
  static uint64_t state = 0x9E3779B97F4A7C15ull;
  int64_t n = numel_of(shape);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    double u = double(state >> 11) / double(1ull << 53);
    x = lo + (hi - lo) * u;
    if (is_integral(dt)) x = std::floor(x * 3);
  }
  Tensor t = tensor(v, shape);
  return dt == DType::Float64 ? t : t.to(dt);
}

Tensor leaf(const Tensor& t) {
  Tensor c = t.to(DType::Float64).contiguous().clone().detach();
  c.requires_grad_(true);
  return c;
}

// Reference product in double: [M, K] x [K, N].
Tensor naive_mm(const Tensor& a, const Tensor& b) {
  auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  std::vector<double> c(static_cast<size_t>(M * N), 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) c[size_t(m * N + n)] += av[size_t(m * K + k)] * bv[size_t(k * N + n)];
  return tensor(c, {M, N});
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  EXPECT_EQ(av.size(), bv.size());
  double m = 0;
  for (size_t i = 0; i < std::min(av.size(), bv.size()); ++i) {
    if (std::isnan(av[i]) != std::isnan(bv[i])) return INFINITY;
    if (!std::isnan(av[i])) m = std::max(m, std::fabs(av[i] - bv[i]));
  }
  return m;
}

#define EXPECT_CLOSE(got, want, tol)                                                                   \
  do {                                                                                                 \
    Tensor g_ = (got), w_ = (want);                                                                    \
    ASSERT_EQ(shape_str(g_.sizes()), shape_str(w_.sizes()));                                           \
    EXPECT_LE(max_abs_diff(g_, w_), (tol)) << "got " << g_.str() << "\nwant " << w_.str();             \
  } while (0)

// Runs fn and expects a foundry::Error whose message contains every fragment.
template <typename F>
void expect_error(F&& fn, std::vector<std::string> fragments) {
  try {
    fn();
    ADD_FAILURE() << "expected an error containing '" << fragments[0] << "'";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "message: " << msg;
  }
}

struct PolicyGuard {
  kernels::GemmPolicy saved = kernels::gemm_policy();
  explicit PolicyGuard(kernels::GemmPolicy p) { kernels::set_gemm_policy(p); }
  ~PolicyGuard() { kernels::set_gemm_policy(saved); }
};

struct ThreadsGuard {
  int saved = get_num_threads();
  explicit ThreadsGuard(int n) { set_num_threads(n); }
  ~ThreadsGuard() { set_num_threads(saved); }
};

// ---- GEMM backends ------------------------------------------------------------------------------

struct MmCase {
  int64_t M, K, N;
  bool ta, tb;
};

// Every backend and layout against the double reference (float32 and float64).
TEST(Gemm, BackendsMatchReference) {
  const std::vector<MmCase> cases = {
      {1, 768, 96, false, false}, {1, 33, 17, false, true},  {37, 1, 5, false, false}, {64, 96, 1, true, false},
      {5, 7, 3, false, false},    {48, 64, 80, false, false}, {48, 64, 80, true, false}, {48, 64, 80, false, true},
      {48, 64, 80, true, true},   {1, 1, 1, false, false},    {130, 67, 129, false, true}, {3, 200, 2, true, true},
      {150, 100, 120, false, false}, {150, 100, 120, true, false}, {150, 100, 120, false, true},
      {150, 100, 120, true, true},   {4, 700, 900, false, false}};
  for (auto policy : {kernels::GemmPolicy::Auto, kernels::GemmPolicy::OpenBlas, kernels::GemmPolicy::Loop}) {
    PolicyGuard pg(policy);
    for (DType dt : {DType::Float32, DType::Float64}) {
      for (const auto& c : cases) {
        Tensor a = c.ta ? rnd({c.K, c.M}, dt).t() : rnd({c.M, c.K}, dt);
        Tensor b = c.tb ? rnd({c.N, c.K}, dt).t() : rnd({c.K, c.N}, dt);
        Tensor got = mm(a, b);
        EXPECT_EQ(got.dtype(), dt);
        double tol = (dt == DType::Float32 ? 2e-5 : 1e-12) * double(c.K);
        SCOPED_TRACE(fmt::format("policy {} {} {}x{}x{} ta={} tb={} backend {}", int(policy), dtype_name(dt), c.M, c.K,
                                 c.N, c.ta, c.tb,
                                 kernels::gemm_backend(a.reshape({1, c.M, c.K}), b.reshape({1, c.K, c.N}))));
        EXPECT_CLOSE(got, naive_mm(a, b), tol);
      }
    }
  }
}

TEST(Gemm, BackendNames) {
  Tensor big = rnd({128, 128}, DType::Float32).reshape({1, 128, 128});
  EXPECT_EQ(kernels::gemm_backend(big, big), "onednn");
  Tensor a = rnd({64, 64}, DType::Float32), v = rnd({1, 64}, DType::Float32);
  EXPECT_EQ(kernels::gemm_backend(a.reshape({1, 64, 64}), a.reshape({1, 64, 64})), "openblas");
  EXPECT_EQ(kernels::gemm_backend(v.reshape({1, 1, 64}), a.reshape({1, 64, 64})), "gemv");
  EXPECT_EQ(kernels::gemm_backend(a.to(DType::Float64).reshape({1, 64, 64}), a.to(DType::Float64).reshape({1, 64, 64})),
            "openblas");
  EXPECT_EQ(kernels::gemm_backend(a.to(DType::Int32).reshape({1, 64, 64}), a.to(DType::Int32).reshape({1, 64, 64})),
            "loop");
}

// The SIMD matrix-vector kernels against their scalar twins, with tails and alpha/beta/bias.
TEST(Gemm, GemvKernelsMatchScalarTwins) {
  for (int64_t R : {1, 3, 4, 5, 17, 64, 130}) {
    for (int64_t K : {1, 7, 16, 31, 32, 33, 100, 768}) {
      const int64_t lda = K + 3;
      std::vector<float> A = rnd({R, lda}, DType::Float32).to_vector<float>();
      std::vector<float> x = rnd({K}, DType::Float32).to_vector<float>();
      std::vector<float> bias = rnd({std::max(R, K)}, DType::Float32).to_vector<float>();
      std::vector<float> y0 = rnd({std::max(R, K) + 1100}, DType::Float32).to_vector<float>();
      for (float beta : {0.f, 0.5f}) {
        std::vector<float> y1 = y0, y2 = y0;
        kernels::gemv_rows_f32(A.data(), lda, R, K, x.data(), y1.data(), 1.5f, beta, bias.data());
        kernels::gemv_rows_f32_ref(A.data(), lda, R, K, x.data(), y2.data(), 1.5f, beta, bias.data());
        for (int64_t i = 0; i < R; ++i) EXPECT_NEAR(y1[size_t(i)], y2[size_t(i)], 1e-5 * double(K) + 1e-6);
        // cols form: A viewed as [R rows (k), K columns (n)]
        std::vector<float> xr = rnd({R}, DType::Float32).to_vector<float>();
        y1 = y0;
        y2 = y0;
        kernels::gemv_cols_f32(A.data(), lda, R, K, xr.data(), y1.data(), 1.5f, beta, beta != 0 ? bias.data() : nullptr);
        kernels::gemv_cols_f32_ref(A.data(), lda, R, K, xr.data(), y2.data(), 1.5f, beta,
                                   beta != 0 ? bias.data() : nullptr);
        for (int64_t i = 0; i < K; ++i) EXPECT_NEAR(y1[size_t(i)], y2[size_t(i)], 1e-5 * double(R) + 1e-6);
        EXPECT_EQ(y1[size_t(K)], y0[size_t(K)]);  // nothing written past the end
      }
    }
  }
  // A wide row (several column strips in the cols kernel).
  const int64_t K = 3, N = 2500;
  std::vector<float> A = rnd({K, N}, DType::Float32).to_vector<float>(), x = {0.5f, -1.f, 2.f};
  std::vector<float> y1(N), y2(N);
  kernels::gemv_cols_f32(A.data(), N, K, N, x.data(), y1.data(), 1.f, 0.f, nullptr);
  kernels::gemv_cols_f32_ref(A.data(), N, K, N, x.data(), y2.data(), 1.f, 0.f, nullptr);
  for (int64_t i = 0; i < N; ++i) EXPECT_NEAR(y1[size_t(i)], y2[size_t(i)], 1e-5);
}

TEST(Gemm, DtypesMatchReference) {
  Tensor a64 = rnd({9, 13}, DType::Float64, -2, 2), b64 = rnd({13, 11}, DType::Float64, -2, 2);
  // bfloat16/float16 inputs are rounded first; the product accumulates in float32.
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    Tensor a = a64.to(dt), b = b64.to(dt);
    Tensor got = mm(a, b);
    EXPECT_EQ(got.dtype(), dt);
    double tol = dt == DType::BFloat16 ? 0.15 : 0.02;
    EXPECT_CLOSE(got.to(DType::Float64), naive_mm(a, b), tol);
  }
  for (DType dt : {DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64}) {
    Tensor a = rnd({9, 13}, dt, 0, 2), b = rnd({13, 11}, dt, 0, 2);
    Tensor got = mm(a, b);
    EXPECT_EQ(got.dtype(), dt);
    EXPECT_CLOSE(got, naive_mm(a, b).to(dt), 0.0);
  }
  // Integer overflow wraps like the narrow type.
  Tensor big = full({1, 2}, 100, DType::Int8), col = full({2, 1}, 2, DType::Int8);
  EXPECT_EQ(mm(big, col).item<int64_t>(), int64_t(int8_t(400 & 0xff)));
}

TEST(Gemm, LargeShapesAndThreads) {
  // Big enough for oneDNN's blocking, with 1 and 2 threads giving the same answer.
  Tensor a = rnd({130, 300}, DType::Float32), b = rnd({300, 170}, DType::Float32);
  Tensor ref = naive_mm(a, b);
  Tensor r1, r2;
  {
    ThreadsGuard t(1);
    r1 = mm(a, b);
  }
  {
    ThreadsGuard t(2);
    r2 = mm(a, b);
  }
  EXPECT_CLOSE(r1, ref, 1e-3);
  EXPECT_CLOSE(r2, ref, 1e-3);
  // long dot products, contiguous and strided
  Tensor d1 = rnd({10001}, DType::Float32), d2 = rnd({20002}, DType::Float32).slice(0, 0, None, 2);
  EXPECT_CLOSE(dot(d1, d2), naive_mm(d1.reshape({1, 10001}), d2.reshape({10001, 1})).reshape({}), 1e-2);
  // gemv across threads
  Tensor v = rnd({1, 3000}, DType::Float32), w = rnd({3000, 257}, DType::Float32);
  {
    ThreadsGuard t(2);
    EXPECT_CLOSE(mm(v, w), naive_mm(v, w), 1e-3);
    EXPECT_CLOSE(mm(w.t(), v.t()), naive_mm(w.t(), v.t()), 1e-3);
  }
}

// Wide row-major products run in column chunks through oneDNN; bias, alpha, beta and batches
// must land in the right columns.
TEST(Gemm, WideProductsInColumnChunks) {
  Tensor a = rnd({40, 32}, DType::Float32), b = rnd({32, 1700}, DType::Float32), bias = rnd({1700}, DType::Float32);
  ASSERT_EQ(kernels::gemm_backend(a.reshape({1, 40, 32}), b.reshape({1, 32, 1700})), "onednn");
  Tensor P = naive_mm(a, b);
  EXPECT_CLOSE(mm(a, b), P, 1e-4);
  EXPECT_CLOSE(addmm(bias, a, b), P + bias.to(DType::Float64), 1e-4);
  Tensor c = rnd({40, 1700}, DType::Float32);
  EXPECT_CLOSE(addmm(c, a, b, 0.5, 2), c.to(DType::Float64) * Scalar(0.5) + P * Scalar(2.0), 1e-4);
  Tensor ba = rnd({2, 40, 32}, DType::Float32), bb = rnd({2, 32, 3100}, DType::Float32);
  Tensor got = bmm(ba, bb);
  for (int64_t i = 0; i < 2; ++i) EXPECT_CLOSE(got.select(0, i), naive_mm(ba.select(0, i), bb.select(0, i)), 1e-4);
  // one matrix broadcast against a batch of wide ones
  Tensor got2 = matmul(a, bb);
  for (int64_t i = 0; i < 2; ++i) EXPECT_CLOSE(got2.select(0, i), naive_mm(a, bb.select(0, i)), 1e-4);
}

// With several threads oneDNN products are cut into one block per thread (columns, or rows
// when there are few columns); batches, bias and beta must land in the right place either way.
TEST(Gemm, PerThreadBlocks) {
  Tensor in = rnd({3, 1, 100}, DType::Float32), b1 = rnd({3, 100, 200}, DType::Float32),
         b2 = rnd({3, 200, 100}, DType::Float32), bias = rnd({100}, DType::Float32);
  Tensor wide = rnd({3, 200, 700}, DType::Float32);
  for (int threads : {1, 2, 3}) {
    ThreadsGuard tg(threads);
    Tensor got = baddbmm(in, b1, b2, 0.5, 2);
    Tensor got_bias = baddbmm(bias, b1, b2);
    Tensor got_wide = bmm(b1, wide);
    for (int64_t i = 0; i < 3; ++i) {
      Tensor P = naive_mm(b1.select(0, i), b2.select(0, i));
      EXPECT_CLOSE(got.select(0, i), in.select(0, i).to(DType::Float64) * Scalar(0.5) + P * Scalar(2.0), 1e-3);
      EXPECT_CLOSE(got_bias.select(0, i), P + bias.to(DType::Float64), 1e-3);
      EXPECT_CLOSE(got_wide.select(0, i), naive_mm(b1.select(0, i), wide.select(0, i)), 1e-3);
    }
  }
}

// A Linear's product (B stored as [N, K]) cut into per-thread column blocks gives the bits of the
// whole product: each block is computed into a dense buffer (a strided one picked another kernel,
// with other last bits). So the cut may follow the pool's load, and results do not depend on the
// thread count. Bias, beta and batches must still land in their columns.
TEST(Gemm, ColumnBlocksKeepTheWholeProductsBits) {
  struct Case {
    int64_t M, K, N;
  };
  for (Case c : {Case{128, 768, 768}, Case{64, 300, 520}, Case{7, 768, 2048}, Case{33, 130, 4000}}) {
    Tensor x = rnd({c.M, c.K}, DType::Float32), w = rnd({c.N, c.K}, DType::Float32);
    Tensor bias = rnd({c.N}, DType::Float32), acc = rnd({c.M, c.N}, DType::Float32);
    Tensor one, one_bias, one_acc;
    {
      ThreadsGuard tg(1);
      one = linear(x, w);
      one_bias = linear(x, w, bias);
      one_acc = addmm(acc, x, w.t(), 0.5, 2);
    }
    EXPECT_CLOSE(one, naive_mm(x, w.t()), 1e-3);
    EXPECT_CLOSE(one_acc, acc.to(DType::Float64) * Scalar(0.5) + naive_mm(x, w.t()) * Scalar(2.0), 2e-3);
    for (int threads : {2, 3}) {
      ThreadsGuard tg(threads);
      std::string at = std::to_string(c.M) + "x" + std::to_string(c.K) + "x" + std::to_string(c.N) + ", " +
                       std::to_string(threads) + " threads";
      EXPECT_TRUE(equal(linear(x, w), one)) << at;
      EXPECT_TRUE(equal(linear(x, w, bias), one_bias)) << at;
      EXPECT_TRUE(equal(addmm(acc, x, w.t(), 0.5, 2), one_acc)) << at;
    }
  }
  Tensor xs = rnd({3, 40, 96}, DType::Float32), ws = rnd({3, 600, 96}, DType::Float32);
  Tensor batched;
  {
    ThreadsGuard tg(1);
    batched = bmm(xs, ws.transpose(1, 2));
  }
  for (int64_t i = 0; i < 3; ++i) EXPECT_CLOSE(batched.select(0, i), naive_mm(xs.select(0, i), ws.select(0, i).t()), 1e-3);
  // bfloat16 operands (the quantized formats' prefill dequantizes to bf16 for oneDNN)
  Tensor xh = rnd({128, 768}, DType::Float32).to(DType::BFloat16), wh = rnd({2048, 768}, DType::Float32).to(DType::BFloat16);
  Tensor half_one;
  {
    ThreadsGuard tg(1);
    half_one = linear(xh, wh);
  }
  ThreadsGuard tg(2);
  EXPECT_TRUE(equal(bmm(xs, ws.transpose(1, 2)), batched));
  EXPECT_TRUE(equal(linear(xh, wh), half_one));
}

// While the pool runs alone (other programs on the cores), a GEMM whose column blocks keep the
// bits runs as one block; every product must give the same bits as with the threads: column
// blocks (staged), row blocks (other bits as one block: they stay cut), wide strided blocks of a
// training step, a row-major B.
TEST(Gemm, ProductsKeepTheirBitsWhenThePoolRunsAlone) {
  ThreadsGuard tg(2);
  struct Case {
    int64_t M, K, N;
    bool weight;  // B stored [N, K] (a Linear's weight) or [K, N]
  };
  for (Case c : {Case{128, 768, 768, true}, Case{128, 768, 200, true}, Case{1024, 128, 384, true},
                 Case{128, 768, 768, false}, Case{7, 768, 2048, true}}) {
    Tensor x = rnd({c.M, c.K}, DType::Float32);
    Tensor b = c.weight ? rnd({c.N, c.K}, DType::Float32).t() : rnd({c.K, c.N}, DType::Float32);
    Tensor threaded = mm(x, b), alone;
    testing::force_pool_alone(true);
    alone = mm(x, b);
    testing::force_pool_alone(false);
    EXPECT_TRUE(equal(threaded, alone)) << c.M << "x" << c.K << "x" << c.N << (c.weight ? " weight" : "");
  }
}

// One bf16 row times a row-major bf16 matrix (a GPT-2 Conv1D weight in a bf16 checkpoint) runs
// the columns gemv: against the double product of the same bf16 values, with and without bias.
TEST(Gemm, BF16RowTimesRowMajorMatrix) {
  Tensor x = rnd({1, 300}, DType::Float32).to(DType::BFloat16), w = rnd({300, 520}, DType::Float32).to(DType::BFloat16);
  Tensor bias = rnd({520}, DType::Float32).to(DType::BFloat16);
  Tensor want = naive_mm(x, w);
  for (int threads : {1, 2}) {
    ThreadsGuard tg(threads);
    // the output rounded to bf16 once: half an ulp is 0.0625 for values in [16, 32)
    EXPECT_CLOSE(mm(x, w).to(DType::Float64), want, 0.07);
    EXPECT_CLOSE(addmm(bias, x, w).to(DType::Float64), want + bias.to(DType::Float64), 0.07);
  }
}

// A product whose shape was first run whole on two threads, then as a per-thread row block of
// the same shape: oneDNN's own primitive cache must not hand the block the two-thread kernel
// (it crashed when sampling a GPT after training).
TEST(Gemm, BlockShapeSeenBeforeOnAllThreads) {
  ThreadsGuard tg(2);
  Tensor w = rnd({512, 128}, DType::Float32);
  for (int64_t rows : {32, 64}) {
    Tensor a = rnd({rows, 512}, DType::Float32);
    EXPECT_CLOSE(matmul(a, w), naive_mm(a, w), 1e-3);
  }
}

TEST(Gemm, EmptyAndZeroInner) {
  Tensor a = rnd({3, 0}, DType::Float32), b = rnd({0, 4}, DType::Float32);
  Tensor c = mm(a, b);
  EXPECT_EQ(shape_str(c.sizes()), "[3, 4]");
  EXPECT_EQ(sum(abs(c)).item<double>(), 0.0);
  EXPECT_EQ(shape_str(mm(rnd({0, 3}), rnd({3, 5})).sizes()), "[0, 5]");
  EXPECT_EQ(dot(rnd({0}), rnd({0})).item<double>(), 0.0);
  Tensor bias = rnd({4}, DType::Float32);
  EXPECT_CLOSE(addmm(bias, a, b), bias.expand({3, 4}), 0.0);
}

// ---- matmul semantics ---------------------------------------------------------------------------

// matmul against per-batch mm of explicitly broadcast operands.
Tensor reference_matmul(const Tensor& a, const Tensor& b) {
  Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a, b2 = b.dim() == 1 ? b.unsqueeze(-1) : b;
  Shape ba(a2.sizes()), bb(b2.sizes());
  ba.pop_back();
  ba.pop_back();
  bb.pop_back();
  bb.pop_back();
  Shape batch = broadcast_shapes(ba, bb);
  Shape ea = batch, eb = batch;
  ea.push_back(a2.size(-2));
  ea.push_back(a2.size(-1));
  eb.push_back(b2.size(-2));
  eb.push_back(b2.size(-1));
  int64_t nb = numel_of(batch);
  Tensor A = a2.expand(ea).contiguous().reshape({nb, a2.size(-2), a2.size(-1)});
  Tensor B = b2.expand(eb).contiguous().reshape({nb, b2.size(-2), b2.size(-1)});
  std::vector<Tensor> outs;
  std::vector<double> all;
  for (int64_t i = 0; i < A.size(0); ++i) {
    auto v = naive_mm(A.select(0, i), B.select(0, i)).to_vector<double>();
    all.insert(all.end(), v.begin(), v.end());
  }
  Shape out = batch;
  if (a.dim() > 1) out.push_back(a2.size(-2));
  if (b.dim() > 1) out.push_back(b2.size(-1));
  return tensor(all, out);
}

TEST(Matmul, ShapesAndBroadcasting) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{4}, {4}},          {{3, 4}, {4}},          {{4}, {4, 3}},          {{3, 4}, {4, 5}},
      {{2, 3, 4}, {4, 5}}, {{2, 3, 4}, {4}},       {{4}, {2, 4, 3}},       {{3, 4}, {2, 4, 5}},
      {{2, 1, 3, 4}, {3, 4, 2}}, {{5, 3, 4}, {1, 4, 2}}, {{1, 2, 3, 4}, {2, 1, 4, 5}}, {{2, 3, 0}, {0, 4}},
      {{0, 3, 4}, {4, 2}}, {{2, 70, 80}, {80, 90}}, {{3, 70, 80}, {3, 80, 1}}, {{70, 80}, {4, 80, 60}}};
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (const auto& [sa, sb] : cases) {
      Tensor a = rnd(sa, dt), b = rnd(sb, dt);
      SCOPED_TRACE(shape_str(sa) + " @ " + shape_str(sb));
      EXPECT_CLOSE(matmul(a, b), reference_matmul(a, b), 1e-4);
    }
  }
  // Non-contiguous batched operands (transposed batch and matrix dims) go through bmm without
  // copies; the result must not change.
  Tensor x = rnd({3, 2, 40, 50}, DType::Float32);
  Tensor a = x.permute({1, 0, 3, 2});  // [2, 3, 50, 40]
  Tensor b = rnd({40, 30}, DType::Float32);
  EXPECT_CLOSE(matmul(a, b), reference_matmul(a.contiguous(), b), 1e-4);
  Tensor c = rnd({2, 30, 50}, DType::Float32).transpose(1, 2);  // [2, 50, 30] with a transposed matrix
  EXPECT_CLOSE(matmul(c, b.t()), reference_matmul(c.contiguous(), b.t().contiguous()), 1e-4);
  // stride-0 (expanded) operand
  Tensor e = rnd({1, 40}, DType::Float32).expand({20, 40});
  EXPECT_CLOSE(matmul(e, b), naive_mm(e.contiguous(), b), 1e-4);
}

TEST(Matmul, Errors) {
  expect_error([] { mm(rnd({3, 4}), rnd({5, 6})); }, {"mm", "3x4", "5x6"});
  expect_error([] { mm(rnd({3}), rnd({3, 6})); }, {"mm", "matrix"});
  expect_error([] { mm(rnd({3, 4}), rnd({4, 2}, DType::Float32)); }, {"mm", "float64", "float32"});
  expect_error([] { mm(rnd({3, 4}).to(DType::Bool), rnd({4, 2}).to(DType::Bool)); }, {"mm", "bool"});
  expect_error([] { bmm(rnd({2, 3, 4}), rnd({3, 4, 2})); }, {"bmm"});
  expect_error([] { mv(rnd({3, 4}), rnd({5})); }, {"mv"});
  expect_error([] { dot(rnd({3}), rnd({4})); }, {"dot"});
  expect_error([] { matmul(rnd({2, 3, 4}), rnd({2, 5, 6})); }, {"matmul"});
  expect_error([] { matmul(rnd({3, 4}), rnd({5})); }, {"mv"});
  expect_error([] { matmul(rnd({}), rnd({5})); }, {"matmul", "1D"});
  expect_error([] { linear(rnd({3, 4}), rnd({5, 6})); }, {"linear", "[5, 6]"});
  expect_error([] { addmm(rnd({4, 4}), rnd({3, 4}), rnd({4, 5})); }, {"addmm"});
  expect_error([] { outer(rnd({2, 2}), rnd({3})); }, {"outer"});
}

TEST(Matmul, AddmmBaddbmmLinear) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor in = rnd({3, 5}, dt), m1 = rnd({3, 4}, dt), m2 = rnd({4, 5}, dt);
    Tensor prod = naive_mm(m1, m2);
    EXPECT_CLOSE(addmm(in, m1, m2), in.to(DType::Float64) + prod, 1e-5);
    EXPECT_CLOSE(addmm(in, m1, m2, 0.5, -2.0), in.to(DType::Float64) * Scalar(0.5) - prod * Scalar(2.0), 1e-5);
    Tensor bias = rnd({5}, dt);
    EXPECT_CLOSE(addmm(bias, m1, m2), prod + bias.to(DType::Float64), 1e-5);
    EXPECT_CLOSE(addmm(bias, m1, m2, 1, 3), prod * Scalar(3.0) + bias.to(DType::Float64), 1e-5);
    // beta = 0 ignores the input, NaNs included
    Tensor nan_in = full({3, 5}, NAN, dt);
    EXPECT_CLOSE(addmm(nan_in, m1, m2, 0, 1), prod, 1e-5);
    // big enough for oneDNN with alpha/beta and with a fused bias
    Tensor A = rnd({40, 50}, dt), B = rnd({50, 60}, dt), C = rnd({40, 60}, dt), bb = rnd({60}, dt);
    Tensor P = naive_mm(A, B);
    EXPECT_CLOSE(addmm(C, A, B, 0.25, 2), C.to(DType::Float64) * Scalar(0.25) + P * Scalar(2.0), 1e-4);
    EXPECT_CLOSE(addmm(bb, A, B), P + bb.to(DType::Float64), 1e-4);
    EXPECT_CLOSE(addmm(bb, A.t().contiguous().t(), B), P + bb.to(DType::Float64), 1e-4);

    Tensor bi = rnd({2, 1, 5}, dt), b1 = rnd({2, 3, 4}, dt), b2 = rnd({2, 4, 5}, dt);
    Tensor bp = bmm(b1, b2);
    EXPECT_CLOSE(baddbmm(bi, b1, b2, 2, 0.5), bi * Scalar(2) + bp * Scalar(0.5), 1e-5);

    Tensor x = rnd({2, 3, 4}, dt), w = rnd({6, 4}, dt), wb = rnd({6}, dt);
    Tensor want = matmul(x, w.t()) + wb;
    EXPECT_CLOSE(linear(x, w, wb), want, 1e-5);
    EXPECT_CLOSE(linear(x, w), matmul(x, w.t()), 1e-5);
    Tensor x1 = rnd({4}, dt);
    EXPECT_CLOSE(linear(x1, w, wb), mv(w, x1) + wb, 1e-5);
  }
  // integer addmm with integer alpha/beta, and float alpha rejected
  Tensor i1 = rnd({2, 3}, DType::Int64, 0, 2), i2 = rnd({3, 2}, DType::Int64, 0, 2), ii = rnd({2, 2}, DType::Int64, 0, 2);
  EXPECT_CLOSE(addmm(ii, i1, i2, 2, 3), (ii * Scalar(2) + naive_mm(i1, i2).to(DType::Int64) * Scalar(3)), 0.0);
  expect_error([&] { addmm(ii, i1, i2, 0.5, 1); }, {"addmm", "integral"});
}

// ---- einsum and tensordot -----------------------------------------------------------------------

TEST(Einsum, AgainstExplicitForms) {
  Tensor a = rnd({3, 4}), b = rnd({4, 5}), c = rnd({2, 3, 4}), d = rnd({2, 4, 5}), sq = rnd({4, 4});
  Tensor v = rnd({4}), w = rnd({4});
  EXPECT_CLOSE(einsum("ij,jk->ik", {a, b}), naive_mm(a, b), 1e-12);
  EXPECT_CLOSE(einsum("ij,jk", {a, b}), naive_mm(a, b), 1e-12);
  EXPECT_CLOSE(einsum("ij , jk -> ki", {a, b}), naive_mm(a, b).t(), 1e-12);
  EXPECT_CLOSE(einsum("bij,bjk->bik", {c, d}), bmm(c, d), 1e-12);
  EXPECT_CLOSE(einsum("...ij,...jk->...ik", {c, d}), bmm(c, d), 1e-12);
  EXPECT_CLOSE(einsum("...ij,jk", {c, b}), matmul(c, b), 1e-12);
  EXPECT_CLOSE(einsum("ii->i", {sq}), diagonal(sq), 0);
  EXPECT_CLOSE(einsum("ii", {sq}), sum(diagonal(sq)), 1e-12);
  EXPECT_CLOSE(einsum("i,i->", {v, w}), dot(v, w), 1e-12);
  EXPECT_CLOSE(einsum("i,j->ij", {v, w}), outer(v, w), 1e-12);
  EXPECT_CLOSE(einsum("ijk->kji", {c}), c.permute({2, 1, 0}), 0);
  EXPECT_CLOSE(einsum("ijk->", {c}), sum(c), 1e-12);
  EXPECT_CLOSE(einsum("ijk->j", {c}), sum(c, {0, 2}), 1e-12);
  EXPECT_CLOSE(einsum("ba", {a}), a.t(), 0);  // implicit output is sorted: "ab"
  EXPECT_CLOSE(einsum("Ab,bA->", {a, a.t()}), sum(a * a), 1e-12);
  // bilinear: out[b, a] = sum_nm x[b,n] W[a,n,m] y[b,m]
  Tensor x = rnd({2, 3}), W = rnd({4, 3, 5}), y = rnd({2, 5});
  Tensor want = sum(x.unsqueeze(1).unsqueeze(-1) * W.unsqueeze(0) * y.unsqueeze(1).unsqueeze(1), {2, 3});
  EXPECT_CLOSE(einsum("bn,anm,bm->ba", {x, W, y}), want, 1e-12);
  // partial trace and broadcasting ellipsis
  Tensor t = rnd({3, 3, 2});
  EXPECT_CLOSE(einsum("iij->j", {t}), sum(diagonal(t, 0, 0, 1), {1}), 1e-12);
  Tensor e1 = rnd({2, 1, 3, 4}), e2 = rnd({5, 4, 2});
  EXPECT_CLOSE(einsum("...ij,...jk->...ik", {e1, e2}), matmul(e1, e2), 1e-12);
  // four operands, chain
  Tensor p = rnd({2, 3}), q = rnd({3, 4}), r = rnd({4, 5}), s = rnd({5, 2});
  EXPECT_CLOSE(einsum("ab,bc,cd,da->", {p, q, r, s}), sum(diagonal(matmul(matmul(matmul(p, q), r), s))), 1e-12);
}

TEST(Einsum, Errors) {
  expect_error([] { einsum("ij,jk->ik", {rnd({2, 3})}); }, {"einsum"});
  expect_error([] { einsum("ij->ik", {rnd({2, 3})}); }, {"einsum", "k"});
  expect_error([] { einsum("ijk", {rnd({2, 3})}); }, {"einsum", "operand 0"});
  expect_error([] { einsum("ij,jk", {rnd({2, 3}), rnd({4, 5})}); }, {"einsum"});
  expect_error([] { einsum("i1", {rnd({2, 3})}); }, {"einsum", "subscript"});
  expect_error([] { einsum("ii", {rnd({2, 3})}); }, {"einsum", "repeated"});
  expect_error([] { einsum("i->ii", {rnd({2})}); }, {"einsum", "more than once"});
}

TEST(Tensordot, Cases) {
  Tensor a = rnd({2, 3, 4}), b = rnd({4, 3, 5});
  EXPECT_CLOSE(tensordot(a, b, {1, 2}, {1, 0}), einsum("ijk,kjl->il", {a, b}), 1e-12);
  Tensor m1 = rnd({3, 4}), m2 = rnd({4, 5});
  EXPECT_CLOSE(tensordot(m1, m2, {1}, {0}), mm(m1, m2), 1e-12);
  Tensor v = rnd({3}), w = rnd({2});
  EXPECT_CLOSE(tensordot(v, w, {}, {}), outer(v, w), 1e-12);
  expect_error([&] { tensordot(a, b, {0}, {0}); }, {"tensordot", "size"});
  expect_error([&] { tensordot(a, b, {0, 1}, {0}); }, {"tensordot", "same length"});
}

// ---- LAPACK ops ---------------------------------------------------------------------------------

Tensor well_conditioned(IntList shape, DType dt = DType::Float64) {
  int64_t n = shape.back();
  return (rnd(shape) + eye(n, std::nullopt, DType::Float64) * Scalar(double(n))).to(dt);
}

Tensor spd(IntList shape, DType dt = DType::Float64) {
  Tensor r = rnd(shape);
  int64_t n = shape.back();
  return (matmul(r, r.transpose(-2, -1)) + eye(n, std::nullopt, DType::Float64)).to(dt);
}

TEST(Lapack, KnownMatrices) {
  Tensor A = tensor(std::vector<double>{1, 2, 3, 4}, {2, 2});
  EXPECT_CLOSE(linalg_det(A), tensor(std::vector<double>{-2}, {1}).reshape({}), 1e-12);
  EXPECT_CLOSE(linalg_inv(A), tensor(std::vector<double>{-2, 1, 1.5, -0.5}, {2, 2}), 1e-12);
  auto [s, l] = linalg_slogdet(A);
  EXPECT_EQ(s.item<double>(), -1.0);
  EXPECT_NEAR(l.item<double>(), std::log(2.0), 1e-12);
  Tensor P = tensor(std::vector<double>{4, 2, 2, 3}, {2, 2});
  EXPECT_CLOSE(linalg_cholesky(P), tensor(std::vector<double>{2, 0, 1, std::sqrt(2.0)}, {2, 2}), 1e-12);
  EXPECT_CLOSE(linalg_cholesky(P, true), tensor(std::vector<double>{2, 1, 0, std::sqrt(2.0)}, {2, 2}), 1e-12);
  EXPECT_CLOSE(linalg_solve(A, tensor(std::vector<double>{5, 11}, {2})), tensor(std::vector<double>{1, 2}, {2}), 1e-12);
  // singular: det 0, slogdet (0, -inf)
  Tensor S = tensor(std::vector<double>{1, 2, 2, 4}, {2, 2});
  EXPECT_EQ(linalg_det(S).item<double>(), 0.0);
  auto [s2, l2] = linalg_slogdet(S);
  EXPECT_EQ(s2.item<double>(), 0.0);
  EXPECT_TRUE(std::isinf(l2.item<double>()) && l2.item<double>() < 0);
  // empty matrices
  EXPECT_EQ(linalg_det(zeros({0, 0}, DType::Float64)).item<double>(), 1.0);
  EXPECT_EQ(shape_str(linalg_inv(zeros({2, 0, 0}, DType::Float64)).sizes()), "[2, 0, 0]");
}

TEST(Lapack, RandomBatches) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    double tol = dt == DType::Float32 ? 1e-4 : 1e-10;
    Tensor A = well_conditioned({3, 5, 5}, dt);
    Tensor I = eye(5, std::nullopt, dt).expand({3, 5, 5});
    EXPECT_CLOSE(matmul(A, linalg_inv(A)), I, tol);
    EXPECT_CLOSE(matmul(linalg_inv(A.transpose(1, 2)), A.transpose(1, 2)), I, tol);
    Tensor B = rnd({3, 5, 2}, dt);
    EXPECT_CLOSE(matmul(A, linalg_solve(A, B)), B, tol);
    Tensor bv = rnd({3, 5}, dt);
    Tensor xv = linalg_solve(A, bv);
    EXPECT_EQ(shape_str(xv.sizes()), "[3, 5]");
    EXPECT_CLOSE(matmul(A, xv.unsqueeze(-1)).squeeze(-1), bv, tol);
    // broadcasting A over B's batch and B over A's batch
    Tensor B2 = rnd({4, 1, 5, 3}, dt);
    EXPECT_CLOSE(matmul(A, linalg_solve(A, B2)), B2.expand({4, 3, 5, 3}), tol);
    Tensor b1 = rnd({5}, dt);
    Tensor x1 = linalg_solve(A, b1);  // one vector against a batch of matrices
    EXPECT_EQ(shape_str(x1.sizes()), "[3, 5]");
    EXPECT_CLOSE(matmul(A, x1.unsqueeze(-1)).squeeze(-1), b1.expand({3, 5}), tol);
    // det = product of eigen... use det(AB) = det(A) det(B) and slogdet consistency
    Tensor C = well_conditioned({3, 5, 5}, dt);
    EXPECT_CLOSE(linalg_det(matmul(A, C)), linalg_det(A) * linalg_det(C), tol * 1e3 * 1e2);
    auto [sg, la] = linalg_slogdet(A);
    EXPECT_CLOSE(sg * exp(la), linalg_det(A), tol * 1e5);
    // cholesky
    Tensor P = spd({2, 6, 6}, dt);
    Tensor L = linalg_cholesky(P);
    EXPECT_CLOSE(matmul(L, L.transpose(-2, -1)), P, tol * 10);
    EXPECT_CLOSE(L, tril(L), 0);
    EXPECT_CLOSE(linalg_cholesky(P, true), L.transpose(-2, -1), 0);
    // QR in every mode
    for (auto shape : {Shape{6, 4}, Shape{4, 4}, Shape{3, 5}, Shape{2, 5, 3}}) {
      Tensor X = rnd(shape, dt);
      int64_t m = shape[shape.size() - 2], n = shape.back(), k = std::min(m, n);
      auto [Q, R] = linalg_qr(X);
      EXPECT_EQ(Q.size(-1), k);
      EXPECT_EQ(R.size(-2), k);
      EXPECT_CLOSE(matmul(Q, R), X, tol * 10);
      Tensor QtQ = matmul(Q.transpose(-2, -1), Q);
      EXPECT_CLOSE(QtQ, eye(k, std::nullopt, dt).expand(QtQ.sizes()), tol * 10);
      EXPECT_CLOSE(R, triu(R), 0);
      auto [Qc, Rc] = linalg_qr(X, "complete");
      EXPECT_EQ(Qc.size(-1), m);
      EXPECT_EQ(Rc.size(-2), m);
      EXPECT_CLOSE(matmul(Qc, Rc), X, tol * 10);
      EXPECT_CLOSE(matmul(Qc.transpose(-2, -1), Qc), eye(m, std::nullopt, dt).expand(Qc.sizes()), tol * 10);
      auto [Qr, Rr] = linalg_qr(X, "r");
      EXPECT_EQ(Qr.numel(), 0);
      EXPECT_CLOSE(Rr, R, 0);
    }
  }
}

TEST(Lapack, Errors) {
  Tensor S = tensor(std::vector<double>{1, 2, 2, 4}, {2, 2});
  expect_error([&] { linalg_inv(S); }, {"linalg_inv", "singular"});
  expect_error([&] { linalg_inv(stack({eye(2, std::nullopt, DType::Float64), S})); }, {"linalg_inv", "Batch element 1", "singular"});
  expect_error([&] { linalg_solve(S, rnd({2})); }, {"linalg_solve", "singular"});
  expect_error([&] { linalg_cholesky(-eye(3, std::nullopt, DType::Float64)); }, {"linalg_cholesky", "positive-definite", "order 1"});
  expect_error([&] { linalg_cholesky(S); }, {"linalg_cholesky", "order 2"});
  expect_error([&] { linalg_inv(rnd({2, 3})); }, {"linalg_inv", "square"});
  expect_error([&] { linalg_inv(rnd({3})); }, {"linalg_inv", "2 dimensions"});
  expect_error([&] { linalg_inv(eye(3, std::nullopt, DType::Int64)); }, {"linalg_inv", "int64"});
  expect_error([&] { linalg_solve(eye(3, std::nullopt, DType::Float64), rnd({4})); }, {"linalg_solve"});
  expect_error([&] { linalg_solve(eye(3, std::nullopt, DType::Float64), rnd({3}, DType::Float32)); }, {"linalg_solve", "dtype"});
  expect_error([&] { linalg_qr(rnd({3, 3}), "full"); }, {"linalg_qr", "mode"});
  expect_error([&] { linalg_det(rnd({2, 3})); }, {"linalg_det", "square"});
  // gradient at a singular matrix: a clear error, not a crash
  Tensor Sl = leaf(S);
  expect_error([&] { linalg_det(Sl).backward(); }, {"linalg_det", "singular"});
  Tensor Xl = leaf(rnd({3, 3}));
  expect_error([&] { std::get<1>(linalg_qr(Xl, "r")).sum().backward(); }, {"linalg_qr", "mode='r'"});
}

// ---- gradients ----------------------------------------------------------------------------------

void check_grads(const Fn& fn, const std::vector<Tensor>& inputs, bool second_order) {
  EXPECT_TRUE(gradcheck(fn, inputs));
  if (second_order) EXPECT_TRUE(gradgradcheck(fn, inputs));
}

TEST(LinalgGrad, MatmulFamily) {
  auto f2 = [](auto op) { return Fn([op](const std::vector<Tensor>& x) { return std::vector<Tensor>{op(x[0], x[1])}; }); };
  check_grads(f2([](const Tensor& a, const Tensor& b) { return mm(a, b); }), {leaf(rnd({3, 4})), leaf(rnd({4, 2}))}, true);
  check_grads(f2([](const Tensor& a, const Tensor& b) { return mm(a, b.t()); }), {leaf(rnd({1, 4})), leaf(rnd({3, 4}))},
              true);
  check_grads(f2([](const Tensor& a, const Tensor& b) { return bmm(a, b); }), {leaf(rnd({2, 3, 4})), leaf(rnd({2, 4, 2}))},
              true);
  check_grads(f2([](const Tensor& a, const Tensor& b) { return mv(a, b); }), {leaf(rnd({3, 4})), leaf(rnd({4}))}, true);
  check_grads(f2([](const Tensor& a, const Tensor& b) { return dot(a, b); }), {leaf(rnd({5})), leaf(rnd({5}))}, true);
  check_grads(f2([](const Tensor& a, const Tensor& b) { return outer(a, b); }), {leaf(rnd({3})), leaf(rnd({4}))}, true);
  const std::vector<std::pair<Shape, Shape>> mcases = {{{4}, {4}},       {{3, 4}, {4}},       {{4}, {4, 3}},
                                                       {{2, 3, 4}, {4, 2}}, {{2, 1, 3, 4}, {3, 4, 2}}, {{3, 4}, {2, 4, 2}},
                                                       {{4}, {2, 4, 3}}};
  for (const auto& [sa, sb] : mcases) {
    SCOPED_TRACE(shape_str(sa) + " @ " + shape_str(sb));
    check_grads(f2([](const Tensor& a, const Tensor& b) { return matmul(a, b); }), {leaf(rnd(sa)), leaf(rnd(sb))}, true);
  }
  Fn addmm_fn = [](const std::vector<Tensor>& x) { return std::vector<Tensor>{addmm(x[0], x[1], x[2], 0.5, -1.5)}; };
  check_grads(addmm_fn, {leaf(rnd({3, 1})), leaf(rnd({3, 4})), leaf(rnd({4, 2}))}, true);
  Fn addmm_bias = [](const std::vector<Tensor>& x) { return std::vector<Tensor>{addmm(x[0], x[1], x[2])}; };
  check_grads(addmm_bias, {leaf(rnd({2})), leaf(rnd({3, 4})), leaf(rnd({4, 2}))}, true);
  Fn baddbmm_fn = [](const std::vector<Tensor>& x) { return std::vector<Tensor>{baddbmm(x[0], x[1], x[2], 2, 0.5)}; };
  check_grads(baddbmm_fn, {leaf(rnd({1, 3, 2})), leaf(rnd({2, 3, 4})), leaf(rnd({2, 4, 2}))}, true);
  Fn linear_fn = [](const std::vector<Tensor>& x) { return std::vector<Tensor>{linear(x[0], x[1], x[2])}; };
  check_grads(linear_fn, {leaf(rnd({2, 3, 4})), leaf(rnd({5, 4})), leaf(rnd({5}))}, true);
  check_grads(linear_fn, {leaf(rnd({4})), leaf(rnd({5, 4})), leaf(rnd({5}))}, true);
  Fn linear_nb = [](const std::vector<Tensor>& x) { return std::vector<Tensor>{linear(x[0], x[1])}; };
  check_grads(linear_nb, {leaf(rnd({3, 4})), leaf(rnd({2, 4}))}, true);
  Fn td = [](const std::vector<Tensor>& x) { return std::vector<Tensor>{tensordot(x[0], x[1], {1, 2}, {1, 0})}; };
  check_grads(td, {leaf(rnd({2, 3, 4})), leaf(rnd({4, 3, 2}))}, true);
  for (std::string eq : {"ij,jk->ik", "bij,bjk->bik", "ii->i", "ii", "i,j->ij", "bn,anm,bm->ba", "...ij,...jk", "iij->j"}) {
    SCOPED_TRACE(eq);
    std::vector<Tensor> ins;
    if (eq == "ij,jk->ik") ins = {leaf(rnd({3, 4})), leaf(rnd({4, 2}))};
    if (eq == "bij,bjk->bik") ins = {leaf(rnd({2, 3, 4})), leaf(rnd({2, 4, 2}))};
    if (eq == "ii->i" || eq == "ii") ins = {leaf(rnd({3, 3}))};
    if (eq == "i,j->ij") ins = {leaf(rnd({3})), leaf(rnd({2}))};
    if (eq == "bn,anm,bm->ba") ins = {leaf(rnd({2, 3})), leaf(rnd({2, 3, 2})), leaf(rnd({2, 2}))};
    if (eq == "...ij,...jk") ins = {leaf(rnd({2, 1, 2, 3})), leaf(rnd({3, 3, 2}))};
    if (eq == "iij->j") ins = {leaf(rnd({2, 2, 3}))};
    Fn f = [eq](const std::vector<Tensor>& x) { return std::vector<Tensor>{einsum(eq, x)}; };
    check_grads(f, ins, true);
  }
}

TEST(LinalgGrad, Decompositions) {
  Fn inv_fn = [](const std::vector<Tensor>& x) { return std::vector<Tensor>{linalg_inv(x[0])}; };
  check_grads(inv_fn, {leaf(well_conditioned({2, 3, 3}))}, true);
  Fn solve_fn = [](const std::vector<Tensor>& x) { return std::vector<Tensor>{linalg_solve(x[0], x[1])}; };
  check_grads(solve_fn, {leaf(well_conditioned({3, 3})), leaf(rnd({3, 2}))}, true);
  check_grads(solve_fn, {leaf(well_conditioned({2, 3, 3})), leaf(rnd({3}))}, true);
  check_grads(solve_fn, {leaf(well_conditioned({1, 3, 3})), leaf(rnd({2, 3, 2}))}, true);
  // cholesky reads the lower triangle only: check through a symmetrising wrapper (as PyTorch does)
  for (bool upper : {false, true}) {
    Fn chol = [upper](const std::vector<Tensor>& x) {
      Tensor s = (x[0] + x[0].transpose(-2, -1)) * Scalar(0.5);
      return std::vector<Tensor>{linalg_cholesky(s, upper)};
    };
    check_grads(chol, {leaf(spd({2, 3, 3}))}, true);
  }
  for (auto shape : {Shape{4, 3}, Shape{3, 3}, Shape{2, 4}, Shape{2, 3, 2}}) {
    SCOPED_TRACE(shape_str(shape));
    Fn qr = [](const std::vector<Tensor>& x) {
      auto [Q, R] = linalg_qr(x[0]);
      return std::vector<Tensor>{Q, R};
    };
    check_grads(qr, {leaf(rnd(shape))}, shape.size() == 2);
  }
  Fn qr_complete = [](const std::vector<Tensor>& x) {
    auto [Q, R] = linalg_qr(x[0], "complete");
    return std::vector<Tensor>{Q, R};
  };
  check_grads(qr_complete, {leaf(rnd({3, 4}))}, false);
  Fn det_fn = [](const std::vector<Tensor>& x) { return std::vector<Tensor>{linalg_det(x[0])}; };
  check_grads(det_fn, {leaf(well_conditioned({2, 3, 3}))}, true);
  Fn slogdet_fn = [](const std::vector<Tensor>& x) {
    auto [s, l] = linalg_slogdet(x[0]);
    return std::vector<Tensor>{s, l};
  };
  check_grads(slogdet_fn, {leaf(rnd({3, 3}) - eye(3, std::nullopt, DType::Float64) * Scalar(3.0))}, true);
}

// ---- registry samples -----------------------------------------------------------------------------

// Every linalg entry's samples run forward for each listed dtype, and (float64, where marked)
// pass gradcheck: the parity fixtures and docs are generated from these.
TEST(LinalgRegistry, SamplesRunAndGradcheck) {
  const auto& reg = ops::Registry::instance();
  int checked = 0;
  for (const auto& def : reg.all()) {
    if (def->family != "linalg" && def->name() != "linear") continue;
    SCOPED_TRACE(def->name());
    ASSERT_TRUE(bool(def->samples));
    for (DType dt : def->dtypes) {
      Generator gen(1234);
      auto samples = def->samples(dt, gen);
      EXPECT_FALSE(samples.empty());
      for (auto& s : samples) {
        SCOPED_TRACE(s.note + " " + std::string(dtype_name(dt)));
        std::vector<Tensor> outs;
        EXPECT_NO_THROW(outs = ops::call(*def, s.args));
        if (!def->differentiable || dt != DType::Float64 || !s.gradcheck) continue;
        std::vector<Tensor> inputs;
        std::vector<int> where;
        for (size_t i = 0; i < s.args.size(); ++i) {
          if (s.args[i].is_tensor() && s.args[i].tensor().defined() && s.args[i].tensor().numel() > 0) {
            where.push_back(int(i));
            inputs.push_back(leaf(s.args[i].tensor()));
          } else if (s.args[i].is_tensor_list()) {
            for (const Tensor& t : s.args[i].tensor_list()) {
              where.push_back(int(i));
              inputs.push_back(leaf(t));
            }
          }
        }
        if (inputs.empty()) continue;
        auto args = s.args;
        const ops::OpDef* op = def.get();
        Fn fn = [op, args, where](const std::vector<Tensor>& xs) {
          auto a = args;
          std::vector<std::vector<Tensor>> lists(a.size());
          for (size_t k = 0; k < where.size(); ++k) {
            if (a[size_t(where[k])].is_tensor_list()) lists[size_t(where[k])].push_back(xs[k]);
            else a[size_t(where[k])] = xs[k];
          }
          for (size_t i = 0; i < a.size(); ++i)
            if (!lists[i].empty()) a[i] = lists[i];
          return ops::call(*op, a);
        };
        EXPECT_TRUE(gradcheck(fn, inputs));
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 40);
}

}  // namespace
}  // namespace foundry
