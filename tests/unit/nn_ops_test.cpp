// Tests of the neural-network ops (src/ops/nn_*.cpp): values against naive references, SIMD
// kernels against their scalar twins on every compiled target, error messages, gradcheck and
// gradgradcheck in float64, and the registry samples.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>

#include "foundry/autograd/autograd.h"
#include "foundry/core/parallel.h"
#include "foundry/ops/ops.h"
#include "foundry/ops/registry.h"
#include "../../src/kernels/cpu/attention.h"
#include "../../src/core/isa.h"
#include "../../src/kernels/cpu/conv.h"
#include "../../src/kernels/cpu/norm.h"
#include "../../src/kernels/cpu/softmax.h"

namespace foundry {
namespace {

using autograd::gradcheck;
using autograd::gradgradcheck;
using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

Tensor rnd(IntList shape, DType dt = DType::Float32, double lo = -2, double hi = 2, uint64_t seed = 1) {
  static std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(size_t(numel_of(shape)));
  for (double& x : v) x = u(rng);
  return tensor<double>(v, shape).to(dt);
}

Tensor leaf(Tensor t) {
  t = t.detach().clone();
  t.requires_grad_(true);
  return t;
}

Tensor sc(double v) { return scalar_tensor(v, DType::Float64); }

std::vector<double> vec(const Tensor& t) { return t.to_vector<double>(); }

void expect_close(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-6) {
  ASSERT_EQ(shape_str(a.sizes()), shape_str(b.sizes()));
  auto va = vec(a), vb = vec(b);
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(vb[i])) {
      EXPECT_TRUE(std::isnan(va[i])) << "at " << i;
      continue;
    }
    EXPECT_NEAR(va[i], vb[i], atol + rtol * std::abs(vb[i])) << "at " << i;
  }
}

template <typename E = Error>
void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error (expected one mentioning '" << needle << "')";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// softmax / log_softmax
// ---------------------------------------------------------------------------------------------

Tensor naive_softmax(const Tensor& x, int64_t dim, bool log) {
  Tensor xd = x.to(DType::Float64);
  Tensor m = amax(xd, {dim}, true);
  Tensor e = exp(xd - m);
  Tensor s = sum(e, dim, true);
  return log ? (xd - m) - foundry::log(s) : e / s;
}

TEST(NnSoftmax, MatchesNaiveAllDims) {
  for (bool log : {false, true}) {
    for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{7, 33}, {3, 5, 17}, {2, 40, 3}, {1000}}) {
      Tensor x = rnd(shape, DType::Float32, -6, 6);
      for (int64_t d = 0; d < x.dim(); ++d) {
        Tensor y = log ? log_softmax(x, d) : softmax(x, d);
        EXPECT_EQ(y.dtype(), DType::Float32);
        expect_close(y, naive_softmax(x, d, log), 2e-6, 1e-6);
        Tensor yd = log ? log_softmax(x.to(DType::Float64), d) : softmax(x.to(DType::Float64), d);
        expect_close(yd, naive_softmax(x, d, log), 1e-12, 1e-14);
      }
    }
  }
}

TEST(NnSoftmax, HalfTypesComputeInFloat) {
  Tensor x = rnd({4, 9}, DType::Float32, -3, 3);
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    Tensor y = softmax(x.to(dt), 1);
    EXPECT_EQ(y.dtype(), dt);
    expect_close(y.to(DType::Float32), naive_softmax(x.to(dt), 1, false), 1e-2, 1e-3);
  }
  Tensor y = softmax(x.to(DType::Float16), 1, DType::Float32);
  EXPECT_EQ(y.dtype(), DType::Float32);
}

TEST(NnSoftmax, SpecialValuesGiveNaNRows) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  Tensor x = tensor<double>({1, 2, 3, 1, nan, 3, -inf, -inf, -inf, 1, inf, 0, -inf, 0, 1}, {5, 3}).to(DType::Float32);
  Tensor y = softmax(x, 1);
  auto v = vec(y);
  EXPECT_FALSE(std::isnan(v[0]));
  for (int r = 1; r < 4; ++r)
    for (int c = 0; c < 3; ++c) EXPECT_TRUE(std::isnan(v[size_t(r * 3 + c)])) << r << "," << c;
  EXPECT_EQ(v[12], 0.0);  // -inf among finite values gives exactly 0
  // The column kernel follows the same rules.
  Tensor yt = softmax(x.t().contiguous(), 0).t();
  expect_close(yt, y);
  // NaN anywhere in a row (in full SIMD vectors too, for both kernels).
  for (int64_t n : {16, 64, 100, 2000}) {
    for (int64_t pos : {int64_t(0), n / 2, n - 1}) {
      Tensor t = zeros({3, n});
      t.index_put_({1, pos}, Scalar(nan));
      auto r = vec(softmax(t, 1));
      EXPECT_TRUE(std::isnan(r[size_t(n)])) << n << " " << pos;
      EXPECT_FALSE(std::isnan(r[0]));
      auto c = vec(softmax(t.t().contiguous(), 0).t());
      EXPECT_TRUE(std::isnan(c[size_t(n)])) << "columns " << n << " " << pos;
    }
  }
  // And the online form of long rows: NaN anywhere, +inf, all -inf; -inf chunks before finite ones.
  Tensor big = zeros({5, 20000}, DType::Float32);
  big.index_put_({1, 19999}, Scalar(nan));
  big.index_put_({2, 7}, Scalar(inf));
  big.index_put_({3}, Scalar(-inf));
  big.index_put_({4, Slice(0, 5000)}, Scalar(-inf));
  auto bv = vec(softmax(big, 1));
  EXPECT_NEAR(bv[0], 1.0 / 20000, 1e-10);
  for (int r = 1; r < 4; ++r) EXPECT_TRUE(std::isnan(bv[size_t(r * 20000 + 100)])) << r;
  EXPECT_EQ(bv[size_t(4 * 20000 + 10)], 0.0);
  EXPECT_NEAR(bv[size_t(4 * 20000 + 6000)], 1.0 / 15000, 1e-10);
}

