// Default initialisation: the statistics of freshly built layers and of the nn::init functions
// match the distributions PyTorch 1.13 uses (exact bounds, mean and standard deviation within
// sampling error), plus calculate_gain / fan computations.
#include <gtest/gtest.h>

#include <cmath>

#include "foundry/nn/layers.h"
#include "foundry/ops/ops.h"

namespace foundry::nn {
namespace {

struct Stats {
  double min, max, mean, std;
  int64_t n;
};

Stats stats(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  Stats s{1e300, -1e300, 0, 0, int64_t(v.size())};
  for (double x : v) {
    s.min = std::min(s.min, x);
    s.max = std::max(s.max, x);
    s.mean += x;
  }
  s.mean /= double(v.size());
  for (double x : v) s.std += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(s.std / double(v.size() - 1));
  return s;
}

// U(-bound, bound): inside the bounds, close to them, mean and std within sampling error.
void expect_uniform(const Tensor& t, double bound, const std::string& what) {
  SCOPED_TRACE(what);
  Stats s = stats(t);
  const double sd = bound / std::sqrt(3.0);
  EXPECT_GE(s.min, -bound);
  EXPECT_LE(s.max, bound);
  if (s.n >= 1000) {
    EXPECT_GT(s.max, 0.95 * bound);
    EXPECT_LT(s.min, -0.95 * bound);
  }
  EXPECT_NEAR(s.mean, 0.0, 5 * sd / std::sqrt(double(s.n)));
  EXPECT_NEAR(s.std, sd, 5 * 0.45 * sd / std::sqrt(double(s.n)) + 1e-12);
}

void expect_normal(const Tensor& t, double mean, double sd, const std::string& what) {
  SCOPED_TRACE(what);
  Stats s = stats(t);
  EXPECT_NEAR(s.mean, mean, 5 * sd / std::sqrt(double(s.n)));
  EXPECT_NEAR(s.std, sd, 5 * 0.71 * sd / std::sqrt(double(s.n)));
}

void expect_const(const Tensor& t, double v, const std::string& what) {
  Stats s = stats(t);
  EXPECT_EQ(s.min, v) << what;
  EXPECT_EQ(s.max, v) << what;
}

TEST(NnInit, GainAndFans) {
  EXPECT_DOUBLE_EQ(init::calculate_gain("linear"), 1.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain("conv2d"), 1.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain("sigmoid"), 1.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain("tanh"), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain("relu"), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(init::calculate_gain("leaky_relu"), std::sqrt(2.0 / (1 + 0.01 * 0.01)));
  EXPECT_DOUBLE_EQ(init::calculate_gain("leaky_relu", std::sqrt(5.0)), std::sqrt(1.0 / 3.0));
  EXPECT_DOUBLE_EQ(init::calculate_gain("selu"), 0.75);
  EXPECT_THROW(init::calculate_gain("swish"), ValueError);
  auto [fi, fo] = init::calculate_fan_in_and_fan_out(empty({6, 4, 3, 2}));
  EXPECT_EQ(fi, 24);
  EXPECT_EQ(fo, 36);
  EXPECT_THROW(init::calculate_fan_in_and_fan_out(empty({5})), ValueError);
}

TEST(NnInit, Functions) {
  Tensor t = empty({200, 100});
  expect_uniform(init::uniform_(t, -0.3, 0.3), 0.3, "uniform_");
  init::uniform_(t, 2.0, 3.0);
  EXPECT_GE(stats(t).min, 2.0);
  EXPECT_LE(stats(t).max, 3.0);
  expect_normal(init::normal_(t, 1.5, 0.2), 1.5, 0.2, "normal_");
  expect_uniform(init::xavier_uniform_(t, 2.0), 2.0 * std::sqrt(6.0 / 300.0), "xavier_uniform_");
  expect_normal(init::xavier_normal_(t), 0.0, std::sqrt(2.0 / 300.0), "xavier_normal_");
  // a = 0 is passed as leaky_relu's slope (PyTorch), so the gain is sqrt(2).
  expect_uniform(init::kaiming_uniform_(t), std::sqrt(2.0) * std::sqrt(3.0 / 100), "kaiming_uniform_");
  expect_uniform(init::kaiming_uniform_(t, 0, "fan_out", "relu"), std::sqrt(2.0) * std::sqrt(3.0 / 200),
                 "kaiming_uniform_ fan_out");
  expect_normal(init::kaiming_normal_(t, 0, "fan_in", "relu"), 0.0, std::sqrt(2.0 / 100), "kaiming_normal_");
  EXPECT_THROW(init::kaiming_uniform_(t, 0, "fan_avg"), ValueError);
  expect_const(init::constant_(t, 0.25), 0.25, "constant_");
  expect_const(init::ones_(t), 1.0, "ones_");
  expect_const(init::zeros_(t), 0.0, "zeros_");

  // Truncated normal: inside [a, b]; the std of N(0, 1) truncated to [-2, 2] is 0.8796.
  Tensor big = empty({100000});
  init::trunc_normal_(big);
  Stats s = stats(big);
  EXPECT_GE(s.min, -2.0);
  EXPECT_LE(s.max, 2.0);
  EXPECT_NEAR(s.mean, 0.0, 0.01);
  EXPECT_NEAR(s.std, 0.8796, 0.01);
  init::trunc_normal_(big, 0.0, 0.02, -0.04, 0.04);  // the common ViT/GPT use
  s = stats(big);
  EXPECT_GE(s.min, -0.04);
  EXPECT_LE(s.max, 0.04);
  EXPECT_NEAR(s.std, 0.02 * 0.8796, 0.0005);

  // Orthogonal: rows (or columns) orthonormal, times gain; works on >2-D by flattening.
  Tensor q = init::orthogonal_(empty({4, 9}), 2.0);
  EXPECT_TRUE(allclose(matmul(q, q.t()), eye(4) * 4.0, 1e-5, 1e-5));
  Tensor q2 = init::orthogonal_(empty({6, 3}, DType::Float64));
  EXPECT_TRUE(allclose(matmul(q2.t(), q2), eye(3, std::nullopt, DType::Float64), 1e-10, 1e-10));
  Tensor q3 = init::orthogonal_(empty({3, 2, 2}));
  Tensor f = q3.reshape({3, 4});
  EXPECT_TRUE(allclose(matmul(f, f.t()), eye(3), 1e-5, 1e-5));
  EXPECT_TRUE(equal(init::eye_(empty({2, 3})), eye(2, 3)));

  // A generator makes the draws reproducible.
  Generator g1(7), g2(7);
  EXPECT_TRUE(equal(init::normal_(empty({10}), 0, 1, &g1), init::normal_(empty({10}), 0, 1, &g2)));
  // Works on parameters that require grad (no autograd recording, stays a leaf).
  Linear l(3, 3);
  init::zeros_(l.weight);
  EXPECT_TRUE(l.weight.is_leaf());
  EXPECT_TRUE(l.weight.requires_grad());
}

TEST(NnInit, LayerDefaults) {
  Linear lin(400, 300);
  expect_uniform(lin.weight, 1.0 / std::sqrt(400.0), "Linear.weight");
  expect_uniform(lin.bias, 1.0 / std::sqrt(400.0), "Linear.bias");

  Bilinear bil(64, 5, 40);
  expect_uniform(bil.weight, 1.0 / 8.0, "Bilinear.weight");
  expect_uniform(bil.bias, 1.0 / 8.0, "Bilinear.bias");

  Conv2d conv(16, 64, 3);
  expect_uniform(conv.weight, 1.0 / std::sqrt(16 * 9.0), "Conv2d.weight");
  expect_uniform(conv.bias, 1.0 / std::sqrt(16 * 9.0), "Conv2d.bias");
  Conv1d conv1(8, 64, 5, {.groups = 2});
  expect_uniform(conv1.weight, 1.0 / std::sqrt(4 * 5.0), "Conv1d.weight");
  // ConvTranspose2d: weight [in, out / groups, k, k]; fan_in is computed from dim 1.
  ConvTranspose2d convt(32, 16, 3, {.groups = 2});
  EXPECT_EQ(shape_str(convt.weight.sizes()), "[32, 8, 3, 3]");
  expect_uniform(convt.weight, 1.0 / std::sqrt(8 * 9.0), "ConvTranspose2d.weight");
  expect_uniform(convt.bias, 1.0 / std::sqrt(8 * 9.0), "ConvTranspose2d.bias");

  Embedding emb(1000, 64, {.padding_idx = 3});
  expect_normal(emb.weight, 0.0, 1.0, "Embedding.weight");
  expect_const(emb.weight.select(0, 3), 0.0, "Embedding padding row");

  for (auto* m : std::initializer_list<Module*>{new LayerNorm(64), new GroupNorm(4, 64), new BatchNorm2d(64)}) {
    std::unique_ptr<Module> own(m);
    expect_const(m->parameter("weight"), 1.0, m->type_name() + ".weight");
    expect_const(m->parameter("bias"), 0.0, m->type_name() + ".bias");
  }
  RMSNorm rms(16);
  expect_const(rms.weight, 1.0, "RMSNorm.weight");
  BatchNorm1d bn(8);
  expect_const(bn.running_mean, 0.0, "running_mean");
  expect_const(bn.running_var, 1.0, "running_var");
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 0);
  EXPECT_EQ(bn.num_batches_tracked.dtype(), DType::Int64);
  EXPECT_EQ(bn.num_batches_tracked.dim(), 0);

  MultiheadAttention mha(128, 4, {.add_bias_kv = true});
  expect_uniform(mha.in_proj_weight, std::sqrt(6.0 / (128 + 3 * 128)), "in_proj_weight");
  expect_const(mha.in_proj_bias, 0.0, "in_proj_bias");
  expect_const(mha.out_proj->bias, 0.0, "out_proj.bias");
  expect_uniform(mha.out_proj->weight, 1.0 / std::sqrt(128.0), "out_proj.weight");
  Tensor bk = cat({mha.bias_k.flatten(), mha.bias_v.flatten()});
  expect_normal(bk, 0.0, std::sqrt(2.0 / 256.0), "bias_k/bias_v");
  MultiheadAttention mha2(64, 4, {.kdim = 32, .vdim = 16});
  expect_uniform(mha2.k_proj_weight, std::sqrt(6.0 / (64 + 32)), "k_proj_weight");
  expect_uniform(mha2.v_proj_weight, std::sqrt(6.0 / (64 + 16)), "v_proj_weight");

  LSTM lstm(10, 64, {.num_layers = 2, .bidirectional = true});
  for (auto& [n, p] : lstm.named_parameters()) expect_uniform(p, 1.0 / 8.0, "LSTM." + n);
  GRU gru(10, 100);
  for (auto& [n, p] : gru.named_parameters()) expect_uniform(p, 0.1, "GRU." + n);
}

}  // namespace
}  // namespace foundry::nn
