// Autograd engine: accumulation, graph retention, higher order, hooks, grad modes, in-place rules.
#include <gtest/gtest.h>

#include "foundry/autograd/autograd.h"
#include "foundry/autograd/checkpoint.h"
#include "foundry/autograd/node.h"
#include "foundry/core/allocator.h"
#include "foundry/ops/autocast.h"
#include "foundry/ops/ops.h"
#include "foundry/ops/registry.h"

using namespace foundry;

namespace {
Tensor scalar(double v) { return tensor<double>({v}, {}).requires_grad_(); }
}  // namespace

TEST(Autograd, SimpleChainAndAccumulation) {
  Tensor x = scalar(3.0);
  Tensor y = x * x * x;  // 3x^2 = 27
  y.backward(Tensor(), /*retain_graph=*/true);
  EXPECT_DOUBLE_EQ(x.grad().item<double>(), 27.0);
  y.backward();  // accumulates
  EXPECT_DOUBLE_EQ(x.grad().item<double>(), 54.0);
  EXPECT_THROW(y.backward(), Error);  // graph freed
}

TEST(Autograd, BroadcastGradientsSumBack) {
  Tensor a = ones({3, 1}, DType::Float64).requires_grad_();
  Tensor b = ones({4}, DType::Float64).requires_grad_();
  sum(a * b).backward();
  EXPECT_EQ(Shape(a.grad().sizes()), (Shape{3, 1}));
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{4, 4, 4}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{3, 3, 3, 3}));
}

TEST(Autograd, HigherOrder) {
  Tensor x = scalar(2.0);
  Tensor y = sin(x) * x;
  auto g1 = autograd::grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true);
  // d/dx (x sin x) = sin x + x cos x
  EXPECT_NEAR(g1[0].item<double>(), std::sin(2.0) + 2.0 * std::cos(2.0), 1e-12);
  auto g2 = autograd::grad({g1[0]}, {x}, {}, std::nullopt, true);
  // second derivative: 2 cos x - x sin x
  EXPECT_NEAR(g2[0].item<double>(), 2 * std::cos(2.0) - 2.0 * std::sin(2.0), 1e-12);
  auto g3 = autograd::grad({g2[0]}, {x});
  EXPECT_NEAR(g3[0].item<double>(), -3 * std::sin(2.0) - 2.0 * std::cos(2.0), 1e-12);
}

TEST(Autograd, GradDoesNotTouchDotGradAndReportsUnused) {
  Tensor x = scalar(1.5), z = scalar(2.0);
  Tensor y = exp(x);
  auto g = autograd::grad({y}, {x}, {}, true);
  EXPECT_NEAR(g[0].item<double>(), std::exp(1.5), 1e-12);
  EXPECT_FALSE(x.grad().defined());
  EXPECT_THROW(autograd::grad({y}, {z}), Error);
  auto gu = autograd::grad({y}, {z}, {}, true, false, /*allow_unused=*/true);
  EXPECT_FALSE(gu[0].defined());
}

TEST(Autograd, NoGradAndDetach) {
  Tensor x = scalar(1.0);
  {
    autograd::NoGradGuard ng;
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
    {
      autograd::EnableGradGuard eg;
      EXPECT_TRUE((x * 2.0).requires_grad());
    }
  }
  {
    autograd::InferenceModeGuard im;
    EXPECT_FALSE((x + 1.0).requires_grad());
  }
  Tensor d = (x * 3.0).detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
}

TEST(Autograd, HooksSeeAndReplaceGradients) {
  Tensor x = scalar(2.0);
  double seen = 0;
  x.register_hook([&](const Tensor& g) {
    seen = g.item<double>();
    return g * 10.0;
  });
  Tensor y = x * x;
  Tensor mid = y * 1.0;
  int h = y.register_hook([](const Tensor& g) { return g * 2.0; });
  (void)h;
  y.retain_grad();
  mid.backward();
  EXPECT_DOUBLE_EQ(y.grad().item<double>(), 2.0);  // retained after the hook doubled it
  EXPECT_DOUBLE_EQ(seen, 8.0);                     // 2 * 2x
  EXPECT_DOUBLE_EQ(x.grad().item<double>(), 80.0);
}

TEST(Autograd, InPlaceOnSavedTensorIsDetected) {
  Tensor x = ones({3}, DType::Float64).requires_grad_();
  Tensor a = x * 2.0;
  Tensor b = sin(a);  // saves a
  a.mul_(3.0);
  EXPECT_THROW(sum(b).backward(), Error);
}

TEST(Autograd, InPlaceRebasesHistory) {
  Tensor x = ones({3}, DType::Float64).requires_grad_();
  Tensor a = x * 2.0;
  a.add_(x * 3.0);  // a = 5x
  sum(a).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{5, 5, 5}));
  Tensor leaf = ones({2}).requires_grad_();
  EXPECT_THROW(leaf.add_(ones({2})), Error);
  {
    autograd::NoGradGuard ng;
    EXPECT_NO_THROW(leaf.add_(ones({2})));
  }
}

TEST(Autograd, SetItemWithAutograd) {
  Tensor x = arange(6, DType::Float64).requires_grad_();
  Tensor y = x * 1.0;
  y.index_put_({Slice(1, 4)}, Scalar(0.0));
  sum(y * y).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 0, 0, 0, 8, 10}));
}