TEST(NnSoftmax, SimdMatchesScalarTwinOnEveryTarget) {
  for (int64_t target : compiled_simd_targets()) {
    const std::string name = simd_target_name(target);
    restrict_simd_target(target);
    for (bool log : {false, true}) {
      for (auto [outer, D, inner] : {std::tuple<int64_t, int64_t, int64_t>{5, 37, 1}, {3, 130, 1}, {2, 9, 21}, {1, 3, 64},
                                     {2, 40000, 1}}) {  // the last: long rows (online form)
        Tensor x = rnd({outer, D, inner}, DType::Float32, -8, 8);
        Tensor g = rnd({outer, D, inner}, DType::Float32);
        Tensor y = kernels::softmax_forward(x, 1, log);
        Tensor ref = empty(x.sizes(), DType::Float32);
        kernels::softmax_ref(x.data<float>(), ref.data<float>(), outer, D, inner, log);
        expect_close(y, ref, 3e-6, 5e-7);  // log_softmax: ~1 ulp of log(sum) near 1
        Tensor gx = kernels::softmax_backward(g, y, 1, log);
        Tensor gref = empty(x.sizes(), DType::Float32);
        kernels::softmax_backward_ref(g.data<float>(), y.data<float>(), gref.data<float>(), outer, D, inner, log);
        expect_close(gx, gref, 1e-5, 2e-6);
      }
    }
  }
  restrict_simd_target(0);
}

TEST(NnSoftmax, Errors) {
  expect_error<IndexError>([] { softmax(rnd({2, 3}), 2); }, "dimension out of range");
  expect_error<TypeError>([] { softmax(ones({2, 3}, DType::Int64), 1); }, "softmax");
  expect_error<ValueError>(
      [] {
        ops::call1(ops::find_op("_softmax_backward_data"), {rnd({2, 3}), rnd({3, 2}), int64_t(1), DType::Float32});
      },
      "same shape");
}

