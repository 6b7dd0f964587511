// Every SIMD kernel against its scalar reference twin, on every compiled Highway target the
// machine supports (the dispatch is forced to each in turn).
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <bit>
#include <cmath>
#include <functional>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "foundry/core/numeric.h"
#include "foundry/core/parallel.h"
#include "foundry/ops/ops.h"
#include "foundry/core/tensor.h"
#include "core/parallel_testing.h"
#include "kernels/cpu/binary.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/unary.h"
#include "foundry/quant/block_formats.h"
#include "quant/q8_kernels.h"
#include "quant/vnni_gemv.h"
#include "kernels/cpu/gemm.h"
#include "each_target.h"

using namespace foundry;
using namespace foundry::kernels;

namespace {

// Distance in units in the last place between two floats (0 for equal, also for NaN == NaN).
int64_t ulp_distance(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return 0;
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<int64_t>::max();
  if (a == b) return 0;
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = int32_t(0x80000000u - uint32_t(ia));
  if (ib < 0) ib = int32_t(0x80000000u - uint32_t(ib));
  return std::abs(int64_t(ia) - int64_t(ib));
}

std::vector<float> sweep() {
  std::vector<float> v;
  for (int i = -4000; i <= 4000; ++i) v.push_back(float(i) * 0.0025f);  // [-10, 10]
  for (float x : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-6f, 0.5f, 1.0f, -1.0f, 30.0f, -30.0f, 88.0f, -88.0f, 100.0f,
                  -100.0f, 1e10f, -1e10f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::denorm_min()})
    v.push_back(x);
  return v;
}

// Allowed error per function: ulp bound, or an absolute bound (for erf-based functions whose
// float approximation is stated in absolute terms).
struct Bound {
  int64_t ulp;
  double abs;
};
Bound bound_for(UnaryOp op) {
  switch (op) {
    case UnaryOp::Erf: return {3, 1e-7};
    case UnaryOp::Gelu: return {4, 2.5e-7};  // times max(1, |x|): ErfAbsF's absolute error
    case UnaryOp::Tanh: case UnaryOp::GeluTanh: case UnaryOp::Mish: return {6, 1e-7};
    case UnaryOp::Softplus: case UnaryOp::LogSigmoid: case UnaryOp::Log1p: return {6, 1e-7};
    case UnaryOp::Sigmoid: case UnaryOp::Silu: case UnaryOp::Elu: return {6, 1e-7};
    case UnaryOp::Sin: case UnaryOp::Cos: return {4, 1e-7};
    default: return {4, 0};
  }
}

// k standard normals, each block of `block` values scaled by one power of two from 2^-20 to 2^19 in
// turn: quantizer tests over 40 binades.
std::vector<float> normals_over_binades(int64_t k, int64_t block, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) x[size_t(i)] = nd(rng) * std::ldexp(1.f, int(i / block % 40) - 20);
  return x;
}

class EachTarget : public foundry_test::PerTarget {};
using foundry_test::target_name;

// rows x k weights quantized row by row in format t, and one activation row in t's dot format.
struct QuantizedRows {
  int64_t row_bytes = 0;
  std::vector<uint8_t> w, x;
};
QuantizedRows quantize_rows(const foundry::quant::BlockFormatTraits& t, const std::vector<float>& w,
                            const std::vector<float>& x, int64_t rows, int64_t k) {
  const auto& act = foundry::quant::traits(t.dot_format);
  QuantizedRows q;
  q.row_bytes = foundry::quant::quantized_bytes(t, 1, k);
  q.w.resize(static_cast<size_t>(rows * q.row_bytes));
  q.x.resize(static_cast<size_t>(foundry::quant::quantized_bytes(act, 1, k)));
  for (int64_t r = 0; r < rows; ++r) t.quantize(w.data() + r * k, q.w.data() + r * q.row_bytes, k);
  act.quantize(x.data(), q.x.data(), k);
  return q;
}

}  // namespace

TEST_P(EachTarget, UnaryFloatMatchesReference) {
  std::vector<float> x = sweep();
  std::vector<float> out(x.size());
  UnaryParams params[] = {{}, {0.1, 1.0, 1.0}};
  for (int o = 0; o < int(UnaryOp::Count); ++o) {
    UnaryOp op = UnaryOp(o);
    UnaryParams p = params[0];
    if (op == UnaryOp::LeakyRelu) p = {0.1};
    if (op == UnaryOp::Elu) p = {1.0, 1.0, 1.0};
    if (op == UnaryOp::Softplus) p = {1.0, 20.0};
    if (op == UnaryOp::Hardtanh || op == UnaryOp::Clamp) p = {-1.0, 2.0};
    if (op == UnaryOp::NanToNum) p = {0.0, 1e30, -1e30};
    unary_f32(op, x.data(), out.data(), int64_t(x.size()), p);
    Bound b = bound_for(op);
    for (size_t i = 0; i < x.size(); ++i) {
      float ref = unary_ref(op, x[i], p);
      int64_t d = ulp_distance(out[i], ref);
      double scale = std::max(1.0, std::fabs(double(x[i])));
      bool ok = d <= b.ulp || (b.abs > 0 && std::fabs(double(out[i]) - double(ref)) <= b.abs * scale);
      ASSERT_TRUE(ok) << unary_op_name(op) << "(" << x[i] << "): simd " << out[i] << " vs ref " << ref << " (" << d
                      << " ulp)";
    }
  }
}

TEST_P(EachTarget, UnaryDoubleMatchesReference) {
  std::vector<double> x;
  for (float f : sweep()) x.push_back(double(f));
  std::vector<double> out(x.size());
  for (UnaryOp op : {UnaryOp::Exp, UnaryOp::Log, UnaryOp::Tanh, UnaryOp::Sigmoid, UnaryOp::Sqrt, UnaryOp::Sin}) {
    unary_f64(op, x.data(), out.data(), int64_t(x.size()), {});
    for (size_t i = 0; i < x.size(); ++i) {
      double ref = unary_ref(op, x[i], {});
      if ((std::isnan(ref) && std::isnan(out[i])) || out[i] == ref) continue;
      ASSERT_LE(std::fabs(out[i] - ref), 8 * std::numeric_limits<double>::epsilon() * std::max(1.0, std::fabs(ref)))
          << unary_op_name(op) << "(" << x[i] << ")";
    }
  }
}

