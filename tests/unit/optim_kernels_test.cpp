// The fused optimizer kernels against their scalar twins on every Highway target this machine
// supports (dispatch forced to each in turn): bit-identical on targets with native FMA, within
// rounding on the others; the norm reductions are bit-identical everywhere. Plus the optimizer
// level: fused vs the reference (composed ops) path on large multi-threaded parameters, results
// independent of the thread count, FlatParameters, and the API's error handling.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/isa.h"
#include "foundry/autograd/grad_mode.h"
#include "foundry/core/parallel.h"
#include "foundry/ops/ops.h"
#include "foundry/optim/kernels.h"
#include "foundry/optim/optimizer.h"

using namespace foundry;
using namespace foundry::optim;
namespace k = foundry::optim::kernels;

namespace {

std::vector<float> random_vec(int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Bit-identical with native FMA; otherwise within a few ulp of the larger magnitude.
void expect_match(const std::vector<float>& simd, const std::vector<float>& ref, bool exact, const std::string& what) {
  if (exact) {
    EXPECT_TRUE(same_bits(simd, ref)) << what;
    return;
  }
  ASSERT_EQ(simd.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_NEAR(simd[i], ref[i], 1e-5 * std::max(1.0f, std::fabs(ref[i]))) << what << " element " << i;
}

const int64_t kSizes[] = {0, 1, 3, 7, 15, 16, 17, 31, 33, 100, 1023, 1025, 4099};

class OptimKernelTargets : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override {
    foundry::restrict_simd_target(GetParam());
    exact_ = k::simd_native_fma();
  }
  void TearDown() override { foundry::restrict_simd_target(0); }
  bool exact_ = true;
};

std::string target_name(const ::testing::TestParamInfo<int64_t>& info) { return foundry::simd_target_name(info.param); }

}  // namespace

TEST_P(OptimKernelTargets, AdamMatchesTwin) {
  for (int64_t n : kSizes) {
    for (int variant = 0; variant < 4; ++variant) {
      k::AdamStep s;
      s.beta1 = 0.85f, s.one_minus_beta1 = 0.15f, s.beta2 = 0.995f, s.one_minus_beta2 = 0.005f;
      s.bias_correction2_sqrt = 0.3f, s.neg_step_size = -0.01f, s.eps = 1e-6f;
      s.weight_decay = variant == 1 ? 0.1f : 0.0f;
      s.decay = variant == 2 ? 0.999f : 1.0f;
      s.maximize = variant == 3;
      s.amsgrad = variant >= 2;
      auto p = random_vec(n, 1, -2, 2), g = random_vec(n, 2, -1, 1), m = random_vec(n, 3, -0.1f, 0.1f);
      auto v = random_vec(n, 4, 0, 0.01f), vmax = random_vec(n, 5, 0, 0.01f);
      auto p2 = p, m2 = m, v2 = v, vmax2 = vmax;
      k::adam_f32(s, p.data(), g.data(), m.data(), v.data(), vmax.data(), n);
      k::adam_f32_ref(s, p2.data(), g.data(), m2.data(), v2.data(), vmax2.data(), n);
      const std::string what = "adam n=" + std::to_string(n) + " variant " + std::to_string(variant);
      expect_match(p, p2, exact_, what);
      expect_match(m, m2, exact_, what);
      expect_match(v, v2, exact_, what);
      expect_match(vmax, vmax2, exact_, what);
    }
  }
}

TEST_P(OptimKernelTargets, SgdMatchesTwin) {
  for (int64_t n : kSizes) {
    for (int variant = 0; variant < 5; ++variant) {
      k::SGDStep s;
      s.neg_lr = -0.05f;
      s.momentum = variant == 0 ? 0.0f : 0.9f;
      s.one_minus_dampening = variant == 2 ? 0.7f : 1.0f;
      s.weight_decay = variant >= 3 ? 0.01f : 0.0f;
      s.nesterov = variant == 3;
      s.maximize = variant == 4;
      s.first = variant == 4;
      auto p = random_vec(n, 6, -2, 2), g = random_vec(n, 7, -1, 1), buf = random_vec(n, 8, -1, 1);
      auto p2 = p, buf2 = buf;
      k::sgd_f32(s, p.data(), g.data(), buf.data(), n);
      k::sgd_f32_ref(s, p2.data(), g.data(), buf2.data(), n);
      const std::string what = "sgd n=" + std::to_string(n) + " variant " + std::to_string(variant);
      expect_match(p, p2, exact_, what);
      expect_match(buf, buf2, exact_, what);
    }
  }
}

TEST_P(OptimKernelTargets, LionMatchesTwin) {
  for (int64_t n : kSizes) {
    k::LionStep s;
    s.beta1 = 0.9f, s.one_minus_beta1 = 0.1f, s.beta2 = 0.99f, s.one_minus_beta2 = 0.01f;
    s.decay = 0.9999f, s.neg_lr = -1e-4f;
    auto p = random_vec(n, 9, -2, 2), g = random_vec(n, 10, -1, 1), m = random_vec(n, 11, -1, 1);
    if (n > 3) g[2] = 0, m[2] = 0;  // sign(0) = 0
    auto p2 = p, m2 = m;
    k::lion_f32(s, p.data(), g.data(), m.data(), n);
    k::lion_f32_ref(s, p2.data(), g.data(), m2.data(), n);
    // The parameter update only sees sign(), which rounding cannot flip here.
    EXPECT_TRUE(same_bits(p, p2)) << "lion n=" << n;
    expect_match(m, m2, exact_, "lion exp_avg n=" + std::to_string(n));
  }
}

TEST_P(OptimKernelTargets, AdagradAndRmspropMatchTwins) {
  for (int64_t n : kSizes) {
    for (int variant = 0; variant < 4; ++variant) {
      k::AdagradStep a;
      a.weight_decay = variant == 1 ? 0.01f : 0.0f;
      a.neg_clr = -0.01f;
      a.eps = 1e-10f;
      a.maximize = variant == 2;
      auto p = random_vec(n, 12, -2, 2), g = random_vec(n, 13, -1, 1), sum = random_vec(n, 14, 0, 1);
      auto p2 = p, sum2 = sum;
      k::adagrad_f32(a, p.data(), g.data(), sum.data(), n);
      k::adagrad_f32_ref(a, p2.data(), g.data(), sum2.data(), n);
      expect_match(p, p2, exact_, "adagrad n=" + std::to_string(n));
      expect_match(sum, sum2, exact_, "adagrad sum n=" + std::to_string(n));

      k::RMSpropStep r;
      r.alpha = 0.9f, r.one_minus_alpha = 0.1f, r.eps = 1e-8f, r.neg_lr = -0.001f;
      r.weight_decay = variant == 1 ? 0.01f : 0.0f;
      r.momentum = variant >= 2 ? 0.9f : 0.0f;
      r.centered = variant == 3 || variant == 1;
      r.maximize = variant == 2;
      auto q = random_vec(n, 15, -2, 2), sq = random_vec(n, 16, 0.5f, 1), ga = random_vec(n, 17, -0.1f, 0.1f);
      auto buf = random_vec(n, 18, -1, 1);
      auto q2 = q, sq2 = sq, ga2 = ga, buf2 = buf;
      k::rmsprop_f32(r, q.data(), g.data(), sq.data(), ga.data(), buf.data(), n);
      k::rmsprop_f32_ref(r, q2.data(), g.data(), sq2.data(), ga2.data(), buf2.data(), n);
      const std::string what = "rmsprop n=" + std::to_string(n) + " variant " + std::to_string(variant);
      expect_match(q, q2, exact_, what);
      expect_match(sq, sq2, exact_, what);
      expect_match(ga, ga2, exact_, what);
      expect_match(buf, buf2, exact_, what);
    }
  }
}

TEST_P(OptimKernelTargets, NormReductionsAreBitIdenticalToTwins) {
  for (int64_t n : {0, 1, 5, 16, 17, 1023, 1024, 1025, 5000, 70001}) {
    auto x = random_vec(n, 19, -3, 3);
    EXPECT_EQ(k::sum_squares_f32(x.data(), n), k::sum_squares_f32_ref(x.data(), n)) << n;
    EXPECT_EQ(k::sum_abs_f32(x.data(), n), k::sum_abs_f32_ref(x.data(), n)) << n;
    EXPECT_EQ(k::max_abs_f32(x.data(), n), k::max_abs_f32_ref(x.data(), n)) << n;
    double exact = 0;
    for (float v : x) exact += double(v) * v;
    EXPECT_NEAR(k::sum_squares_f32(x.data(), n), exact, 1e-6 * exact + 1e-30);
    auto y = x, y2 = x;
    k::scale_f32(y.data(), 0.37f, n);
    k::scale_f32_ref(y2.data(), 0.37f, n);
    EXPECT_TRUE(same_bits(y, y2)) << n;
    if (n > 10) {
      x[n / 2] = NAN;
      EXPECT_TRUE(std::isnan(k::max_abs_f32(x.data(), n)));
      EXPECT_TRUE(std::isnan(k::max_abs_f32_ref(x.data(), n)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, OptimKernelTargets, ::testing::ValuesIn(foundry::compiled_simd_targets()), target_name);

// ---------------------------------------------------------------------------------------------
// Optimizer level
// ---------------------------------------------------------------------------------------------

namespace {

// Parameters large enough to be split across threads (one tensor spans chunk boundaries).
std::vector<Tensor> big_params(uint64_t seed) {
  Generator gen(seed);
  std::vector<Tensor> ps;
  for (auto shape : {std::vector<int64_t>{100, 301}, {65537}, {3, 5}, {20000}}) ps.push_back(randn(shape, {}, &gen).requires_grad_(true));
  return ps;
}

std::vector<Tensor> clone_params(const std::vector<Tensor>& ps) {
  std::vector<Tensor> out;
  for (const auto& p : ps) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}

void set_random_grads(const std::vector<Tensor>& ps, uint64_t seed) {
  Generator gen(seed);
  for (const auto& p : ps) p.set_grad(randn(p.sizes(), {}, &gen) * 0.1);
}

using Factory = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>, bool fused)>;

std::vector<std::pair<std::string, Factory>> factories() {
  return {
      {"SGD", [](auto ps, bool f) { return std::make_unique<SGD>(ps, SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true, .fused = f}); }},
      {"SGD_dampening_wd",
       [](auto ps, bool f) {
         return std::make_unique<SGD>(ps, SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.2, .weight_decay = 0.01, .fused = f});
       }},
      {"Adam", [](auto ps, bool f) { return std::make_unique<Adam>(ps, AdamOptions{.lr = 1e-2, .weight_decay = 0.01, .amsgrad = true, .fused = f}); }},
      {"AdamW", [](auto ps, bool f) { return std::make_unique<AdamW>(ps, AdamWOptions{.lr = 1e-2, .weight_decay = 0.1, .fused = f}); }},
      {"Adagrad", [](auto ps, bool f) { return std::make_unique<Adagrad>(ps, AdagradOptions{.lr = 0.1, .lr_decay = 0.01, .fused = f}); }},
      {"RMSprop",
       [](auto ps, bool f) {
         return std::make_unique<RMSprop>(ps, RMSpropOptions{.momentum = 0.5, .centered = true, .fused = f});
       }},
      {"Lion", [](auto ps, bool f) { return std::make_unique<Lion>(ps, LionOptions{.lr = 1e-3, .weight_decay = 0.1, .fused = f}); }},
  };
}

std::vector<float> flat(const std::vector<Tensor>& ps) {
  std::vector<float> out;
  for (const auto& p : ps) {
    auto v = p.to_vector<float>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

}  // namespace

TEST(FusedOptimizers, MatchReferencePathOnLargeParameters) {
  const int saved = get_num_threads();
  for (const auto& [name, make] : factories()) {
    SCOPED_TRACE(name);
    auto a = big_params(1), b = clone_params(a);
    auto fused = make(a, true), ref = make(b, false);
    for (int step = 0; step < 5; ++step) {
      set_num_threads(1);  // (the reference path's many small ops are slow on a busy machine)
      set_random_grads(a, 100 + uint64_t(step));
      set_random_grads(b, 100 + uint64_t(step));
      ref->step();
      set_num_threads(2);  // the fused loop split between threads, mid-tensor
      fused->step();
    }
    auto fa = flat(a), fb = flat(b);
    ASSERT_EQ(fa.size(), fb.size());
    size_t flips = 0;
    double max_rel = 0;
    for (size_t i = 0; i < fa.size(); ++i) {
      const double err = std::fabs(double(fa[i]) - fb[i]);
      // Lion's update is lr * sign(u): when u is within rounding of 0 the sign may differ.
      if (name == "Lion" && err > 1e-5) {
        ++flips;
        continue;
      }
      // Relative to the element, or to 0.1 (the parameters are O(1): an element that passed
      // through 0 carries the absolute rounding error of its larger past values).
      max_rel = std::max(max_rel, err / std::max(0.1, double(std::fabs(fb[i]))));
    }
    EXPECT_LE(max_rel, 2e-6) << name;
    std::printf("  %-18s fused vs reference: max rel err %.2e\n", name.c_str(), max_rel);
    EXPECT_LE(flips, 2u);
  }
  set_num_threads(saved);
}

TEST(FusedOptimizers, ResultsDoNotDependOnThreadCount) {
  const int saved = get_num_threads();
  for (const auto& [name, make] : factories()) {
    SCOPED_TRACE(name);
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      auto ps = big_params(3);
      auto opt = make(ps, true);
      for (int step = 0; step < 3; ++step) {
        set_random_grads(ps, 7 + uint64_t(step));
        opt->step();
      }
      results.push_back(flat(ps));
    }
    EXPECT_TRUE(same_bits(results[0], results[1]));
  }
  set_num_threads(saved);
}

TEST(FusedOptimizers, FlatParametersGiveTheSameResultAndKeepIdentity) {
  const int saved = get_num_threads();
  set_num_threads(1);
  for (const auto& [name, make] : factories()) {
    SCOPED_TRACE(name);
    auto a = big_params(5), b = clone_params(a);
    std::vector<TensorImpl*> impls;
    for (const auto& p : b) impls.push_back(p.impl());
    FlatParameters flat_b(b, /*flat_grads=*/true);
    for (size_t i = 0; i < b.size(); ++i) {
      EXPECT_EQ(flat_b.params()[i].impl(), impls[i]);  // the same handles, re-pointed
      EXPECT_EQ(b[i].storage().get(), flat_b.buffer().storage().get());
      EXPECT_EQ(b[i].grad().storage().get(), flat_b.grad_buffer().storage().get());
    }
    EXPECT_EQ(flat(a), flat(b));
    auto oa = make(a, true), ob = make(b, true);
    for (int step = 0; step < 3; ++step) {
      set_random_grads(a, 50 + uint64_t(step));
      Generator gen(50 + uint64_t(step));
      for (auto& p : b) {
        Tensor g = p.grad();
        g.copy_(randn(p.sizes(), {}, &gen) * 0.1);  // write into the flat gradient buffer
      }
      oa->step();
      ob->step();
    }
    EXPECT_TRUE(same_bits(flat(a), flat(b)));
    // The buffer is what the parameters see.
    EXPECT_EQ(flat_b.buffer().narrow(0, flat_b.offset(1), b[1].numel()).to_vector<float>(), b[1].to_vector<float>());
  }
  set_num_threads(saved);
}

TEST(FlatParameters, BackwardAccumulatesIntoTheFlatGradients) {
  Tensor w = randn({4, 3}).requires_grad_(true), bias = randn({3}).requires_grad_(true);
  FlatParameters flat_p({w, bias}, true);
  Tensor x = randn({2, 4});
  (matmul(x, w) + bias).sum().backward();
  EXPECT_EQ(w.grad().storage().get(), flat_p.grad_buffer().storage().get());
  EXPECT_TRUE(allclose(w.grad(), matmul(x.t(), ones({2, 3}))));
  EXPECT_TRUE(allclose(bias.grad(), full({3}, 2.0)));
  SGD opt({w, bias}, {.lr = 0.1});
  opt.zero_grad(/*set_to_none=*/false);
  EXPECT_EQ(abs(flat_p.grad_buffer()).sum().item<double>(), 0.0);
  opt.zero_grad();
  EXPECT_FALSE(w.grad().defined());
  flat_p.attach_grads();
  EXPECT_EQ(w.grad().storage().get(), flat_p.grad_buffer().storage().get());
}

TEST(Optimizer, SkipsParametersWithoutGradAndBumpsVersions) {
  Tensor a = ones({5}).requires_grad_(true), b = ones({5}).requires_grad_(true);
  AdamW opt({a, b});
  a.set_grad(full({5}, 0.5));
  const uint32_t va = a.version(), vb = b.version();
  opt.step();
  EXPECT_NE(a.version(), va);
  EXPECT_EQ(b.version(), vb);
  EXPECT_EQ(b.to_vector<float>(), std::vector<float>(5, 1.0f));
  EXPECT_TRUE(opt.state(a));
  EXPECT_FALSE(opt.state(b));
  EXPECT_EQ(opt.state(a)->scalars.at("step"), 1.0);
}

TEST(Optimizer, Float64AndNonContiguousParametersTakeTheReferencePath) {
  Tensor a = randn({4, 6}, DType::Float64).requires_grad_(true);
  Tensor base = randn({6, 4});
  Tensor b = base.t().detach().requires_grad_(true);  // non-contiguous leaf
  Tensor a2 = a.detach().clone().requires_grad_(true), b2 = b.detach().clone().requires_grad_(true);
  Adam fused({a, b}, {.lr = 0.1}), ref({a2, b2}, {.lr = 0.1, .fused = false});
  for (int i = 0; i < 3; ++i) {
    a.set_grad(full({4, 6}, 0.3, DType::Float64));
    b.set_grad(full({4, 6}, -0.2));
    a2.set_grad(full({4, 6}, 0.3, DType::Float64));
    b2.set_grad(full({4, 6}, -0.2));
    fused.step();
    ref.step();
  }
  EXPECT_TRUE(allclose(a, a2, 1e-12, 1e-12));
  EXPECT_TRUE(allclose(b, b2, 1e-6, 1e-7));
  EXPECT_FALSE(b.is_contiguous());
}

TEST(Optimizer, ParamGroupsAndOptions) {
  Tensor a = ones({2}).requires_grad_(true), b = ones({3}).requires_grad_(true);
  SGD opt(std::vector<ParamGroup>{{{a}, {{"lr", 0.5}}}, {{b}, {}}}, {.lr = 0.1, .momentum = 0.9});
  EXPECT_EQ(opt.lr(0), 0.5);
  EXPECT_EQ(opt.lr(1), 0.1);
  EXPECT_EQ(opt.option("momentum", 0), 0.9);
  opt.set_lr(0.01, 1);
  EXPECT_EQ(opt.lr(1), 0.01);
  EXPECT_EQ(opt.num_params(), 2u);
  EXPECT_THROW(opt.option("nope"), ValueError);
  EXPECT_THROW(opt.lr(2), IndexError);
  Tensor c = ones({1}).requires_grad_(true);
  opt.add_param_group({{c}, {{"lr", 0.2}}});
  EXPECT_EQ(opt.option("momentum", 2), 0.9);
  EXPECT_THROW(opt.add_param_group({{a}, {}}), ValueError);                 // already in group 0
  EXPECT_THROW(opt.add_param_group({{ones({1})}, {{"bogus", 1.0}}}), ValueError);  // unknown option
}

TEST(Optimizer, BadArgumentsRaise) {
  Tensor a = ones({2}).requires_grad_(true);
  EXPECT_THROW(SGD({a}, {}), ValueError);  // torch 1.13: lr is required
  try {  // a negative lr is invalid, not missing (-1 was the unset marker and read "lr is required")
    SGD({a}, {.lr = -1});
    ADD_FAILURE();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("SGD: invalid learning rate: -1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(SGD({a}, {.lr = 0.1, .dampening = 0.1, .nesterov = true}), ValueError);
  EXPECT_THROW(Adam({a}, {.lr = -1}), ValueError);
  EXPECT_THROW(Adam({a}, {.betas = {1.0, 0.9}}), ValueError);
  EXPECT_THROW(AdamW(std::vector<Tensor>{}), ValueError);
  EXPECT_THROW(SGD({a, a}, {.lr = 0.1}), ValueError);
  Tensor nonleaf = a * 2;
  EXPECT_THROW(SGD({nonleaf}, {.lr = 0.1}), ValueError);
  EXPECT_THROW(SGD({ones({2}, DType::Int64)}, {.lr = 0.1}), ValueError);
}

TEST(Optimizer, LoadStateDictChecksLayout) {
  Tensor a = ones({2}).requires_grad_(true), b = ones({3}).requires_grad_(true);
  AdamW opt({a, b});
  a.set_grad(ones({2}));
  b.set_grad(ones({3}));
  opt.step();
  OptimizerState st = opt.state_dict();
  EXPECT_EQ(st.tensors.size(), 4u);  // exp_avg and exp_avg_sq of 2 parameters
  EXPECT_TRUE(st.tensors.count("state.1.exp_avg_sq"));

  Tensor c = ones({2}).requires_grad_(true);
  AdamW one({c});
  EXPECT_THROW(one.load_state_dict(st), ValueError);  // 1 parameter vs 2
  Tensor d = ones({2}).requires_grad_(true), e = ones({4}).requires_grad_(true);
  AdamW wrong_shape({d, e});
  EXPECT_THROW(wrong_shape.load_state_dict(st), ValueError);
  SGD other({ones({2}).requires_grad_(true), ones({3}).requires_grad_(true)}, {.lr = 0.1});
  EXPECT_THROW(other.load_state_dict(st), ValueError);  // saved by AdamW
  EXPECT_THROW(opt.load_state_dict({{}, "not json"}), ValueError);
  // A failed load leaves the optimizer as it was.
  EXPECT_TRUE(wrong_shape.param_groups()[0].options.count("lr"));
}

// A loaded Conv1D weight is kept as the rows of its transpose (strides (1, rows)): the fused
// kernels walk it, its gradient and its states as one flat array in that order, and the states
// still hold each element's own value (state_dict, and a load into a contiguous parameter).
TEST(Optimizer, MatrixStoredAsRowsOfItsTransposeKeepsItsStatesInOrder) {
  Generator gen(11);
  const Tensor start = randn({5, 7}, {}, &gen);
  Tensor p = start.t().contiguous().t().detach().requires_grad_(true);  // [5, 7], strides (1, 5)
  ASSERT_EQ(p.stride(0), 1);
  ASSERT_EQ(p.stride(1), 5);
  Tensor c = start.clone().requires_grad_(true);
  AdamW mine({p}, {.lr = 0.05, .weight_decay = 0.1, .amsgrad = true});
  AdamW theirs({c}, {.lr = 0.05, .weight_decay = 0.1, .amsgrad = true});
  for (int step = 0; step < 3; ++step) {
    const Tensor g = randn({5, 7}, {}, &gen);
    // The gradient arrives contiguous, then in the weight's order (as linear() gives it).
    p.set_grad(step % 2 ? g.t().contiguous().t() : g.clone());
    c.set_grad(g.clone());
    mine.step();
    theirs.step();
  }
  EXPECT_EQ(p.stride(1), 5);
  EXPECT_EQ(p.detach().contiguous().to_vector<float>(), c.detach().to_vector<float>());
  const OptimizerState a = mine.state_dict(), b = theirs.state_dict();
  for (const char* name : {"state.0.exp_avg", "state.0.exp_avg_sq", "state.0.max_exp_avg_sq"})
    EXPECT_EQ(a.tensors.at(name).contiguous().to_vector<float>(), b.tensors.at(name).contiguous().to_vector<float>())
        << name;
  // The transposed parameter's states drive a contiguous one, and the other way round.
  Tensor p2 = c.detach().clone().requires_grad_(true), c2 = p.detach().clone().t().contiguous().t().requires_grad_(true);
  AdamW from_mine({p2}, {.lr = 0.05, .weight_decay = 0.1, .amsgrad = true});
  AdamW from_theirs({c2}, {.lr = 0.05, .weight_decay = 0.1, .amsgrad = true});
  from_mine.load_state_dict(a);
  from_theirs.load_state_dict(b);
  const Tensor g = randn({5, 7}, {}, &gen);
  p2.set_grad(g.clone());
  c2.set_grad(g.clone());
  from_mine.step();
  from_theirs.step();
  EXPECT_EQ(p2.detach().to_vector<float>(), c2.detach().contiguous().to_vector<float>());
}

// The gradient of such a weight through linear() arrives in its order and is kept so (PyTorch's
// AccumulateGrad keeps a dense leaf's layout): no transposing copy per step.
TEST(Optimizer, GradientOfAMatrixStoredAsRowsOfItsTransposeKeepsItsOrder) {
  Generator gen(12);
  Tensor p = randn({7, 5}, {}, &gen).t().detach().requires_grad_(true);  // [5, 7], strides (1, 5)
  const Tensor x = randn({3, 5}, {}, &gen);
  linear(x, p.t()).sum().backward();
  ASSERT_TRUE(p.grad().defined());
  EXPECT_EQ(p.grad().stride(0), 1);
  EXPECT_EQ(p.grad().stride(1), 5);
  // x^T summed over the rows of dy (all ones): every output column's gradient is x's column sums.
  const Tensor want = sum(x, {0}).reshape({5, 1}).expand({5, 7});
  const std::vector<float> got = p.grad().contiguous().to_vector<float>(), expected = want.contiguous().to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-5) << i;
  // Clipping reads and scales it in that order too.
  Tensor copy = p.grad().contiguous().requires_grad_(false), twin = zeros({5, 7}).requires_grad_(true);
  twin.set_grad(copy.clone());
  const double norm = clip_grad_norm_({p}, 0.5);
  EXPECT_NEAR(norm, clip_grad_norm_({twin}, 0.5), 1e-6 * norm);
  EXPECT_EQ(p.grad().stride(1), 5);
  const std::vector<float> clipped = p.grad().contiguous().to_vector<float>(), twin_clipped = twin.grad().to_vector<float>();
  for (size_t i = 0; i < clipped.size(); ++i) EXPECT_NEAR(clipped[i], twin_clipped[i], 1e-6) << i;
  Tensor q = randn({5, 7}, {}, &gen).requires_grad_(true);  // a contiguous leaf keeps contiguous gradients
  linear(x, q.t()).sum().backward();
  EXPECT_TRUE(q.grad().is_contiguous());
}

TEST(Optimizer, ZeroGradModes) {
  Tensor a = ones({2}).requires_grad_(true);
  SGD opt({a}, {.lr = 0.1});
  a.set_grad(full({2}, 3.0));
  Tensor g = a.grad();
  opt.zero_grad(false);
  EXPECT_TRUE(a.grad().is_same(g));
  EXPECT_EQ(g.to_vector<float>(), std::vector<float>(2, 0.0f));
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

TEST(Schedulers, StateRoundTripAndErrors) {
  Tensor a = ones({2}).requires_grad_(true);
  SGD opt({a}, {.lr = 0.1, .momentum = 0.9});
  ReduceLROnPlateau plateau(opt, {.patience = 0});
  EXPECT_THROW(plateau.step(), ValueError);
  plateau.step(1.0);
  plateau.step(2.0);
  EXPECT_DOUBLE_EQ(opt.lr(), 0.01);
  std::string saved = plateau.state_dict();
  ReduceLROnPlateau other(opt, {.patience = 0});
  other.load_state_dict(saved);
  EXPECT_EQ(other.best(), 1.0);
  EXPECT_EQ(other.last_epoch(), 2);
  // Infinity survives JSON.
  ReduceLROnPlateau fresh(opt);
  ReduceLROnPlateau fresh2(opt);
  fresh2.load_state_dict(fresh.state_dict());
  EXPECT_TRUE(std::isinf(fresh2.best()));

  EXPECT_THROW(StepLR(opt, 0), ValueError);
  EXPECT_THROW(LinearLR(opt, 2.0), ValueError);
  EXPECT_THROW(WarmupCosine(opt, 10, 5), ValueError);
  EXPECT_THROW(OneCycleLR(opt, {.max_lr = {0.1}, .total_steps = 0}), ValueError);
  OneCycleLR one(opt, {.max_lr = {0.1}, .total_steps = 2});
  one.step();
  one.step();
  EXPECT_THROW(one.step(), ValueError);
  EXPECT_THROW(ExponentialLR(opt, 0.5).load_state_dict("[1]"), ValueError);
}

TEST(Schedulers, WarmupCosineShape) {
  Tensor a = ones({2}).requires_grad_(true);
  AdamW opt({a}, {.lr = 1.0});
  WarmupCosine s(opt, 4, 12, 0.1);
  std::vector<double> lrs;
  for (int i = 0; i < 14; ++i) {
    lrs.push_back(opt.lr());
    s.step();
  }
  EXPECT_DOUBLE_EQ(lrs[0], 0.25);
  EXPECT_DOUBLE_EQ(lrs[3], 1.0);
  EXPECT_DOUBLE_EQ(lrs[4], 1.0);
  EXPECT_NEAR(lrs[8], 0.1 + 0.5 * 0.9, 1e-15);  // halfway through the decay
  EXPECT_DOUBLE_EQ(lrs[12], 0.1);
  EXPECT_DOUBLE_EQ(lrs[13], 0.1);
  for (int i = 5; i < 12; ++i) EXPECT_LT(lrs[size_t(i)], lrs[size_t(i - 1)]);
  EXPECT_EQ(s.last_lr(), opt.lr());
}