TEST(NnSoftmax, GradcheckAndGradgradcheck) {
  for (bool log : {false, true}) {
    for (int64_t dim : {0, 1, 2}) {
      Tensor x = leaf(rnd({2, 3, 4}, DType::Float64));
      Fn f = [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{log ? log_softmax(in[0], dim) : softmax(in[0], dim)};
      };
      EXPECT_TRUE(gradcheck(f, {x}));
      EXPECT_TRUE(gradgradcheck(f, {x}));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// embedding / dropout
// ---------------------------------------------------------------------------------------------

TEST(NnEmbedding, ForwardBackwardAndPadding) {
  Tensor w = leaf(rnd({6, 3}, DType::Float64));
  Tensor idx = tensor<int64_t>({1, 4, 1, 0, 5, 1}, {2, 3});
  Tensor y = embedding(idx, w, 1);
  ASSERT_EQ(shape_str(y.sizes()), "[2, 3, 3]");
  auto wv = vec(w), yv = vec(y);
  std::vector<int64_t> iv = {1, 4, 1, 0, 5, 1};
  for (size_t i = 0; i < 6; ++i)
    for (size_t j = 0; j < 3; ++j) EXPECT_EQ(yv[i * 3 + j], wv[size_t(iv[i]) * 3 + j]);
  Tensor g = rnd({2, 3, 3}, DType::Float64);
  y.backward(g);
  auto gw = vec(w.grad()), gv = vec(g);
  for (size_t j = 0; j < 3; ++j) {
    EXPECT_EQ(gw[1 * 3 + j], 0.0);  // padding row
    EXPECT_NEAR(gw[0 * 3 + j], gv[3 * 3 + j], 1e-15);
    EXPECT_NEAR(gw[4 * 3 + j], gv[1 * 3 + j], 1e-15);
    EXPECT_EQ(gw[2 * 3 + j], 0.0);
  }
  // The padding row is read but gets no gradient, so finite differences only agree without it.
  Fn f = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{embedding(idx, in[0])}; };
  EXPECT_TRUE(gradcheck(f, {w}));
  EXPECT_TRUE(gradgradcheck(f, {w}));
  // scale_grad_by_freq: embedding_dense_backward is linear in grad_output; its gradient (the
  // adjoint, dividing by the counts) passes gradcheck (torch 1.13's double backward omits the division).
  Tensor go = leaf(rnd({2, 3, 3}, DType::Float64));
  Fn fb = [&](const std::vector<Tensor>& in) {
    return ops::call(ops::find_op("embedding_dense_backward"), {in[0], idx, int64_t(6), int64_t(1), true});
  };
  EXPECT_TRUE(gradcheck(fb, {go}));
  EXPECT_TRUE(gradgradcheck(fb, {go}));
  expect_error<IndexError>([&] { embedding(tensor<int64_t>({6}, {1}), w); }, "out of range");
  expect_error<TypeError>([&] { embedding(rnd({2}), w); }, "int64 or int32");
}

TEST(NnDropout, StatisticsAndDeterminism) {
  Tensor x = ones({200, 500}, DType::Float32);
  manual_seed(7);
  Tensor y = dropout(x, 0.3, true);
  auto v = vec(y);
  double kept = 0;
  for (double e : v) {
    if (e != 0) {
      EXPECT_NEAR(e, 1.0 / 0.7, 1e-6);
      kept += 1;
    }
  }
  EXPECT_NEAR(kept / double(v.size()), 0.7, 0.01);
  // Same seed, other thread count: same mask.
  int nt = get_num_threads();
  set_num_threads(1);
  manual_seed(7);
  Tensor y1 = dropout(x, 0.3, true);
  set_num_threads(nt);
  EXPECT_TRUE(equal(y, y1));
  // Gradient: grad * mask / (1 - p).
  Tensor xl = leaf(rnd({50, 40}, DType::Float64));
  Tensor z = dropout(xl, 0.5, true);
  z.backward(ones_like(z));
  auto zv = vec(z), gv = vec(xl.grad());
  for (size_t i = 0; i < zv.size(); ++i) EXPECT_EQ(gv[i], zv[i] != 0 ? 2.0 : 0.0);
  EXPECT_TRUE(dropout(x, 0.5, false).is_same(x));
  expect_error<ValueError>([&] { dropout(x, 1.5); }, "between 0 and 1");
  Generator gen(123);
  Tensor a = dropout(x, 0.5, true, &gen);
  gen.manual_seed(123);
  Tensor b = dropout(x, 0.5, true, &gen);
  EXPECT_TRUE(equal(a, b));
}

// ---------------------------------------------------------------------------------------------
// layer_norm / rms_norm / group_norm / batch_norm
// ---------------------------------------------------------------------------------------------

Tensor naive_layer_norm(const Tensor& x, int64_t k, const Tensor& w, const Tensor& b, double eps) {
  Tensor xd = x.to(DType::Float64);
  std::vector<int64_t> dims;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) dims.push_back(d);
  Tensor m = mean(xd, dims, true);
  Tensor v = mean((xd - m) * (xd - m), dims, true);
  Tensor y = (xd - m) / sqrt(v + sc(eps));
  if (w.defined()) y = y * w.to(DType::Float64);
  if (b.defined()) y = y + b.to(DType::Float64);
  return y;
}

TEST(NnNorm, LayerNormMatchesNaive) {
  Tensor x = rnd({6, 50}, DType::Float32, -3, 5), w = rnd({50}), b = rnd({50});
  expect_close(layer_norm(x, {50}, w, b), naive_layer_norm(x, 1, w, b, 1e-5), 1e-5, 2e-6);
  expect_close(layer_norm(x, {50}), naive_layer_norm(x, 1, {}, {}, 1e-5), 1e-5, 2e-6);
  Tensor x3 = rnd({2, 3, 4}, DType::Float64);
  expect_close(layer_norm(x3, {3, 4}, {}, {}, 1e-3), naive_layer_norm(x3, 2, {}, {}, 1e-3), 1e-12, 1e-12);
  Tensor xb = x.to(DType::BFloat16);
  Tensor yb = layer_norm(xb, {50}, w.to(DType::BFloat16), b.to(DType::BFloat16));
  EXPECT_EQ(yb.dtype(), DType::BFloat16);
  expect_close(yb, naive_layer_norm(xb, 1, w.to(DType::BFloat16), b.to(DType::BFloat16), 1e-5), 1e-2, 2e-2);
  auto outs = ops::call(ops::find_op("native_layer_norm"), {x3, std::vector<int64_t>{4}, ops::Value(), ops::Value(), 1e-5});
  EXPECT_EQ(shape_str(outs[1].sizes()), "[2, 3, 1]");
  EXPECT_EQ(shape_str(outs[2].sizes()), "[2, 3, 1]");
}

TEST(NnNorm, SimdMatchesScalarTwinOnEveryTarget) {
  for (int64_t target : compiled_simd_targets()) {
    const std::string name = simd_target_name(target);
    restrict_simd_target(target);
    for (int64_t n : {1, 7, 64, 133}) {
      SCOPED_TRACE(name + " n=" + std::to_string(n));
      const int64_t rows = 5;
      Tensor x = rnd({rows, n}, DType::Float32, -3, 4), w = rnd({n}), b = rnd({n}), g = rnd({rows, n});
      Tensor y = empty({rows, n}), m = empty({rows}), r = empty({rows});
      Tensor y2 = empty({rows, n}), m2 = empty({rows}), r2 = empty({rows});
      kernels::layer_norm_rows_f32(x.data<float>(), w.data<float>(), b.data<float>(), y.data<float>(), m.data<float>(),
                                   r.data<float>(), rows, n, 1e-5f);
      kernels::layer_norm_ref<float>(x.data<float>(), w.data<float>(), b.data<float>(), y2.data<float>(),
                                     m2.data<float>(), r2.data<float>(), rows, n, 1e-5f);
      // n = 1: var = 0 and x * rstd - mean * rstd cancels (PyTorch's formula has the same error).
      expect_close(y, y2, 1e-5, n == 1 ? 1e-4 : 1e-5);
      expect_close(r, r2, 1e-5, 1e-6);
      Tensor gx = empty({rows, n}), gx2 = empty({rows, n});
      Tensor gw = zeros({n}), gb = zeros({n}), gw2 = empty({n}), gb2 = empty({n});
      kernels::layer_norm_backward_rows_f32(g.data<float>(), x.data<float>(), w.data<float>(), gx.data<float>(),
                                            gw.data<float>(), gb.data<float>(), rows, n, 1e-5f);
      kernels::layer_norm_backward_ref<float>(g.data<float>(), x.data<float>(), w.data<float>(), gx2.data<float>(),
                                              gw2.data<float>(), gb2.data<float>(), rows, n, 1e-5f);
      expect_close(gx, gx2, 1e-4, 1e-4);
      expect_close(gw, gw2, 1e-5, 1e-5);
      expect_close(gb, gb2, 1e-5, 1e-5);
      kernels::rms_norm_rows_f32(x.data<float>(), w.data<float>(), y.data<float>(), r.data<float>(), rows, n, 1e-6f);
      kernels::rms_norm_ref<float>(x.data<float>(), w.data<float>(), y2.data<float>(), r2.data<float>(), rows, n, 1e-6f);
      expect_close(y, y2, 1e-5, 1e-5);
      gw = zeros({n});
      kernels::rms_norm_backward_rows_f32(g.data<float>(), x.data<float>(), w.data<float>(), gx.data<float>(),
                                          gw.data<float>(), rows, n, 1e-6f);
      kernels::rms_norm_backward_ref<float>(g.data<float>(), x.data<float>(), w.data<float>(), gx2.data<float>(),
                                            gw2.data<float>(), rows, n, 1e-6f);
      expect_close(gx, gx2, 1e-4, 1e-4);
      expect_close(gw, gw2, 1e-5, 1e-5);
    }
  }
  restrict_simd_target(0);
}

TEST(NnNorm, RmsNormMatchesFormulaAndDefaultEps) {
  Tensor x = rnd({4, 9}, DType::Float64), w = rnd({9}, DType::Float64);
  Tensor ref = x * rsqrt(mean(x * x, -1, true) + sc(1e-6)) * w;
  expect_close(rms_norm(x, {9}, w, 1e-6), ref, 1e-12, 1e-12);
  Tensor tiny = full({2, 3}, 1e-9, DType::Float32);
  // eps defaults to float epsilon for float32: 1e-9 / sqrt(1e-18 + 1.19e-7).
  expect_close(rms_norm(tiny, {3}), full({2, 3}, 1e-9 / std::sqrt(1e-18 + 1.1920928955078125e-07)), 1e-5, 0);
}

TEST(NnNorm, GroupNormMatchesNaive) {
  Tensor x = rnd({2, 6, 5}, DType::Float64), w = rnd({6}, DType::Float64), b = rnd({6}, DType::Float64);
  Tensor y = group_norm(x, 3, w, b);
  Tensor xg = x.reshape({2, 3, 10});
  Tensor ref = naive_layer_norm(xg, 1, {}, {}, 1e-5).reshape({2, 6, 5}) * w.reshape({6, 1}) + b.reshape({6, 1});
  expect_close(y, ref, 1e-12, 1e-12);
  expect_error<ValueError>([&] { group_norm(x, 4); }, "divisible by num_groups");
}

TEST(NnNorm, BatchNormTrainingUpdatesRunningStats) {
  Tensor x = rnd({4, 3, 5}, DType::Float64);
  Tensor rm = zeros({3}, DType::Float64), rv = ones({3}, DType::Float64);
  Tensor w = rnd({3}, DType::Float64), b = rnd({3}, DType::Float64);
  Tensor y = batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5);
  Tensor m = mean(x, {0, 2}, true), v = var(x, {0, 2}, 0, true), vu = var(x, {0, 2}, 1, false);
  expect_close(y, (x - m) / sqrt(v + sc(1e-5)) * w.reshape({3, 1}) + b.reshape({3, 1}), 1e-12, 1e-12);
  expect_close(rm, m.reshape({3}) * sc(0.1), 1e-12, 1e-14);
  expect_close(rv, sc(0.9) + vu * sc(0.1), 1e-12, 1e-14);
  Tensor ye = batch_norm(x, rm, rv, w, b, false);
  expect_close(ye, (x - rm.reshape({3, 1})) / sqrt(rv.reshape({3, 1}) + sc(1e-5)) * w.reshape({3, 1}) +
                       b.reshape({3, 1}), 1e-12, 1e-12);
  expect_error<ValueError>([&] { batch_norm(x, {}, {}, {}, {}, false); }, "evaluation mode");
  expect_error<ValueError>([&] { batch_norm(rnd({1, 3}), {}, {}, {}, {}, true); }, "more than 1 value per channel");
  expect_error<ValueError>([&] { batch_norm(x, zeros({4}), ones({4})); }, "running_mean should contain 3");
}