TEST_P(EachTarget, BinaryAndReductions) {
  std::vector<float> a = sweep(), b = sweep();
  std::reverse(b.begin(), b.end());
  std::vector<float> out(a.size());
  for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Maximum, BinaryOp::Minimum}) {
    ASSERT_TRUE(binary_simd_f32(op, a.data(), b.data(), out.data(), int64_t(a.size()), false, false, 1.0f));
    for (size_t i = 0; i < a.size(); ++i) {
      float ref;
      switch (op) {
        case BinaryOp::Add: ref = a[i] + b[i]; break;
        case BinaryOp::Sub: ref = a[i] - b[i]; break;
        case BinaryOp::Mul: ref = a[i] * b[i]; break;
        case BinaryOp::Div: ref = a[i] / b[i]; break;
        case BinaryOp::Maximum:
          ref = (std::isnan(a[i]) || std::isnan(b[i])) ? NAN : std::max(a[i], b[i]);
          break;
        default:
          ref = (std::isnan(a[i]) || std::isnan(b[i])) ? NAN : std::min(a[i], b[i]);
          break;
      }
      ASSERT_EQ(ulp_distance(out[i], ref), 0) << binary_op_name(op) << " " << a[i] << ", " << b[i];
    }
  }
  // GELU gradients against the closed forms evaluated in double.
  for (BinaryOp op : {BinaryOp::GeluBackward, BinaryOp::GeluTanhBackward}) {
    std::vector<float> g(a.size(), 1.0f);
    ASSERT_TRUE(binary_simd_f32(op, g.data(), a.data(), out.data(), int64_t(a.size()), false, false, 1.0f));
    for (size_t i = 0; i < a.size(); ++i) {
      double x = a[i];
      if (!std::isfinite(x)) continue;
      double ref;
      if (op == BinaryOp::GeluBackward) {
        ref = 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
      } else {
        double kb = std::sqrt(2 / M_PI), kk = 0.044715, th = std::tanh(kb * (x + kk * x * x * x));
        ref = 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * kb * (1 + 3 * kk * x * x);
      }
      ASSERT_NEAR(out[i], ref, 2e-6 * std::max(1.0, std::fabs(ref))) << binary_op_name(op) << "(" << x << ")";
    }
  }
  std::vector<float> v(1000);
  double exact = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = float(std::sin(double(i)));
    exact += v[i];
  }
  EXPECT_NEAR(sum_f32(v.data(), int64_t(v.size())), exact, 1e-4);
  // Row sums give each row exactly sum_f32's value (odd row counts, tails, rows longer than one
  // 2048-value block, and 256 KB or more of rows).
  for (auto [K, rows] : {std::pair<int64_t, int64_t>{1, 1003}, {17, 61}, {1000, 4}, {2500, 3}, {1024, 67}, {77, 1003}}) {
    std::vector<float> m(static_cast<size_t>(rows * K)), got(static_cast<size_t>(rows));
    for (size_t i = 0; i < m.size(); ++i) m[i] = float(std::cos(double(i) * 0.37)) * float(1 + i % 5);
    sum_rows_f32(m.data(), rows, K, got.data());
    for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(got[size_t(r)], float(sum_f32(m.data() + r * K, K))) << "K " << K << " row " << r;
  }
  // A long sum (read as four streams) is its 2048-value blocks' sums added in order in double,
  // each block exactly as a sum of that block alone gives it: lengths below, at and past the
  // four-stream runs (32 blocks at least, 1024 a run), with a tail block.
  for (int64_t n : {int64_t(2048 * 31 + 5), int64_t(2048 * 32), int64_t(2048 * 1030 + 777), int64_t(2048 * 2048)}) {
    std::vector<float> a(static_cast<size_t>(n));
    // Blocks of magnitudes 2^-30 to 2^30: their sums round in double, so the order shows.
    for (size_t i = 0; i < a.size(); ++i)
      a[i] = std::ldexp(float(std::sin(double(i) * 0.013)) * float(1 + i % 7) + 0.25f, int(i / 2048 * 7 % 61) - 30);
    double in_order = 0;
    for (int64_t b = 0; b < n; b += 2048) in_order += sum_f32(a.data() + b, std::min<int64_t>(2048, n - b));
    ASSERT_EQ(sum_f32(a.data(), n), in_order) << "n " << n;
  }
  EXPECT_EQ(max_f32(v.data(), 1000), *std::max_element(v.begin(), v.end()));
  EXPECT_EQ(min_f32(v.data(), 1000), *std::min_element(v.begin(), v.end()));
  v[500] = NAN;
  EXPECT_TRUE(std::isnan(max_f32(v.data(), 1000)));
}