TEST(Autograd, GradcheckCatchesWrongGradients) {
  Tensor x = tensor<double>({0.3, -0.7}, {2}).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{tanh(in[0])}; }, {x}));
  // A function whose gradient hook lies must fail the check.
  auto wrong = [](const std::vector<Tensor>& in) {
    Tensor y = in[0] * 2.0;
    if (y.requires_grad()) y.register_hook([](const Tensor& g) { return g * 1.5; });
    return std::vector<Tensor>{y};
  };
  autograd::GradcheckOptions opt;
  opt.raise_on_failure = false;
  EXPECT_FALSE(autograd::gradcheck(wrong, {x}, opt));
  EXPECT_TRUE(autograd::gradgradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * in[0] * in[0]}; }, {x}));
}

// A weight used by an embedding and by a later product (GPT-2's tied LM head): the embedding's
// backward adds its rows into the gradient the head already produced, not into a second dense
// [V, D] tensor, and the result equals the sum of the two separate gradients.
TEST(Autograd, TiedEmbeddingGradientAccumulatesInPlace) {
  const int64_t V = 4096, D = 256;  // a 4 MiB weight
  manual_seed(3);
  Tensor w = randn({V, D}).requires_grad_();
  Tensor idx = randint(0, V, {2, 16});
  Tensor target = randn({2, 16, V});
  auto loss_of = [&](const Tensor& emb_w, const Tensor& head_w) {
    Tensor h = tanh(embedding(idx, emb_w));
    return sum(linear(h, head_w) * target);
  };
  Tensor a = w.detach().requires_grad_(), b = w.detach().requires_grad_();
  loss_of(a, b).backward();
  Tensor expected = a.grad() + b.grad();
  Tensor loss = loss_of(w, w);
  allocator::reset_peak();
  int64_t live = allocator::stats().current_bytes;
  loss.backward();
  int64_t weight_bytes = V * D * 4;
  EXPECT_LT(allocator::stats().peak_bytes - live, weight_bytes + weight_bytes / 2);  // one [V, D] buffer, not two
  EXPECT_TRUE(allclose(w.grad(), expected, 1e-5, 1e-5));
  // scale_grad_by_freq divides the embedding's part only.
  Tensor c = w.detach().requires_grad_(), d = w.detach().requires_grad_();
  Tensor e = w.detach().requires_grad_();
  auto scaled = [&](const Tensor& emb_w, const Tensor& head_w) {
    const ops::OpDef& op = ops::Registry::instance().get("embedding");
    Tensor h = tanh(ops::call1(op, {idx, emb_w, ops::Value(), ops::Value(), 2.0, /*scale_grad_by_freq=*/true, false}));
    return sum(linear(h, head_w) * target);
  };
  scaled(c, d).backward();
  scaled(e, e).backward();
  EXPECT_TRUE(allclose(e.grad(), c.grad() + d.grad(), 1e-5, 1e-5));
  // With create_graph nothing is handed over; the gradient is still right and differentiable.
  Tensor f = w.detach().requires_grad_();
  auto g = autograd::grad({loss_of(f, f)}, {f}, {}, std::nullopt, /*create_graph=*/true);
  EXPECT_TRUE(allclose(g[0], expected, 1e-5, 1e-5));
  EXPECT_TRUE(g[0].requires_grad());
}

TEST(Autograd, CheckpointGivesTheSameGradients) {
  manual_seed(3);
  Tensor w = randn({8, 8}, DType::Float64).requires_grad_();
  Tensor x = randn({4, 8}, DType::Float64).requires_grad_();
  auto block = [&](const std::vector<Tensor>& in) {
    // dropout draws from the default generator: the recomputation must replay it.
    return std::vector<Tensor>{dropout(tanh(matmul(in[0], w)), 0.3, true)};
  };
  manual_seed(11);
  Tensor y1 = block({x})[0];
  sum(y1 * y1).backward();
  Tensor gw = w.grad().clone(), gx = x.grad().clone();
  w.set_grad(Tensor());
  x.set_grad(Tensor());
  manual_seed(11);
  Tensor y2 = autograd::checkpoint(block, {x})[0];
  EXPECT_TRUE(equal(y1.detach(), y2.detach()));
  sum(y2 * y2).backward();
  EXPECT_TRUE(allclose(w.grad(), gw, 1e-12, 1e-12));
  EXPECT_TRUE(allclose(x.grad(), gx, 1e-12, 1e-12));
}

TEST(Autocast, ProductsRunInBFloat16WithFloat32Gradients) {
  Tensor w = randn({8, 4}).requires_grad_();
  Tensor x = randn({3, 8});
  Tensor y, l;
  {
    autocast::AutocastGuard ac;
    y = matmul(x, w);
    l = log_softmax(y, -1);
  }
  EXPECT_EQ(y.dtype(), DType::BFloat16);
  EXPECT_EQ(l.dtype(), DType::Float32);
  sum(l).backward();
  EXPECT_EQ(w.grad().dtype(), DType::Float32);
  // Close to the float32 result at bfloat16 precision.
  Tensor ref = log_softmax(matmul(x, w.detach()), -1);
  EXPECT_TRUE(allclose(l.detach(), ref, 5e-2, 5e-2));
}

// cumprod's gradient with zeros in the input (one zero, two in a row, at either end) is itself
// differentiable: second derivatives agree with finite differences.
TEST(Autograd, CumprodWithZerosIsTwiceDifferentiable) {
  Tensor x = tensor<double>({0.5, 0.0, 1.5, 2.0, 0.0, 1.2, 0.0, 0.0, 0.7, 1.1, -0.8, 0.0}, {3, 4}).requires_grad_();
  auto fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{cumprod(in[0], 1)}; };
  EXPECT_TRUE(autograd::gradcheck(fn, {x}));
  EXPECT_TRUE(autograd::gradgradcheck(fn, {x}));
  auto along0 = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{cumprod(in[0], 0)}; };
  EXPECT_TRUE(autograd::gradgradcheck(along0, {x}));
}