TEST(NnNorm, Errors) {
  expect_error<ValueError>([] { layer_norm(rnd({2, 3}), {4}); }, "expected input with shape [*, 4]");
  expect_error<ValueError>([] { layer_norm(rnd({2, 3}), {3}, rnd({4})); }, "weight of shape [4]");
  expect_error<TypeError>([] { layer_norm(ones({2, 3}, DType::Int64), {3}); }, "floating-point");
}

TEST(NnNorm, GradcheckAndGradgradcheck) {
  Tensor x = leaf(rnd({3, 4}, DType::Float64)), w = leaf(rnd({4}, DType::Float64)), b = leaf(rnd({4}, DType::Float64));
  Fn ln = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{layer_norm(in[0], {4}, in[1], in[2])}; };
  EXPECT_TRUE(gradcheck(ln, {x, w, b}));
  EXPECT_TRUE(gradgradcheck(ln, {x, w, b}));
  // Third order: the fused backward's own gradient recomputes mean/rstd from the input.
  Fn ln2 = [](const std::vector<Tensor>& in) {
    Tensor y = layer_norm(in[0], {4}, in[1]);
    auto g = autograd::grad({(y * y * y).sum()}, {in[0]}, {}, true, true);
    return std::vector<Tensor>{g[0]};
  };
  EXPECT_TRUE(gradgradcheck(ln2, {x, w}));
  // mean and rstd are differentiable outputs too.
  Fn lnall = [](const std::vector<Tensor>& in) {
    return ops::call(ops::find_op("native_layer_norm"), {in[0], std::vector<int64_t>{4}, in[1], ops::Value(), 1e-5});
  };
  EXPECT_TRUE(gradcheck(lnall, {x, w}));
  EXPECT_TRUE(gradgradcheck(lnall, {x, w}));
  Fn rms = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{rms_norm(in[0], {4}, in[1], 1e-5)}; };
  EXPECT_TRUE(gradcheck(rms, {x, w}));
  EXPECT_TRUE(gradgradcheck(rms, {x, w}));
  Tensor x4 = leaf(rnd({2, 4, 3}, DType::Float64));
  Fn gn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{group_norm(in[0], 2, in[1], in[2])}; };
  EXPECT_TRUE(gradcheck(gn, {x4, w, b}));
  EXPECT_TRUE(gradgradcheck(gn, {x4, w, b}));
  Tensor x3 = leaf(rnd({3, 4, 2}, DType::Float64));
  Fn bn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{batch_norm(in[0], {}, {}, in[1], in[2], true)};
  };
  EXPECT_TRUE(gradcheck(bn, {x3, w, b}));
  EXPECT_TRUE(gradgradcheck(bn, {x3, w, b}));
}

// ---------------------------------------------------------------------------------------------
// convolution
// ---------------------------------------------------------------------------------------------

// Direct definition: out[n, o, i, j] = b[o] + sum x[n, g*Cg + c, i*s - p + ki*d, j*s - p + kj*d] w[o, c, ki, kj].
Tensor naive_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t s, int64_t p, int64_t d, int64_t groups) {
  auto xv = vec(x), wv = vec(w);
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), Wd = x.size(3), O = w.size(0), KH = w.size(2),
                KW = w.size(3), Cg = C / groups, Og = O / groups;
  const int64_t OH = (H + 2 * p - d * (KH - 1) - 1) / s + 1, OW = (Wd + 2 * p - d * (KW - 1) - 1) / s + 1;
  std::vector<double> out(size_t(N * O * OH * OW), 0.0);
  auto bv = b.defined() ? vec(b) : std::vector<double>(size_t(O), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double acc = bv[size_t(o)];
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t ki = 0; ki < KH; ++ki)
              for (int64_t kj = 0; kj < KW; ++kj) {
                int64_t ih = i * s - p + ki * d, iw = j * s - p + kj * d;
                if (ih < 0 || ih >= H || iw < 0 || iw >= Wd) continue;
                acc += xv[size_t(((n * C + (o / Og) * Cg + c) * H + ih) * Wd + iw)] *
                       wv[size_t(((o * Cg + c) * KH + ki) * KW + kj)];
              }
          out[size_t(((n * O + o) * OH + i) * OW + j)] = acc;
        }
  return tensor<double>(out, {N, O, OH, OW});
}