TEST_P(EachTarget, HalfConversionsMatchScalar) {
  std::vector<float> x = sweep();
  for (int i = 0; i < 70000; i += 7) x.push_back(float(i) * 1.37f);
  std::vector<uint16_t> h(x.size()), bf(x.size());
  convert_f32_to_f16(x.data(), h.data(), int64_t(x.size()));
  convert_f32_to_bf16(x.data(), bf.data(), int64_t(x.size()));
  std::vector<float> back(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    uint16_t rh = Half::from_float(x[i]), rb = BFloat16::from_float(x[i]);
    if (std::isnan(x[i])) continue;
    ASSERT_EQ(h[i], rh) << x[i];
    ASSERT_EQ(bf[i], rb) << x[i];
  }
  convert_f16_to_f32(h.data(), back.data(), int64_t(h.size()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(ulp_distance(back[i], Half::to_float(h[i])), 0);
  convert_bf16_to_f32(bf.data(), back.data(), int64_t(bf.size()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(ulp_distance(back[i], float(BFloat16::from_bits(bf[i]))), 0);
}

// q8_0 dot products and the quantized matrix-vector product against the scalar reference of the
// block-format table (integer sums per block are exact; only the float accumulation order differs).
TEST_P(EachTarget, Q8DotMatchesScalarReference) {
  const auto& q8 = foundry::quant::traits("q8_0");
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t rows = 37, k = 32 * 24;
  std::vector<float> w(static_cast<size_t>(rows * k)), x(static_cast<size_t>(k));
  for (float& v : w) v = nd(rng) * 3.f;
  for (float& v : x) v = nd(rng);
  for (int64_t i = 0; i < k; i += 97) x[size_t(i)] = 0.f;
  std::vector<uint8_t> wq(static_cast<size_t>(foundry::quant::quantized_bytes(q8, rows, k))), xq(static_cast<size_t>(k / 32 * 34));
  for (int64_t r = 0; r < rows; ++r) q8.quantize(w.data() + r * k, wq.data() + r * (k / 32 * 34), k);
  q8.quantize(x.data(), xq.data(), k);
  std::vector<float> y(static_cast<size_t>(rows));
  foundry::quant::gemv_q8_0(wq.data(), rows, k, xq.data(), y.data());
  for (int64_t r = 0; r < rows; ++r) {
    const float want = q8.dot(wq.data() + r * (k / 32 * 34), xq.data(), k);
    float scale = 0.f;
    for (int64_t i = 0; i < k; ++i) scale += std::fabs(w[size_t(r * k + i)] * x[size_t(i)]);
    ASSERT_NEAR(y[size_t(r)], want, 1e-5f * scale) << "row " << r;
    ASSERT_EQ(foundry::quant::dot_q8_0_q8_0(wq.data() + r * (k / 32 * 34), xq.data(), k), y[size_t(r)]);
  }
  // The empty product.
  ASSERT_EQ(foundry::quant::dot_q8_0_q8_0(wq.data(), xq.data(), 0), 0.f);
  // q4_0 weights against the same q8_0 activations.
  const auto& q4 = foundry::quant::traits("q4_0");
  const int64_t row4 = k / 32 * 18;
  std::vector<uint8_t> w4(static_cast<size_t>(foundry::quant::quantized_bytes(q4, rows, k)));
  for (int64_t r = 0; r < rows; ++r) q4.quantize(w.data() + r * k, w4.data() + r * row4, k);
  foundry::quant::gemv_q4_0(w4.data(), rows, k, xq.data(), y.data());
  for (int64_t r = 0; r < rows; ++r) {
    const float want = q4.dot(w4.data() + r * row4, xq.data(), k);
    float scale = 0.f;
    for (int64_t i = 0; i < k; ++i) scale += std::fabs(w[size_t(r * k + i)] * x[size_t(i)]);
    ASSERT_NEAR(y[size_t(r)], want, 1e-5f * scale) << "q4_0 row " << r;
    ASSERT_EQ(foundry::quant::dot_q4_0_q8_0(w4.data() + r * row4, xq.data(), k), y[size_t(r)]);
  }
}

// The AVX-512 VNNI kernels (where the CPU has them) against the scalar references, with an odd
// number of blocks (the last one outside the two-block steps).
TEST(QuantKernels, VnniGemvMatchesScalarReference) {
  if (!foundry::quant::vnni_available()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.f, 1.f);
  // Block counts that leave 0-3 blocks after q4_0's 4-block steps and q8_0's pairs; 23 rows: groups
  // of 4 and 3 rows left over.
  for (int64_t k : {int64_t(32 * 24), int64_t(32 * 7), int64_t(32 * 6), int64_t(32 * 3), int64_t(32)}) {
    const int64_t rows = 23;
    std::vector<float> w(static_cast<size_t>(rows * k)), x(static_cast<size_t>(k));
    for (float& v : w) v = nd(rng);
    for (float& v : x) v = nd(rng) * 4.f;
    const auto& q8 = foundry::quant::traits("q8_0");
    std::vector<uint8_t> xq(static_cast<size_t>(k / 32 * 34));
    q8.quantize(x.data(), xq.data(), k);
    for (const char* name : {"q8_0", "q4_0"}) {
      const auto& t = foundry::quant::traits(name);
      const int64_t row_bytes = foundry::quant::quantized_bytes(t, 1, k);
      std::vector<uint8_t> wq(static_cast<size_t>(rows * row_bytes));
      for (int64_t r = 0; r < rows; ++r) t.quantize(w.data() + r * k, wq.data() + r * row_bytes, k);
      std::vector<float> y(static_cast<size_t>(rows));
      if (std::string(name) == "q8_0") foundry::quant::gemv_q8_0_vnni(wq.data(), rows, k, xq.data(), y.data());
      else foundry::quant::gemv_q4_0_vnni(wq.data(), rows, k, xq.data(), y.data());
      for (int64_t r = 0; r < rows; ++r) {
        float scale = 0.f;
        for (int64_t i = 0; i < k; ++i) scale += std::fabs(w[size_t(r * k + i)] * x[size_t(i)]);
        ASSERT_NEAR(y[size_t(r)], t.dot(wq.data() + r * row_bytes, xq.data(), k), 1e-5f * scale) << name << " k " << k << " row " << r;
      }
    }
  }
}

// The x86 q4_K kernels (AVX-512 VNNI, AVX2 byte dot products) against the scalar reference, on
// weights with a zero sub-block and sub-blocks of widely different ranges (all six-bit scales and
// mins in use) and activation levels at both ends of q8_K's range (-127, +127): decode's kernel on
// one activation row at a time and the prefill GEMM on all of them (a partial tile of 7 rows).
TEST(QuantKernels, X86Q4KGemmMatchesScalarReference) {
  std::mt19937 rng(15);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t rows = 21, k = 256 * 5, m = 7;
  std::vector<float> w(static_cast<size_t>(rows * k)), x(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < rows * k; ++i) w[size_t(i)] = nd(rng) * std::ldexp(1.f, int((i / 32) % 9) - 4) + 0.5f * float((i / 32) % 3);
  for (int64_t i = 0; i < 32; ++i) w[size_t(3 * k + 64 + i)] = 0.f;
  for (float& v : x) v = nd(rng);
  // q8_K's scale is max / -127: a super-block's largest magnitude is level -127 whatever its sign,
  // and the others' levels reach +127 when the largest is negative.
  x[7] = -40.f;
  x[8] = 40.f;  // level +127 beside it
  x[size_t(k + 300)] = 40.f;
  const auto& t = foundry::quant::traits("q4_K");
  const auto& act = foundry::quant::traits(t.dot_format);
  const int64_t row_bytes = foundry::quant::quantized_bytes(t, 1, k), act_bytes = foundry::quant::quantized_bytes(act, 1, k);
  std::vector<uint8_t> wq(static_cast<size_t>(rows * row_bytes)), xq(static_cast<size_t>(m * act_bytes));
  for (int64_t r = 0; r < rows; ++r) t.quantize(w.data() + r * k, wq.data() + r * row_bytes, k);
  for (int64_t i = 0; i < m; ++i) act.quantize(x.data() + i * k, xq.data() + i * act_bytes, k);
  ASSERT_EQ(int8_t(xq[4 + 7]), -127);
  ASSERT_EQ(int8_t(xq[4 + 8]), 127);
  ASSERT_EQ(int8_t(xq[size_t(act_bytes + 292 + 4 + 300 - 256)]), -127);
  int kernels = 0;
  for (const char* kernel : {"vnni", "avx2"}) {
    const bool vnni = std::string(kernel) == "vnni";
    if (vnni ? !foundry::quant::vnni_available() : !foundry::quant::avx2_available()) continue;
    ++kernels;
    std::vector<float> y(static_cast<size_t>(m * rows)), one(static_cast<size_t>(rows));
    const auto isa = vnni ? foundry::quant::BlockGemmIsa::VNNI : foundry::quant::BlockGemmIsa::AVX2;
    foundry::quant::gemm_blocks_x86(foundry::quant::BlockFormat::Q4_K, isa, wq.data(), rows, k, xq.data(), m, y.data());
    for (int64_t i = 0; i < m; ++i) {
      foundry::quant::gemv_q4_K_rows(vnni, wq.data(), k, xq.data() + i * act_bytes, 0, rows, one.data());
      for (int64_t r = 0; r < rows; ++r) {
        float scale = 0.f;
        for (int64_t j = 0; j < k; ++j) scale += std::fabs(w[size_t(r * k + j)] * x[size_t(i * k + j)]);
        const float want = t.dot(wq.data() + r * row_bytes, xq.data() + i * act_bytes, k);
        ASSERT_NEAR(y[size_t(i * rows + r)], want, 1e-5f * scale) << kernel << " GEMM activation row " << i << " weight row " << r;
        ASSERT_NEAR(one[size_t(r)], want, 1e-5f * scale) << kernel << " decode activation row " << i << " weight row " << r;
      }
    }
  }
  if (kernels == 0) GTEST_SKIP() << "neither AVX-512 VNNI nor AVX2 on this CPU";
}

// The x86 q5_K / q6_K decode kernels (AVX2: q5_K four rows a pass, two to a vector, with a row
// range that leaves a tail and starts off a multiple of four; q6_K's AVX-512 kernel where the CPU
// has it) against the scalar reference, on levels at both ends (all 6-bit scales and mins, fifth
// bits set and clear) and activation levels -127 / +127.
TEST(QuantKernels, X86Q56KDecodeMatchesScalarReference) {
  if (!foundry::quant::avx2_available()) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t rows = 23, k = 256 * 3;
  std::vector<float> w(static_cast<size_t>(rows * k)), x(static_cast<size_t>(k));
  for (int64_t i = 0; i < rows * k; ++i) w[size_t(i)] = nd(rng) * std::ldexp(1.f, int((i / 32) % 9) - 4) + 0.5f * float((i / 32) % 3);
  for (int64_t i = 0; i < 32; ++i) w[size_t(4 * k + 96 + i)] = 0.f;
  for (float& v : x) v = nd(rng);
  x[7] = -40.f;
  x[8] = 40.f;
  for (const char* name : {"q5_K", "q6_K"}) {
    const auto& t = foundry::quant::traits(name);
    const auto [row_bytes, wq, xq] = quantize_rows(t, w, x, rows, k);
    ASSERT_EQ(int8_t(xq[4 + 7]), -127);
    ASSERT_EQ(int8_t(xq[4 + 8]), 127);
    for (const bool avx512 : {false, true}) {
      if (avx512 && !foundry::quant::vnni_available()) continue;
      std::vector<float> y(static_cast<size_t>(rows), -1.f);
      const int64_t r0 = 1;  // passes over rows 1-20, then a 2-row tail
      foundry::quant::gemv_q56_K_x86_rows(avx512, std::string(name) == "q6_K", wq.data(), k, xq.data(), r0, rows,
                                          y.data());
      EXPECT_EQ(y[0], -1.f) << name << ": row 0 is outside the range";
      for (int64_t r = r0; r < rows; ++r) {
        float scale = 0.f;
        for (int64_t j = 0; j < k; ++j) scale += std::fabs(w[size_t(r * k + j)] * x[size_t(j)]);
        ASSERT_NEAR(y[size_t(r)], t.dot(wq.data() + r * row_bytes, xq.data(), k), 1e-5f * scale)
            << name << (avx512 ? " (AVX-512)" : " (AVX2)") << " row " << r;
      }
    }
  }
}

// The prefill's x86 integer GEMMs (block_gemm_x86.cpp: VNNI panels of 16 rows, tiles of 16
// activation rows; AVX2 panels of 8, tiles of 4, q8_0's of 8) for every format that has one
// against the scalar reference: row counts that leave a partial panel, activation row counts that
// leave a partial tile, a zero block, weight and activation levels at both ends of their ranges
// (q8_0's -127 / +127 weights, where AVX2 multiplies magnitudes by signed activations; the 5- and
// 6-bit formats' top levels, whose int16 pair sums AVX2 takes to int32 every 4 / 2 steps).
TEST(QuantKernels, X86BlockGemmMatchesScalarReference) {
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.f, 1.f);
  int kernels = 0;
  for (const char* kernel : {"vnni", "avx2"}) {
    const bool vnni = std::string(kernel) == "vnni";
    if (vnni ? !foundry::quant::vnni_available() : !foundry::quant::avx2_available()) continue;
    ++kernels;
    for (const char* name : {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_K", "q5_K", "q6_K"}) {
      using Shape = std::tuple<int64_t, int64_t, int64_t>;  // weight rows, k, activation rows
      const bool k_quant = std::string(name).back() == 'K';  // k a multiple of 256
      const std::vector<Shape> shapes = k_quant ? std::vector<Shape>{{37, 256, 11}, {16, 768, 8}, {5, 512, 19}, {19, 256, 33}}
                                                : std::vector<Shape>{{37, 96, 11}, {16, 768, 8}, {5, 32, 19}, {8, 64, 1}, {19, 256, 33}, {24, 64, 15}};
      for (auto [rows, k, m] : shapes) {
        std::vector<float> w(static_cast<size_t>(rows * k)), x(static_cast<size_t>(m * k));
        for (int64_t i = 0; i < rows * k; ++i) w[size_t(i)] = nd(rng) * std::ldexp(1.f, int((i / 32) % 7) - 3);
        for (float& v : x) v = nd(rng);
        for (int64_t i = 0; i < 32 && rows > 2; ++i) w[size_t(2 * k + i)] = 0.f;  // a zero block
        w[3] = 9.f;
        w[4] = -9.f;  // the block's largest magnitudes, either sign: levels -127 / +127 (q8_0), 0 / 15 (q4_0)
        x[5] = -9.f;
        x[6] = 9.f;
        // The largest int16 pair sums: blocks of weight levels at the top of their range (row 1's
        // first block for the symmetric formats, its second for those with a minimum) against the
        // last activation row's first blocks, all of one sign.
        for (int64_t i = 0; i < 32 && rows > 1; ++i) {
          w[size_t(k + i)] = i == 0 ? 9.f : -8.4375f;
          if (k >= 64) w[size_t(k + 32 + i)] = i == 0 ? -9.f : 9.f;
        }
        for (int64_t i = 0; i < std::min<int64_t>(k, 64); ++i) x[size_t((m - 1) * k + i)] = -9.f;
        const auto& t = foundry::quant::traits(name);
        const auto& act = foundry::quant::traits(t.dot_format);
        const int64_t row_bytes = foundry::quant::quantized_bytes(t, 1, k), act_bytes = foundry::quant::quantized_bytes(act, 1, k);
        std::vector<uint8_t> wq(static_cast<size_t>(rows * row_bytes)), xq(static_cast<size_t>(m * act_bytes));
        for (int64_t r = 0; r < rows; ++r) t.quantize(w.data() + r * k, wq.data() + r * row_bytes, k);
        for (int64_t i = 0; i < m; ++i) act.quantize(x.data() + i * k, xq.data() + i * act_bytes, k);
        std::vector<float> y(static_cast<size_t>(m * rows), -1.f);
        using foundry::quant::BlockGemmIsa;
        foundry::quant::gemm_blocks_x86(t.format, vnni ? BlockGemmIsa::VNNI : BlockGemmIsa::AVX2, wq.data(), rows, k,
                                        xq.data(), m, y.data());
        if (vnni) {
          // The AMX kernel (its tile instructions emulated, and on CPUs with AMX-INT8 the tiles
          // themselves) gives the VNNI kernel's bits: the same int32 block sums, the same float work.
          std::vector<BlockGemmIsa> tiles{BlockGemmIsa::AMXEmulated};
          if (foundry::quant::amx_int8_available()) tiles.push_back(BlockGemmIsa::AMX);
          for (const BlockGemmIsa isa : tiles) {
            std::vector<float> z(y.size(), -1.f);
            foundry::quant::gemm_blocks_x86(t.format, isa, wq.data(), rows, k, xq.data(), m, z.data());
            ASSERT_EQ(0, std::memcmp(z.data(), y.data(), y.size() * sizeof(float)))
                << (isa == BlockGemmIsa::AMX ? "amx " : "emulated amx ") << name << " rows " << rows << " k " << k << " m " << m;
          }
        }
        for (int64_t i = 0; i < m; ++i)
          for (int64_t r = 0; r < rows; ++r) {
            float scale = 0.f;
            for (int64_t j = 0; j < k; ++j) scale += std::fabs(w[size_t(r * k + j)] * x[size_t(i * k + j)]);
            ASSERT_NEAR(y[size_t(i * rows + r)], t.dot(wq.data() + r * row_bytes, xq.data() + i * act_bytes, k), 1e-5f * scale)
                << kernel << " " << name << " rows " << rows << " k " << k << " activation row " << i << " weight row " << r;
          }
      }
    }
  }
  if (kernels == 0) GTEST_SKIP() << "neither AVX-512 VNNI nor AVX2 on this CPU";
}

// Each thread builds the activation the group kernels read on its first chunk of a product
// (row_groups.cpp); products large enough for both threads, one after another from the same
// activation buffer with new levels each time, must each read their own row.
TEST(QuantKernels, GroupProductsReadEachProductsActivation) {
  namespace q = foundry::quant;
  if (!q::avx2_available()) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.f, 1.f);
  foundry::testing::ThreadCountScope restore;
  foundry::set_num_threads(2);
  for (const char* name : {"q4_0", "q5_1", "q8_0", "q4_K", "q6_K"}) {
    const auto& t = q::traits(name);
    const auto& act = q::traits(t.dot_format);
    const int64_t rows = 1024, k = 768;  // 430-630 KB of weights: above kMinParallelBytes
    const int64_t row_bytes = q::quantized_bytes(t, 1, k), act_bytes = q::quantized_bytes(act, 1, k);
    ASSERT_GE(rows * row_bytes, foundry::kMinParallelBytes) << name;
    std::vector<float> w(static_cast<size_t>(rows * k)), x(static_cast<size_t>(k));
    for (float& v : w) v = nd(rng);
    std::vector<uint8_t> rows_layout(static_cast<size_t>(rows * row_bytes)), xq(static_cast<size_t>(act_bytes));
    for (int64_t r = 0; r < rows; ++r) t.quantize(w.data() + r * k, rows_layout.data() + r * row_bytes, k);
    std::vector<uint8_t> groups = rows_layout;
    q::to_layout(t, q::WeightLayout::Groups8, groups.data(), rows, k);
    for (int product = 0; product < 3; ++product) {
      for (float& v : x) v = nd(rng) * float(1 + 3 * product);
      act.quantize(x.data(), xq.data(), k);  // the same buffer each time
      std::vector<float> y(size_t(rows), -1.f);
      const q::GemvTarget target{groups.data(), rows, y.data()};
      q::gemv_many(t, k, xq.data(), std::span<const q::GemvTarget>(&target, 1), q::WeightLayout::Groups8);
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_NEAR(y[size_t(r)], t.dot(rows_layout.data() + r * row_bytes, xq.data(), k),
                    1e-4f * (1.f + std::fabs(y[size_t(r)])))
            << name << " product " << product << " row " << r;
    }
  }
}

// q4_0, q4_1, q5_0, q5_1, q8_0 and the K-quants in groups of 8 rows (WeightLayout::Groups8): every row reads back as the row
// layout wrote it; decode's kernel over the groups gives the scalar reference's dots (within float
// order), threads splitting the groups, and through gemv_many beside a matrix of other rows; the
// prefill's GEMMs (AVX2, VNNI, AMX) give the bits they give over the same rows in the row layout
// (the same panels; 40 rows end in a VNNI panel of one group). A block of top levels against
// activations of one sign reaches the largest int16 sums the kernels hold.
TEST(QuantKernels, GroupsOfEightRowsMatchTheRowLayout) {
  namespace q = foundry::quant;
  if (!q::avx2_available()) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const char* name : {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_K", "q5_K", "q6_K"})
  // Rows past the last whole group (13, 21, 47: GPT-2's 50257-row output matrix has one) stay in rows.
  for (auto [rows, columns, m] : {std::tuple<int64_t, int64_t, int64_t>{8, 32, 1}, {16, 768, 9}, {40, 96, 11}, {64, 2048, 8},
                                  {24, 64, 3}, {13, 96, 2}, {21, 256, 9}, {47, 64, 8}}) {
    const auto& t = q::traits(name);
    const int64_t k = (columns + t.block_size - 1) / t.block_size * t.block_size;  // q4_K: whole super-blocks
    const auto& act = q::traits(t.dot_format);
    std::vector<float> w(size_t(rows * k)), x(size_t(m * k));
    for (int64_t i = 0; i < rows * k; ++i) w[size_t(i)] = nd(rng) * std::ldexp(1.f, int((i / 32) % 7) - 3);
    for (float& v : x) v = nd(rng);
    // Row 5's first block at its top level but its first value (q4_0: 15, q5_0: 31, d < 0; q8_0:
    // -127 and 120), against activation levels of -127: the largest int16 sums the kernels hold.
    for (int64_t i = 0; i < 32; ++i) w[size_t(5 * k + i)] = i == 0 ? 9.f : -8.4375f;
    for (int64_t i = 0; i < 32; ++i) x[size_t((m - 1) * k + i)] = -9.f;
    const int64_t row_bytes = q::quantized_bytes(t, 1, k), act_bytes = q::quantized_bytes(act, 1, k);
    std::vector<uint8_t> rows_layout(size_t(rows * row_bytes)), xq(size_t(m * act_bytes));
    for (int64_t r = 0; r < rows; ++r) t.quantize(w.data() + r * k, rows_layout.data() + r * row_bytes, k);
    for (int64_t i = 0; i < m; ++i) act.quantize(x.data() + i * k, xq.data() + i * act_bytes, k);
    std::vector<uint8_t> groups = rows_layout;
    std::vector<uint8_t> row(static_cast<size_t>(row_bytes));
    q::to_layout(t, q::WeightLayout::Groups8, groups.data(), rows, k);
    ASSERT_NE(0, std::memcmp(groups.data(), rows_layout.data(), groups.size()));
    for (int64_t r = 0; r < rows; ++r)
      ASSERT_EQ(0, std::memcmp(q::row_of(t, q::WeightLayout::Groups8, groups.data(), rows, k, r, row.data()),
                               rows_layout.data() + r * row_bytes, size_t(row_bytes))) << "row " << r;
    {  // decode's kernel at 1 and 2 threads; the checks below at the suite's count
      foundry::testing::ThreadCountScope restore;
      for (int threads : {1, 2}) {
        foundry::set_num_threads(threads);
        for (int64_t i = 0; i < m; ++i) {
          const uint8_t* xi = xq.data() + i * act_bytes;
          std::vector<float> y(size_t(rows), -1.f), other(8, -1.f);
          const q::GemvTarget targets[] = {{groups.data(), rows, y.data()}, {groups.data(), 8, other.data()}};
          q::gemv_many(t, k, xi, targets, q::WeightLayout::Groups8);
          for (int64_t r = 0; r < rows; ++r) {
            float scale = 0.f;
            for (int64_t j = 0; j < k; ++j) scale += std::fabs(w[size_t(r * k + j)] * x[size_t(i * k + j)]);
            ASSERT_NEAR(y[size_t(r)], t.dot(rows_layout.data() + r * row_bytes, xi, k), 1e-5f * scale)
                << name << " rows " << rows << " k " << k << " activation row " << i << " weight row " << r
                << " threads " << threads;
            if (r < 8) {
              ASSERT_EQ(y[size_t(r)], other[size_t(r)]);
            }
          }
        }
      }
    }
    // The group kernels of both widths (the AVX-512 ones where this CPU has them) give the same bits.
    const int64_t grouped = rows / 8 * 8;
    for (int64_t i = 0; i < m; ++i) {
      const uint8_t* xi = xq.data() + i * act_bytes;
      std::vector<float> narrow(size_t(grouped), -1.f), wide(size_t(grouped), -2.f);
      q::gemv_group_rows(false, t.format, xi, k)(groups.data(), rows, 0, grouped, narrow.data());
      for (int64_t r = 0; r < grouped; ++r) ASSERT_NEAR(narrow[size_t(r)], t.dot(rows_layout.data() + r * row_bytes, xi, k),
                                                     1e-4f * (1.f + std::fabs(narrow[size_t(r)]))) << name << " row " << r;
      if (!q::vnni_available()) continue;
      q::gemv_group_rows(true, t.format, xi, k)(groups.data(), rows, 0, grouped, wide.data());
      ASSERT_EQ(0, std::memcmp(narrow.data(), wide.data(), narrow.size() * sizeof(float))) << name << " k " << k;
    }
    if (m < 8) continue;
    {  // the prefill's product, rows past the groups included
      std::vector<float> y(size_t(m * rows), -1.f), z(y.size(), -2.f);
      ASSERT_TRUE(q::gemm_integer(t, rows_layout.data(), rows, k, xq.data(), m, y.data(), q::WeightLayout::Rows));
      ASSERT_TRUE(q::gemm_integer(t, groups.data(), rows, k, xq.data(), m, z.data(), q::WeightLayout::Groups8));
      ASSERT_EQ(0, std::memcmp(y.data(), z.data(), y.size() * sizeof(float))) << name << " rows " << rows << " k " << k;
    }
    if (rows % 8 != 0) continue;  // gemm_blocks_x86 takes whole groups
    std::vector<q::BlockGemmIsa> isas{q::BlockGemmIsa::AVX2};
    if (q::vnni_available()) isas.insert(isas.end(), {q::BlockGemmIsa::VNNI, q::BlockGemmIsa::AMXEmulated});
    if (q::amx_int8_available()) isas.push_back(q::BlockGemmIsa::AMX);
    for (const q::BlockGemmIsa isa : isas) {
      std::vector<float> y(size_t(m * rows), -1.f), z(y.size(), -2.f);
      q::gemm_blocks_x86(t.format, isa, rows_layout.data(), rows, k, xq.data(), m, y.data());
      q::gemm_blocks_x86(t.format, isa, groups.data(), rows, k, xq.data(), m, z.data(), true);
      ASSERT_EQ(0, std::memcmp(y.data(), z.data(), y.size() * sizeof(float)))
          << name << " isa " << int(isa) << " rows " << rows << " k " << k;
    }
  }
}

// The bf16 and f16 rows kernels (every target) against the table's scalar dots, threads splitting the
// rows: row lengths around the vector steps and one shorter than a vector, rows further apart than k
// (a strided weight). The activation is quantized to bf16 and widened, as decode's products do.
TEST_P(EachTarget, SixteenBitGemvMatchesScalarReference) {
  std::mt19937 rng(16);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const bool bf16 : {true, false})
  for (auto [rows, k, pad] : {std::tuple<int64_t, int64_t, int64_t>{13, 768, 0}, {13, 200, 0}, {13, 7, 0}, {67, 96, 0},
                              {67, 33, 5}, {130, 768, 64}, {700, 64, 0}}) {
    const auto& t = foundry::quant::traits(bf16 ? "bf16" : "f16");
    const int64_t ld = k + pad;
    std::vector<float> w(static_cast<size_t>(rows * k)), x(static_cast<size_t>(k));
    for (float& v : w) v = nd(rng);
    for (float& v : x) v = nd(rng) * 3.f;
    std::vector<uint8_t> wq(static_cast<size_t>(rows * ld * 2), 0xFF), xq(static_cast<size_t>(k * 2));
    for (int64_t r = 0; r < rows; ++r) t.quantize(w.data() + r * k, wq.data() + r * ld * 2, k);
    t.quantize(x.data(), xq.data(), k);
    std::vector<float> xf(static_cast<size_t>(k)), y(static_cast<size_t>(rows), -1.f);
    (bf16 ? foundry::kernels::convert_bf16_to_f32 : foundry::kernels::convert_f16_to_f32)(
        reinterpret_cast<const uint16_t*>(xq.data()), xf.data(), k);
    foundry::kernels::gemv_rows_16(bf16, reinterpret_cast<const uint16_t*>(wq.data()), ld, rows, k, xf.data(), y.data());
    for (int64_t r = 0; r < rows; ++r) {
      float scale = 0.f;
      for (int64_t i = 0; i < k; ++i) scale += std::fabs(w[size_t(r * k + i)] * x[size_t(i)]);
      ASSERT_NEAR(y[size_t(r)], t.dot(wq.data() + r * ld * 2, xq.data(), k), 1e-5f * scale)
          << t.name << " k " << k << " row " << r;
    }
  }
}

// The activation quantizer: llama.cpp's SIMD quantize_row_q8_0 (ggml-cpu/arch/x86/quants.c): the
// reference's scale, fp16(amax / 127), and levels x * (127 / amax) rounded to nearest even (the
// reference multiplies by 1 / d and rounds ties away from zero). 4096 random blocks over many
// binades (some multiply to a level that 1 / d would round the other way), a block of ties, and a
// zero block.
TEST_P(EachTarget, FastQ8ActivationQuantizer) {
  const int64_t k = 32 * 4096;
  std::vector<float> x = normals_over_binades(k, 32, 14);
  for (int64_t i = 0; i < 32; ++i) x[size_t(32 + i)] = float(i - 16) + 0.5f;  // 127 / amax = 1 below
  x[32 + 31] = 127.f;
  for (int64_t i = 0; i < 32; ++i) x[size_t(64 + i)] = 0.f;  // a zero block
  // Blocks (amax, x) where x * (127 / amax) and x * (1 / (amax / 127)) round to different levels
  // (-113 / -112, -88 / -89, 63 / 62, 117 / 118): two in a million random values are such.
  const uint32_t pairs[4][2] = {{1083480629u, 3229852367u}, {1080396921u, 3223320076u},
                                {1079726129u, 1071111176u}, {1085511054u, 1084630678u}};
  for (int e = 0; e < 4; ++e) {
    float* block = x.data() + (3 + e) * 32;
    std::fill(block, block + 32, 0.25f);
    block[0] = std::bit_cast<float>(pairs[e][0]);
    block[1] = std::bit_cast<float>(pairs[e][1]);
  }
  const auto& q8 = foundry::quant::traits("q8_0");
  std::vector<uint8_t> reference(static_cast<size_t>(k / 32 * 34)), got(reference.size());
  q8.quantize(x.data(), reference.data(), k);
  foundry::quant::quantize_row_q8_0_fast(x.data(), got.data(), k);
  int64_t unlike_reference = 0;
  for (int64_t b = 0; b < k / 32; ++b) {
    ASSERT_EQ(0, std::memcmp(reference.data() + b * 34, got.data() + b * 34, 2)) << "scale of block " << b;
    float amax = 0.f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[size_t(b * 32 + j)]));
    const float id = amax != 0.f ? 127.f / amax : 0.f;
    for (int j = 0; j < 32; ++j) {
      const volatile float product = x[size_t(b * 32 + j)] * id;  // one rounding, as _mm256_mul_ps
      const int want = int(std::nearbyint(product));                // _MM_ROUND_NEAREST: ties to even
      ASSERT_EQ(int(int8_t(got[size_t(b * 34 + 2 + j)])), want) << "block " << b << " value " << j;
      unlike_reference += want != int(int8_t(reference[size_t(b * 34 + 2 + j)]));
    }
  }
  EXPECT_GT(unlike_reference, 16);  // beyond the tie block's 16 odd levels: some of the four blocks above
}

// The SIMD weight quantizer writes the table's bytes: ties (x / d = n + 0.5) away from zero, both
// signs, a zero block, values at the block maximum, tiny and large magnitudes, and 4096 random
// blocks (products x / d that round to a tie only after the float multiply).
TEST_P(EachTarget, ExactQ8QuantizerGivesTheReferenceBytes) {
  const int64_t k = 32 * 4096;
  std::vector<float> x = normals_over_binades(k, 32, 17);
  for (int64_t i = 0; i < 32; ++i) x[size_t(32 + i)] = float(i - 16) + 0.5f;  // every level a tie: d = 1
  x[32 + 31] = 127.f;
  for (int64_t i = 0; i < 32; ++i) x[size_t(64 + i)] = -(float(i) + 0.5f);  // negative ties
  x[64 + 31] = -127.f;
  for (int64_t i = 0; i < 32; ++i) x[size_t(96 + i)] = 0.f;  // a zero block
  const auto& q8 = foundry::quant::traits("q8_0");
  std::vector<uint8_t> want(static_cast<size_t>(k / 32 * 34)), got(want.size());
  q8.quantize(x.data(), want.data(), k);
  foundry::quant::quantize_row_q8_0_exact(x.data(), got.data(), k);
  for (int64_t b = 0; b < k / 32; ++b)
    ASSERT_EQ(0, std::memcmp(want.data() + b * 34, got.data() + b * 34, 34)) << "block " << b;
  EXPECT_EQ(int8_t(got[34 + 2]), -16);  // -15.5 away from zero
  EXPECT_EQ(int8_t(got[34 + 2 + 16]), 1);  // 0.5 away from zero
  EXPECT_EQ(int8_t(got[2 * 34 + 2]), -1);  // -0.5 away from zero
}

// The SIMD q8_K quantizer (decode's activation rows for the K-quants) writes the table's bytes:
// rows over 40 binades, a block whose largest magnitude occurs with both signs (the first wins),
// a block of exact .5 ties after scaling, and a zero block.
TEST_P(EachTarget, Q8KQuantizerGivesTheReferenceBytes) {
  const int64_t k = 256 * 48;
  std::vector<float> x = normals_over_binades(k, 256, 31);
  x[256 + 10] = -9.f, x[256 + 200] = 9.f;  // block 1: |max| twice, negative first
  for (int64_t i = 0; i < 256; ++i) x[size_t(512 + i)] = -127.f + float(i % 255) + (i % 2 ? 0.5f : 0.f);
  x[512] = -127.f;
  for (int64_t i = 0; i < 256; ++i) x[size_t(768 + i)] = 0.f;
  const auto& q8k = foundry::quant::traits("q8_K");
  std::vector<uint8_t> want(static_cast<size_t>(foundry::quant::quantized_bytes(q8k, 1, k))), got(want.size());
  q8k.quantize(x.data(), want.data(), k);
  foundry::quant::exact_quantizer(q8k)(x.data(), got.data(), k);
  for (int64_t b = 0; b < k / 256; ++b)
    ASSERT_EQ(0, std::memcmp(want.data() + b * 292, got.data() + b * 292, 292)) << "block " << b;
}

// The SIMD dequantizers give the table's floats bit for bit (and, to bf16, those floats rounded): quantized blocks of every magnitude,
// and random bytes (any scale, negative or subnormal ones included; NaN scales left out, whose
// payloads may differ), so every level and 6-bit scale / min pattern occurs.
TEST_P(EachTarget, FastDequantizersGiveTheReferenceFloats) {
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t k = 256 * 64;
  std::vector<float> x(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) x[size_t(i)] = nd(rng) * std::ldexp(1.f, int(i / 256 % 30) - 15) + (i % 7 == 0 ? 0.5f : 0.f);
  for (const char* name : {"q8_0", "q4_0", "q4_K", "nf4"}) {
    const auto& t = foundry::quant::traits(name);
    const int64_t bytes = foundry::quant::quantized_bytes(t, 1, k);
    std::vector<uint8_t> q(static_cast<size_t>(bytes));
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 0) {
        t.quantize(x.data(), q.data(), k);
      } else {
        for (auto& b : q) b = uint8_t(rng());
        // Scales with an all-ones exponent (inf / NaN) become ordinary values: fp16 ones (the
        // exponent's top bit in the high byte), nf4's float32 absmax (its top bit in byte 3).
        const int64_t block_bytes = bytes / (k / t.block_size);
        for (int64_t o = 0; o < bytes; o += block_bytes) {
          if (t.format == foundry::quant::BlockFormat::NF4) q[size_t(o + 3)] &= 0xBF;
          else
            for (int h = 0; h < (t.format == foundry::quant::BlockFormat::Q4_K ? 2 : 1); ++h) q[size_t(o + 2 * h + 1)] &= 0xBF;
        }
      }
      std::vector<float> want(static_cast<size_t>(k)), got(static_cast<size_t>(k));
      t.dequantize(q.data(), want.data(), k);
      foundry::quant::fast_dequantizer(t)(q.data(), got.data(), k);
      for (int64_t i = 0; i < k; ++i)
        ASSERT_EQ(0, std::memcmp(&want[size_t(i)], &got[size_t(i)], 4))
            << name << " pass " << pass << " value " << i << ": " << want[size_t(i)] << " vs " << got[size_t(i)];
      // Straight to bfloat16: the bits of rounding the reference floats.
      std::vector<uint16_t> want16(static_cast<size_t>(k)), got16(static_cast<size_t>(k));
      foundry::kernels::convert_f32_to_bf16(want.data(), want16.data(), k);
      foundry::quant::bf16_dequantizer(t)(q.data(), got16.data(), k);
      for (int64_t i = 0; i < k; ++i)
        ASSERT_EQ(want16[size_t(i)], got16[size_t(i)]) << name << " pass " << pass << " bf16 value " << i;
    }
  }
}

// gemv of every format against the table's scalar dots: q4_0 / q8_0 / q4_1 / q5_0 / q5_1 x q8_0,
// q4_K / q5_K / q6_K x q8_K, nf4 x q8_0 and the 16-bit floats (integer sums exact per block for the
// byte formats; nf4 sums float products, in another order). Whichever kernel this CPU dispatches
// to: ctest runs it again under FOUNDRY_MAX_ISA=avx2 and sse4 (the AVX2 and Highway kernels).
TEST_P(EachTarget, GemvOfEveryFormatMatchesScalarReference) {
  std::mt19937 rng(12);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t rows = 19, k = 256 * 3;
  std::vector<float> w(static_cast<size_t>(rows * k)), x(static_cast<size_t>(k));
  for (float& v : w) v = nd(rng) * 2.f + 0.3f;
  for (float& v : x) v = nd(rng);
  for (int64_t i = 0; i < 64; ++i) w[size_t(5 * k + i)] = 0.f;  // a zero sub-block and nf4 block
  for (const char* name : {"q4_0", "q8_0", "q4_K", "q5_K", "q6_K", "nf4", "bf16", "f16", "q4_1", "q5_0", "q5_1"}) {
    const auto& t = foundry::quant::traits(name);
    const auto [row_bytes, wq, xq] = quantize_rows(t, w, x, rows, k);
    std::vector<float> y(static_cast<size_t>(rows));
    foundry::quant::gemv(t, wq.data(), rows, k, xq.data(), y.data());
    for (int64_t r = 0; r < rows; ++r) {
      const float want = t.dot(wq.data() + r * row_bytes, xq.data(), k);
      float scale = 0.f;
      for (int64_t i = 0; i < k; ++i) scale += std::fabs(w[size_t(r * k + i)] * x[size_t(i)]);
      ASSERT_NEAR(y[size_t(r)], want, 1e-5f * scale) << name << " row " << r;
      if (std::string(name) == "q4_K") {  // gemv may run the x86 byte kernels: another sum order
        ASSERT_NEAR(foundry::quant::dot_q4_K_q8_K(wq.data() + r * row_bytes, xq.data(), k), want, 1e-5f * scale) << r;
      } else if (std::string(name) == "nf4") {
        ASSERT_EQ(foundry::quant::dot_nf4_q8_0(wq.data() + r * row_bytes, xq.data(), k), y[size_t(r)]) << r;
      }
    }
  }
}