TEST(NnConv, Conv2dMatchesNaiveDefinition) {
  struct Case { std::vector<int64_t> x, w; int64_t s, p, d, g; };
  for (const Case& c : std::vector<Case>{{{2, 3, 7, 6}, {4, 3, 3, 3}, 1, 1, 1, 1},
                                         {{1, 4, 9, 8}, {6, 2, 3, 2}, 2, 1, 2, 2},
                                         {{2, 8, 6, 6}, {8, 1, 3, 3}, 2, 0, 1, 8},
                                         {{1, 16, 12, 12}, {32, 16, 1, 1}, 1, 0, 1, 1}}) {
    Tensor x = rnd(c.x), w = rnd(c.w), b = rnd({c.w[0]});
    Tensor ref = naive_conv2d(x, w, b, c.s, c.p, c.d, c.g);
    expect_close(conv2d(x, w, b, {c.s, c.s}, {c.p, c.p}, {c.d, c.d}, c.g), ref, 1e-4, 1e-4);
    expect_close(conv2d(x.to(DType::Float64), w.to(DType::Float64), b.to(DType::Float64), {c.s}, {c.p}, {c.d}, c.g),
                 ref, 1e-12, 1e-12);
  }
  // 1-d: out[n, o, j] = sum x[n, c, 2j - 1 + 2k] w[o, c, k].
  Tensor x1 = rnd({2, 3, 11}), w1 = rnd({5, 3, 3});
  auto xv = vec(x1), wv = vec(w1);
  std::vector<double> ref1;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t o = 0; o < 5; ++o)
      for (int64_t j = 0; j < 5; ++j) {
        double acc = 0;
        for (int64_t c = 0; c < 3; ++c)
          for (int64_t k = 0; k < 3; ++k) {
            int64_t i = 2 * j - 1 + 2 * k;
            if (i >= 0 && i < 11) acc += xv[size_t((n * 3 + c) * 11 + i)] * wv[size_t((o * 3 + c) * 3 + k)];
          }
        ref1.push_back(acc);
      }
  expect_close(conv1d(x1, w1, {}, {2}, {1}, {2}), tensor<double>(ref1, {2, 5, 5}), 1e-5, 1e-5);
}

// A 3x3, stride-1 convolution with 98 output tiles of 4x4 runs Winograd F(4x4, 3x3) on AVX-512 CPUs
// (oneDNN's jit_wino_4x3), within float32 rounding of the direct definition, and the direct kernel
// when set_conv_winograd(false) says so.
TEST(NnConv, WinogradForwardMatchesNaiveDefinition) {
  Tensor x = rnd({2, 32, 28, 28}), w = rnd({32, 32, 3, 3}), b = rnd({32});
  const Tensor ref = naive_conv2d(x, w, b, 1, 1, 1, 1);
  kernels::ConvGeometry g;
  g.N = 2, g.C = 32, g.H = g.W = 28, g.OC = 32, g.KH = g.KW = 3, g.OH = g.OW = 28, g.ph = g.pw = 1;
  const bool avx512 = __builtin_cpu_supports("avx512f") && max_isa() == MaxIsa::Native;
  const std::string impl = kernels::conv_forward_implementation(g, true);
  EXPECT_EQ(impl.find("wino") != std::string::npos, avx512) << impl;
  const Tensor y = conv2d(x, w, b, {1, 1}, {1, 1});
  expect_close(y, ref, 1e-4, 1e-4);
  kernels::set_conv_winograd(false);
  EXPECT_EQ(kernels::conv_forward_implementation(g, true).find("wino"), std::string::npos);
  const Tensor direct = conv2d(x, w, b, {1, 1}, {1, 1});
  kernels::set_conv_winograd(true);
  expect_close(direct, ref, 1e-4, 1e-4);
  if (avx512) EXPECT_FALSE(equal(y, direct));  // another kernel ran (its sums round differently)
}

TEST(NnConv, OneDnnMatchesReferenceLoopsForEveryPass) {
  struct Case { std::vector<int64_t> x, w, stride, padding, dilation, output_padding; int64_t g; bool t; };
  for (const Case& c : std::vector<Case>{{{2, 3, 7, 6}, {4, 3, 3, 2}, {2, 1}, {1, 0}, {1, 2}, {0, 0}, 1, false},
                                         {{1, 6, 5, 5}, {6, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, 6, false},
                                         {{2, 4, 4, 3}, {4, 3, 3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 0}, 2, true},
                                         {{1, 3, 9}, {3, 2, 4}, {3}, {2}, {1}, {1}, 1, true}}) {
    kernels::ConvArgs a{c.stride, c.padding, c.dilation, c.output_padding, c.g, c.t};
    Tensor x = rnd(c.x), w = rnd(c.w), b = rnd({c.t ? c.w[1] * c.g : c.w[0]});
    kernels::set_conv_use_reference(false);
    Tensor y = kernels::conv_forward(x, w, b, a);
    Tensor gy = rnd(y.sizes());
    Tensor dw = kernels::conv_backward_weight(gy, x, w.sizes(), a);
    kernels::set_conv_use_reference(true);
    expect_close(y, kernels::conv_forward(x, w, b, a), 1e-5, 1e-5);
    expect_close(dw, kernels::conv_backward_weight(gy, x, w.sizes(), a), 1e-5, 1e-4);
    kernels::set_conv_use_reference(false);
  }
}

TEST(NnConv, ErrorsNameOpAndShapes) {
  expect_error<ValueError>([] { conv2d(rnd({1, 3, 5, 5}), rnd({4, 2, 3, 3})); }, "expected input[1, 3, 5, 5] to have 2 channels");
  expect_error<ValueError>([] { conv2d(rnd({1, 3, 2, 2}), rnd({4, 3, 3, 3})); }, "smaller than the (dilated) kernel");
  expect_error<ValueError>([] { conv2d(rnd({1, 3, 5, 5}), rnd({4, 3, 3, 3}), rnd({3})); }, "bias of shape [4]");
  expect_error<ValueError>([] { conv2d(rnd({1, 4, 5, 5}), rnd({3, 2, 3, 3}), {}, {1}, {0}, {1}, 2); }, "divisible by 2");
  expect_error<TypeError>([] { conv2d(rnd({1, 3, 5, 5}), rnd({4, 3, 3, 3}, DType::Float64)); }, "should be the same");
  expect_error<ValueError>([] { conv_transpose2d(rnd({1, 3, 5, 5}), rnd({3, 2, 3, 3}), {}, {1}, {0}, {1}); },
                           "output padding must be smaller");
  expect_error<ValueError>([] { conv2d(rnd({3, 5}), rnd({4, 3, 3, 3})); }, "conv2d: expected a 4-D (batched) or 3-D");
}

TEST(NnConv, GradcheckAndGradgradcheck) {
  Tensor x = leaf(rnd({2, 4, 5, 4}, DType::Float64)), w = leaf(rnd({4, 2, 3, 2}, DType::Float64)),
         b = leaf(rnd({4}, DType::Float64));
  Fn f = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{conv2d(in[0], in[1], in[2], {2, 1}, {1, 1}, {1, 2}, 2)};
  };
  EXPECT_TRUE(gradcheck(f, {x, w, b}));
  EXPECT_TRUE(gradgradcheck(f, {x, w, b}));
  Tensor xt = leaf(rnd({1, 4, 3, 3}, DType::Float64)), wt = leaf(rnd({4, 1, 2, 3}, DType::Float64));
  Fn ft = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{conv_transpose2d(in[0], in[1], {}, {2, 2}, {0, 1}, {1, 0}, 2, {1, 1})};
  };
  EXPECT_TRUE(gradcheck(ft, {xt, wt}));
  EXPECT_TRUE(gradgradcheck(ft, {xt, wt}));
}

// ---------------------------------------------------------------------------------------------
// pooling and upsampling
// ---------------------------------------------------------------------------------------------

TEST(NnPool, MaxPoolValuesIndicesAndNaN) {
  // 1 x 1 x 4 x 4 input 0..15; 2x2 windows, stride 2.
  std::vector<double> v(16);
  std::iota(v.begin(), v.end(), 0.0);
  v[5] = std::nan("");
  Tensor x = tensor<double>(v, {1, 1, 4, 4});
  auto outs = ops::call(ops::find_op("max_pool2d_with_indices"), {x, std::vector<int64_t>{2, 2}});
  auto y = vec(outs[0]);
  auto idx = outs[1].to_vector<int64_t>();
  EXPECT_TRUE(std::isnan(y[0]));  // NaN wins
  EXPECT_EQ(idx[0], 5);
  EXPECT_EQ(y[1], 7.0);
  EXPECT_EQ(idx[1], 7);
  EXPECT_EQ(y[3], 15.0);
  // padding with ceil_mode: windows start inside the input.
  Tensor z = max_pool2d(tensor<double>({1, 2, 3, 4, 5}, {1, 1, 1, 5}), {1, 2}, {1, 2}, {0, 1}, {1, 1}, true);
  EXPECT_EQ(vec(z), (std::vector<double>{1, 3, 5}));
  Tensor m1 = max_pool1d(tensor<double>({3, 1, 4, 1, 5, 9, 2}, {1, 1, 7}), {3}, {2});
  EXPECT_EQ(vec(m1), (std::vector<double>{4, 5, 9}));
  expect_error<ValueError>([] { max_pool2d(rnd({1, 1, 4, 4}), {2, 2}, {1, 1}, {2, 2}); }, "pad should be smaller");
  expect_error<ValueError>([] { max_pool2d(rnd({4, 4}), {2, 2}); }, "3-D (unbatched) or 4-D");
}

TEST(NnPool, AvgPoolDivisorRules) {
  Tensor x = ones({1, 1, 3, 3}, DType::Float64);
  // 2x2 windows, stride 2, padding 1: corners see 1 real element of a 4-element window.
  EXPECT_EQ(vec(avg_pool2d(x, {2, 2}, {2, 2}, {1, 1}, false, true)), (std::vector<double>{0.25, 0.5, 0.5, 1.0}));
  EXPECT_EQ(vec(avg_pool2d(x, {2, 2}, {2, 2}, {1, 1}, false, false)), (std::vector<double>{1, 1, 1, 1}));
  EXPECT_EQ(vec(avg_pool2d(x, {2, 2}, {2, 2}, {1, 1}, false, true, 2)), (std::vector<double>{0.5, 1, 1, 2}));
  Tensor a = adaptive_avg_pool2d(tensor<double>({1, 2, 3, 4, 5}, {1, 1, 1, 5}), {1, 3});
  // windows [0, 2), [1, 4), [3, 5)
  expect_close(a, tensor<double>({1.5, 3.0, 4.5}, {1, 1, 1, 3}), 1e-15, 0);
}

TEST(NnPool, InterpolateIndexFormulas) {
  Tensor x = tensor<double>({0, 1, 2}, {1, 1, 1, 3});
  // nearest: src = floor(dst * in / out) -> 5 outputs from 3: 0 0 1 1 2
  EXPECT_EQ(vec(interpolate(x, std::vector<int64_t>{1, 5})), (std::vector<double>{0, 0, 1, 1, 2}));
  // bilinear, align_corners: src = dst * (in - 1) / (out - 1)
  expect_close(interpolate(x, std::vector<int64_t>{1, 5}, std::nullopt, "bilinear", true),
               tensor<double>({0, 0.5, 1, 1.5, 2}, {1, 1, 1, 5}), 1e-15, 1e-15);
  // bilinear, half-pixel centres: src = max((dst + 0.5) * 3 / 5 - 0.5, 0)
  expect_close(interpolate(x, std::vector<int64_t>{1, 5}, std::nullopt, "bilinear", false),
               tensor<double>({0, 0.4, 1, 1.6, 2}, {1, 1, 1, 5}), 1e-12, 1e-12);
  // scale_factor: output floor(in * s), index scale 1 / s.
  Tensor y = interpolate(ones({1, 1, 3, 3}), std::nullopt, std::vector<double>{1.5, 1.5});
  EXPECT_EQ(shape_str(y.sizes()), "[1, 1, 4, 4]");
  expect_error<ValueError>([&] { interpolate(x, std::vector<int64_t>{2, 2}, std::nullopt, "nearest", true); },
                           "align_corners option can only be set");
  expect_error<NotImplementedError>([&] { interpolate(x, std::vector<int64_t>{2, 2}, std::nullopt, "bicubic"); },
                                    "not supported");
}

TEST(NnPool, GradcheckAndGradgradcheck) {
  Tensor x = leaf(rnd({1, 2, 5, 6}, DType::Float64));
  std::vector<Fn> fns = {
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{max_pool2d(in[0], {3, 2}, {2, 2}, {1, 1})}; },
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{avg_pool2d(in[0], {3, 3}, {2, 1}, {1, 1}, true, false)};
      },
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{adaptive_avg_pool2d(in[0], {3, 4})}; },
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{interpolate(in[0], std::vector<int64_t>{7, 9}, std::nullopt, "bilinear", false)};
      },
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{interpolate(in[0], std::nullopt, std::vector<double>{1.5, 2.0})};
      },
  };
  for (const Fn& f : fns) {
    EXPECT_TRUE(gradcheck(f, {x}));
    EXPECT_TRUE(gradgradcheck(f, {x}));
  }
}