// The 32-value block formats' gemv with block counts every kernel's step leaves a remainder of (the
// AVX2 q4_0 kernel takes blocks two at a time, the VNNI nibble formats four, q8_0 two, AVX-512 nf4
// two) and row counts that leave a partial group, against the scalar dots; run under
// FOUNDRY_MAX_ISA=avx2 / sse4 by ctest as well.
TEST_P(EachTarget, ByteFormatGemvHandlesEveryBlockCount) {
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t rows = 7;
  for (int64_t k : {int64_t(32), int64_t(64), int64_t(32 * 3), int64_t(32 * 6), int64_t(32 * 7), int64_t(32 * 10),
                    int64_t(32 * 25), int64_t(32 * 26)}) {
    std::vector<float> w(static_cast<size_t>(rows * k)), x(static_cast<size_t>(k));
    for (float& v : w) v = nd(rng);
    for (float& v : x) v = nd(rng);
    for (const char* name : {"q4_0", "q8_0", "nf4", "q4_1", "q5_0", "q5_1"}) {
      const auto& t = foundry::quant::traits(name);
      if (k % t.block_size) continue;
      const auto [row_bytes, wq, xq] = quantize_rows(t, w, x, rows, k);
      std::vector<float> y(static_cast<size_t>(rows));
      foundry::quant::gemv(t, wq.data(), rows, k, xq.data(), y.data());
      for (int64_t r = 0; r < rows; ++r) {
        float scale = 0.f;
        for (int64_t i = 0; i < k; ++i) scale += std::fabs(w[size_t(r * k + i)] * x[size_t(i)]);
        ASSERT_NEAR(y[size_t(r)], t.dot(wq.data() + r * row_bytes, xq.data(), k), 1e-5f * scale)
            << name << " k " << k << " row " << r;
      }
    }
  }
}