// ---------------------------------------------------------------------------------------------
// scaled_dot_product_attention
// ---------------------------------------------------------------------------------------------

Tensor naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal) {
  Tensor qd = q.to(DType::Float64), kd = k.to(DType::Float64), vd = v.to(DType::Float64);
  Tensor s = matmul(qd, kd.transpose(-2, -1)) * sc(1.0 / std::sqrt(double(q.size(-1))));
  if (mask.defined()) s = s + mask.to(DType::Float64);
  if (causal) s = where(tril(ones({q.size(-2), k.size(-2)}, DType::Bool)), s, sc(-INFINITY));
  return matmul(softmax(s, -1), vd);
}

TEST(NnAttention, MatchesMathFormula) {
  struct Case { std::vector<int64_t> q, k, v; bool causal, mask; };
  for (const Case& c : std::vector<Case>{{{2, 3, 70, 16}, {2, 3, 70, 16}, {2, 3, 70, 16}, true, false},
                                         {{1, 2, 65, 12}, {1, 2, 130, 12}, {1, 2, 130, 20}, false, true},
                                         {{1, 129, 64}, {1, 129, 64}, {1, 129, 64}, true, false},
                                         {{3, 5, 7}, {3, 9, 7}, {3, 9, 3}, false, false}}) {
    Tensor q = rnd(c.q), k = rnd(c.k), v = rnd(c.v);
    Tensor mask = c.mask ? rnd({c.q[c.q.size() - 2], c.k[c.k.size() - 2]}, DType::Float32, -3, 1) : Tensor();
    Tensor y = scaled_dot_product_attention(q, k, v, mask, 0.0, c.causal);
    expect_close(y, naive_attention(q, k, v, mask, c.causal), 1e-4, 2e-5);
  }
  // Boolean masks keep True; a row with every key masked out is NaN (as the math formula).
  Tensor q = rnd({1, 2, 4}), k = rnd({1, 3, 4}), v = rnd({1, 3, 2});
  Tensor bm = tensor<int64_t>({1, 0, 1, 0, 0, 0}, {2, 3}).to(DType::Bool);
  Tensor y = scaled_dot_product_attention(q, k, v, bm);
  auto yv = vec(y);
  Tensor add = tensor<double>({0, -INFINITY, 0}, {1, 3}).to(DType::Float32);
  expect_close(y.narrow(1, 0, 1), naive_attention(q.narrow(1, 0, 1), k, v, add, false), 1e-5, 1e-6);
  EXPECT_TRUE(std::isnan(yv[2]) && std::isnan(yv[3]));
  // A NaN score poisons its query row (also inside full SIMD vectors).
  Tensor qn = rnd({1, 3, 8}), kn = rnd({1, 40, 8}), vn = rnd({1, 40, 4});
  kn.index_put_({0, 20, 3}, Scalar(NAN));
  auto r = vec(scaled_dot_product_attention(qn, kn, vn));
  for (double e : r) EXPECT_TRUE(std::isnan(e));
}

TEST(NnAttention, SimdKernelsMatchReferenceTwin) {
  for (int64_t target : compiled_simd_targets()) {
    const std::string name = simd_target_name(target);
    restrict_simd_target(target);
    for (bool causal : {false, true}) {
      Tensor q = rnd({2, 67, 9}), k = rnd({2, 131, 9}), v = rnd({2, 131, 5}), mask = rnd({67, 131}, DType::Float32, -2, 0);
      if (causal) k = rnd({2, 67, 9}), v = rnd({2, 67, 5}), mask = Tensor();
      kernels::set_attention_use_reference(false);
      auto f = kernels::attention_forward(q, k, v, mask, causal, 0.37);
      Tensor dout = rnd(f[0].sizes());
      auto b = kernels::attention_backward(dout, q, k, v, f[0], f[1], f[1] * sc(0.3), mask, causal, 0.37);
      kernels::set_attention_use_reference(true);
      auto fr = kernels::attention_forward(q, k, v, mask, causal, 0.37);
      auto br = kernels::attention_backward(dout, q, k, v, fr[0], fr[1], fr[1] * sc(0.3), mask, causal, 0.37);
      kernels::set_attention_use_reference(false);
      SCOPED_TRACE(name + (causal ? " causal" : " masked"));
      expect_close(f[0], fr[0], 1e-5, 1e-5);
      expect_close(f[1], fr[1], 1e-5, 1e-5);
      for (int i = 0; i < 3; ++i) expect_close(b[size_t(i)], br[size_t(i)], 1e-4, 1e-4);
    }
  }
  restrict_simd_target(0);
}

TEST(NnAttention, BackwardIsIndependentOfThreadCount) {
  // One thread runs one task per batch-head; two threads with a single batch-head split key and
  // query blocks instead: the sums are ordered the same way, so the results are identical.
  for (int64_t bh : {1, 3}) {
    Tensor q = rnd({bh, 150, 8}), k = rnd({bh, 150, 8}), v = rnd({bh, 150, 6}), g = rnd({bh, 150, 6});
    std::vector<std::vector<Tensor>> r;
    const int nt = get_num_threads();
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      auto f = kernels::attention_forward(q, k, v, {}, true, 0.3);
      r.push_back(kernels::attention_backward(g, q, k, v, f[0], f[1], {}, {}, true, 0.3));
    }
    set_num_threads(nt);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(equal(r[0][size_t(i)], r[1][size_t(i)])) << "bh " << bh << " grad " << i;
  }
}

TEST(NnAttention, BackwardMatchesMathFormulaGradients) {
  // The fused backward (no graph) and the ops formula (create_graph) against autograd of the
  // math formula, on a multi-tile causal problem.
  Tensor q0 = rnd({1, 2, 70, 8}, DType::Float64), k0 = rnd({1, 2, 70, 8}, DType::Float64),
         v0 = rnd({1, 2, 70, 6}, DType::Float64), g = rnd({1, 2, 70, 6}, DType::Float64);
  auto grads = [&](bool fused, bool create_graph) {
    Tensor q = leaf(q0), k = leaf(k0), v = leaf(v0);
    Tensor y = fused ? scaled_dot_product_attention(q, k, v, {}, 0.0, true) : naive_attention(q, k, v, {}, true);
    return autograd::grad({y}, {q, k, v}, {g}, true, create_graph);
  };
  auto ref = grads(false, false);
  for (bool cg : {false, true}) {
    auto got = grads(true, cg);
    for (int i = 0; i < 3; ++i) expect_close(got[size_t(i)], ref[size_t(i)], 1e-10, 1e-12);
  }
}

TEST(NnAttention, GradcheckAndGradgradcheck) {
  Tensor q = leaf(rnd({2, 3, 4}, DType::Float64)), k = leaf(rnd({2, 5, 4}, DType::Float64)),
         v = leaf(rnd({2, 5, 3}, DType::Float64)), m = leaf(rnd({3, 5}, DType::Float64));
  Fn f = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{scaled_dot_product_attention(in[0], in[1], in[2], in[3])};
  };
  EXPECT_TRUE(gradcheck(f, {q, k, v, m}));
  EXPECT_TRUE(gradgradcheck(f, {q, k, v, m}));
  Fn fc = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{scaled_dot_product_attention(in[0], in[1], in[2], {}, 0.0, true, 0.7)};
  };
  EXPECT_TRUE(gradcheck(fc, {q, k, v}));
  EXPECT_TRUE(gradgradcheck(fc, {q, k, v}));
}

TEST(NnAttention, Errors) {
  expect_error<ValueError>([] { scaled_dot_product_attention(rnd({2, 3, 4}), rnd({2, 5, 3}), rnd({2, 5, 3})); },
                           "same embedding size");
  expect_error<ValueError>([] { scaled_dot_product_attention(rnd({2, 3, 4}), rnd({2, 5, 4}), rnd({2, 6, 3})); },
                           "same sequence length");
  expect_error<ValueError>(
      [] { scaled_dot_product_attention(rnd({2, 3, 4}), rnd({2, 5, 4}), rnd({2, 5, 3}), rnd({3, 5}), 0.0, true); },
      "should not be set when is_causal");
  expect_error<ValueError>(
      [] { scaled_dot_product_attention(rnd({2, 3, 4}), rnd({2, 5, 4}), rnd({2, 5, 3}), rnd({4, 5})); },
      "cannot be broadcast");
  // dropout: the math formula with dropout on the probabilities (rows of kept values still average v).
  Tensor y = scaled_dot_product_attention(ones({1, 4, 4}), ones({1, 6, 4}), ones({1, 6, 2}), {}, 0.5);
  EXPECT_EQ(shape_str(y.sizes()), "[1, 4, 2]");
}

// ---------------------------------------------------------------------------------------------
// Every nn op's registry samples run (forward, and backward where differentiable).
// ---------------------------------------------------------------------------------------------

// The ops of src/ops/nn_*.cpp (family "nn" also holds ops defined elsewhere, e.g. linear).
bool is_nn_op(const ops::OpDef& op) {
  static const std::set<std::string> names = {
      "softmax", "log_softmax", "_softmax_backward_data", "_log_softmax_backward_data", "embedding",
      "embedding_dense_backward", "native_dropout", "native_dropout_backward", "dropout", "native_layer_norm",
      "_layer_norm_backward", "layer_norm", "_rms_norm", "_rms_norm_backward", "rms_norm", "group_norm",
      "native_batch_norm", "batch_norm", "convolution", "_convolution_backward_weight", "conv1d", "conv2d",
      "conv_transpose2d", "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "max_pool1d", "max_pool2d",
      "avg_pool2d", "avg_pool2d_backward", "avg_pool1d", "adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward",
      "upsample_nearest2d", "upsample_nearest2d_backward", "upsample_bilinear2d", "upsample_bilinear2d_backward",
      "interpolate", "_scaled_dot_product_attention_flash", "_scaled_dot_product_attention_flash_backward",
      "scaled_dot_product_attention"};
  return names.count(op.name()) > 0;
}

TEST(NnRegistry, SamplesRunForEveryDtype) {
  for (const auto& op : ops::Registry::instance().all()) {
    if (!is_nn_op(*op)) continue;
    for (DType dt : op->dtypes) {
      Generator gen(5);
      std::vector<ops::Sample> samples = op->samples(dt, gen);
      EXPECT_FALSE(samples.empty()) << op->name();
      for (const ops::Sample& s : samples) {
        SCOPED_TRACE(op->name() + " " + std::string(dtype_name(dt)) + " " + s.note);
        std::vector<Tensor> outs;
        ASSERT_NO_THROW(outs = ops::call(*op, s.args));
      }
    }
  }
}

TEST(NnRegistry, GradcheckEverySample) {
  for (const auto& op : ops::Registry::instance().all()) {
    if (!is_nn_op(*op) || !op->differentiable) continue;
    Generator gen(11);
    for (const ops::Sample& s : op->samples(DType::Float64, gen)) {
      if (!s.gradcheck) continue;
      SCOPED_TRACE(op->name() + " " + s.note);
      std::vector<size_t> slots;
      std::vector<Tensor> inputs;
      for (size_t i = 0; i < s.args.size(); ++i) {
        if (s.args[i].is_tensor() && s.args[i].tensor().defined() && s.args[i].tensor().dtype() == DType::Float64 &&
            std::find(op->nondiff_params.begin(), op->nondiff_params.end(), op->schema.params[i].name) ==
                op->nondiff_params.end()) {
          slots.push_back(i);
          inputs.push_back(leaf(s.args[i].tensor()));
        }
      }
      if (inputs.empty()) continue;
      Fn f = [&](const std::vector<Tensor>& in) {
        std::vector<ops::Value> args = s.args;
        for (size_t k = 0; k < slots.size(); ++k) args[slots[k]] = in[k];
        std::vector<Tensor> outs = ops::call(*op, args);
        std::vector<Tensor> fl;
        for (const Tensor& o : outs)
          if (is_floating(o.dtype())) fl.push_back(o);
        return fl;
      };
      EXPECT_NO_THROW(EXPECT_TRUE(gradcheck(f, inputs)));
      if (op->second_order) EXPECT_NO_THROW(EXPECT_TRUE(gradgradcheck(f, inputs)));
    }
  }
}

}  // namespace
}  // namespace foundry