// gemv_many: several matrices sharing one activation row as one parallel job give each matrix's
// gemv result bit for bit, whatever the row counts (multiples of the kernels' 4-row groups or not,
// a matrix of no rows), and the same bits at 1, 2 and 3 threads; rows of 16-bit formats whose
// length ends in a partial vector are within rounding of the scalar dot.
TEST_P(EachTarget, GemvManyEqualsGemvPerMatrix) {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.f, 1.f);
  const std::vector<int64_t> row_counts = {37, 0, 8, 130, 3};
  foundry::testing::ThreadCountScope restore;
  for (const int64_t k : {int64_t(512), int64_t(203)})
  for (const char* name : {"q8_0", "q4_0", "q4_K", "q6_K", "nf4", "f16", "bf16", "q5_1"}) {
    const auto& t = foundry::quant::traits(name);
    if (k % t.block_size != 0) continue;
    std::vector<float> x(static_cast<size_t>(k));
    for (float& v : x) v = nd(rng);
    const auto& act = foundry::quant::traits(t.dot_format);
    const int64_t row_bytes = foundry::quant::quantized_bytes(t, 1, k);
    std::vector<uint8_t> xq(static_cast<size_t>(foundry::quant::quantized_bytes(act, 1, k)));
    act.quantize(x.data(), xq.data(), k);
    std::vector<std::vector<uint8_t>> ws;
    for (int64_t rows : row_counts) {
      std::vector<float> w(static_cast<size_t>(rows * k));
      for (float& v : w) v = nd(rng);
      ws.emplace_back(static_cast<size_t>(rows * row_bytes) + 1);
      for (int64_t r = 0; r < rows; ++r) t.quantize(w.data() + r * k, ws.back().data() + r * row_bytes, k);
    }
    std::vector<std::vector<float>> at_one_thread;
    for (int threads : {1, 2, 3}) {
      foundry::set_num_threads(threads);
      std::vector<std::vector<float>> one, many;
      std::vector<foundry::quant::GemvTarget> targets;
      for (size_t i = 0; i < ws.size(); ++i) {
        one.emplace_back(static_cast<size_t>(row_counts[i]) + 1, -1.f);
        many.emplace_back(static_cast<size_t>(row_counts[i]) + 1, -1.f);
        foundry::quant::gemv(t, ws[i].data(), row_counts[i], k, xq.data(), one.back().data());
      }
      for (size_t i = 0; i < ws.size(); ++i) targets.push_back({ws[i].data(), row_counts[i], many[i].data()});
      foundry::quant::gemv_many(t, k, xq.data(), targets);
      for (size_t i = 0; i < ws.size(); ++i) {
        for (int64_t r = 0; r < row_counts[i]; ++r) {
          ASSERT_EQ(many[i][size_t(r)], one[i][size_t(r)]) << name << " matrix " << i << " row " << r << " threads " << threads;
          const float want = t.dot(ws[i].data() + r * row_bytes, xq.data(), k);
          ASSERT_NEAR(many[i][size_t(r)], want, 1e-4f * (1.f + std::fabs(want)) * std::sqrt(float(k))) << name << " k " << k;
        }
        EXPECT_EQ(many[i].back(), -1.f) << name << ": wrote past matrix " << i;
      }
      // The same bits at every thread count (the 16-bit matrices of 128 KB and more run as four
      // quarters, in chunks that differ with the threads).
      if (threads == 1) at_one_thread = many;
      else ASSERT_EQ(many, at_one_thread) << name << " k " << k << " threads " << threads;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, EachTarget, ::testing::ValuesIn(foundry::compiled_simd_targets()), target_name);

// Row and column broadcasts over a matrix run as blocks of rows in one SIMD call
// (kernels/cpu/binary.cpp simd_rows): each element against the scalar formula, float and double,
// row counts that split unevenly over the threads, and a transposed operand (the run-per-row path).
TEST_P(EachTarget, BinaryRowBlocksMatchTheScalarFormula) {
  using namespace foundry;
  manual_seed(3);
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 19}, {1031, 64}, {5, 3000}}) {
      Tensor m = randn({rows, cols}).to(dt), row = randn({cols}).to(dt), col = randn({rows, 1}).to(dt);
      Tensor mt = randn({cols, rows}).to(dt).t();
      struct Case {
        Tensor got;
        Tensor a, b;
        std::function<double(double, double)> f;
        double tol;
      };
      std::vector<Case> cases = {
          {add(m, row), m, row, [](double x, double y) { return x + y; }, 0},
          {add(m, row, 2.5), m, row, [](double x, double y) { return x + 2.5 * y; }, 1e-6},
          {sub(col, m), col, m, [](double x, double y) { return x - y; }, 0},
          {mul(m, col), m, col, [](double x, double y) { return x * y; }, 0},
          {div(row, m), row, m, [](double x, double y) { return x / y; }, 0},
          {maximum(mt, row), mt, row, [](double x, double y) { return std::max(x, y); }, 0},
          {fmod(m, row), m, row, [](double x, double y) { return std::fmod(x, y); }, 1e-6}};
      for (size_t c = 0; c < cases.size(); ++c) {
        Tensor a = cases[c].a.expand({rows, cols}).to(DType::Float64).contiguous();
        Tensor b = cases[c].b.expand({rows, cols}).to(DType::Float64).contiguous();
        std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
        std::vector<double> got = cases[c].got.to(DType::Float64).contiguous().to_vector<double>();
        for (size_t i = 0; i < got.size(); ++i) {
          double want = cases[c].f(av[i], bv[i]);
          if (dt == DType::Float32) want = double(float(want));
          ASSERT_NEAR(got[i], want, cases[c].tol * (1 + std::fabs(want)) + (dt == DType::Float32 && cases[c].tol == 0 ? 0 : 1e-12))
              << dtype_name(dt) << " " << rows << "x" << cols << " case " << c << " at " << i;
        }
      }
    }
  }
}
