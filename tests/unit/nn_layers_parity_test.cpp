// nn layers against PyTorch 1.13: fixtures written by tools/gen_nn_fixtures.py (state_dict,
// inputs, outputs, grad_outputs, input and parameter gradients, state after the step). Each
// test builds the layer in Foundry with the same arguments, load_state_dict's the torch weights
// (strict, so the state_dict names and order must match exactly), runs forward and backward and
// compares. Tolerances: float32 1e-5, float64 1e-7 (absolute + relative).
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>

#include "foundry/autograd/autograd.h"
#include "foundry/io/npy.h"
#include "foundry/nn/layers.h"
#include "foundry/ops/ops.h"

namespace foundry::nn {
namespace {

namespace fs = std::filesystem;
using Ins = std::vector<Tensor>;
using Fixture = std::map<std::string, Tensor>;
/// Runs the layer on the inputs; `f` holds the fixture's extra.<name> tensors (masks).
using RunFn = std::function<std::vector<Tensor>(Module&, const Ins&, const Fixture& f)>;

// From the source tree (FOUNDRY_SOURCE_DIR, absolute): __FILE__ is relative where ccache rewrites
// paths under its base_dir.
fs::path fixture_dir() { return fs::path(FOUNDRY_SOURCE_DIR) / "tests" / "parity" / "nn"; }

std::map<std::string, Tensor> load(const std::string& name) {
  return io::load_npz((fixture_dir() / (name + ".npz")).string());
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << ": undefined";
  ASSERT_EQ(shape_str(got.sizes()), shape_str(want.sizes())) << what;
  const bool f64 = want.dtype() == DType::Float64;
  if (is_floating(want.dtype())) EXPECT_EQ(dtype_name(got.dtype()), dtype_name(want.dtype())) << what;
  const double tol = f64 ? 1e-7 : 1e-5;
  std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(b[i]) && std::isnan(a[i])) continue;
    const double err = std::abs(a[i] - b[i]) / (tol + tol * std::abs(b[i]));
    if (!(err <= worst)) {
      worst = std::isnan(err) ? 1e30 : err;
      worst_i = i;
    }
  }
  EXPECT_LE(worst, 1.0) << what << ": element " << worst_i << " is " << a[worst_i] << ", torch has " << b[worst_i];
}

std::string strip(const std::string& s, const std::string& prefix) { return s.substr(prefix.size()); }

// The generic runner (see the generator's docstring for the key layout).
void check_case(const std::string& name, const std::shared_ptr<Module>& m, const RunFn& run, bool train = true) {
  SCOPED_TRACE(name);
  std::map<std::string, Tensor> f = load(name);
  NamedTensors state;  // "state.NNN.<key>" sorts into torch's order
  for (auto& [k, v] : f)
    if (k.rfind("state.", 0) == 0) state.emplace_back(k.substr(10), v);
  // state_dict names and order equal torch's.
  NamedTensors ours = m->state_dict();
  ASSERT_EQ(ours.size(), state.size());
  for (size_t i = 0; i < ours.size(); ++i) EXPECT_EQ(ours[i].first, state[i].first) << "state_dict entry " << i;
  m->load_state_dict(state, true);
  m->train(train);

  Ins ins;
  for (int i = 0; f.count("in." + std::to_string(i)); ++i) {
    Tensor x = f.at("in." + std::to_string(i)).clone();
    if (f.count("grad.in." + std::to_string(i))) x.requires_grad_(true);
    ins.push_back(x);
  }
  std::vector<Tensor> outs = run(*m, ins, f);
  std::vector<Tensor> ys, gs;
  for (size_t j = 0; j < outs.size(); ++j) {
    const std::string key = "out." + std::to_string(j);
    if (!f.count(key)) {
      EXPECT_FALSE(outs[j].defined()) << key << " should be None";
      continue;
    }
    expect_close(outs[j], f.at(key), key);
    if (f.count("gout." + std::to_string(j))) {
      ys.push_back(outs[j]);
      gs.push_back(f.at("gout." + std::to_string(j)));
    }
  }
  if (!ys.empty()) autograd::backward(ys, gs);
  for (size_t i = 0; i < ins.size(); ++i) {
    const std::string key = "grad.in." + std::to_string(i);
    if (f.count(key)) expect_close(ins[i].grad(), f.at(key), key);
  }
  int grads = 0;
  for (auto& [n, p] : m->named_parameters()) {
    const std::string key = "grad.param." + n;
    if (f.count(key)) {
      expect_close(p.grad(), f.at(key), key);
      ++grads;
    } else {
      EXPECT_FALSE(p.grad().defined()) << n << " got a gradient torch did not";
    }
  }
  for (auto& [k, v] : f)
    if (k.rfind("grad.param.", 0) == 0) EXPECT_TRUE(m->has_parameter(k.substr(11)) || grads > 0) << k;
  for (auto& [k, v] : m->state_dict()) {
    auto it = f.find("after." + k);
    ASSERT_NE(it, f.end()) << "after." << k;
    expect_close(v, it->second, "after." + k);
  }
}

RunFn one() {
  return [](Module& m, const Ins& x, const Fixture&) { return std::vector<Tensor>{m.forward(x[0])}; };
}

template <class M>
std::shared_ptr<M> as(Module& m) {
  return std::dynamic_pointer_cast<M>(m.shared_from_this());
}

// ---- linear / embedding ------------------------------------------------------------------------

TEST(NnParity, Linear) {
  check_case("linear", std::make_shared<Linear>(4, 3), one());
  auto m = std::make_shared<Linear>(5, 2, false);
  m->to(DType::Float64);
  check_case("linear_nobias_f64", m, one());
}

TEST(NnParity, Bilinear) {
  check_case("bilinear", std::make_shared<Bilinear>(3, 4, 2), [](Module& m, const Ins& x, const Fixture&) {
    return std::vector<Tensor>{static_cast<Bilinear&>(m).forward(x[0], x[1])};
  });
}

TEST(NnParity, Embedding) {
  check_case("embedding", std::make_shared<Embedding>(10, 4, EmbeddingOptions{.padding_idx = 1}), one());
  check_case("embedding_max_norm", std::make_shared<Embedding>(10, 4, EmbeddingOptions{.max_norm = 1.5}), one());
  check_case("embedding_scale_grad", std::make_shared<Embedding>(6, 3, EmbeddingOptions{.scale_grad_by_freq = true}),
             one());
}

// ---- normalisation -----------------------------------------------------------------------------

template <class M>
std::shared_ptr<M> f64(std::shared_ptr<M> m) {
  m->to(DType::Float64);
  return m;
}

TEST(NnParity, LayerNorm) {
  check_case("layer_norm", std::make_shared<LayerNorm>(6), one());
  check_case("layer_norm_2d_f64", f64(std::make_shared<LayerNorm>(std::vector<int64_t>{4, 6}, 1e-3)), one());
  check_case("layer_norm_noaffine", std::make_shared<LayerNorm>(5, 1e-5, false), one());
}

TEST(NnParity, RMSNorm) {
  check_case("rms_norm", std::make_shared<RMSNorm>(6), one());
  check_case("rms_norm_eps_f64", f64(std::make_shared<RMSNorm>(std::vector<int64_t>{4, 6}, 1e-4)), one());
}

TEST(NnParity, GroupNorm) {
  check_case("group_norm", std::make_shared<GroupNorm>(2, 6), one());
  check_case("group_norm_4d_f64", f64(std::make_shared<GroupNorm>(3, 6, 1e-4)), one());
}

TEST(NnParity, BatchNorm) {
  RunFn two = [](Module& m, const Ins& x, const Fixture&) { return std::vector<Tensor>{m.forward(x[0]), m.forward(x[1])}; };
  check_case("batch_norm1d_train", std::make_shared<BatchNorm1d>(4), two);
  check_case("batch_norm1d_3d_cma", std::make_shared<BatchNorm1d>(3, BatchNormOptions{.momentum = std::nullopt}), two);
  check_case("batch_norm2d_eval", std::make_shared<BatchNorm2d>(3), one(), false);
  check_case("batch_norm2d_train_f64", f64(std::make_shared<BatchNorm2d>(3, BatchNormOptions{.momentum = 0.3})), one());
  check_case("batch_norm2d_no_stats",
             std::make_shared<BatchNorm2d>(3, BatchNormOptions{.affine = false, .track_running_stats = false}), one(),
             false);
}

// ---- convolution / pooling ---------------------------------------------------------------------

TEST(NnParity, Conv) {
  check_case("conv1d", std::make_shared<Conv1d>(3, 4, 3, ConvOptions{.stride = {2}, .padding = 1}), one());
  check_case("conv1d_same_reflect",
             std::make_shared<Conv1d>(2, 3, 4, ConvOptions{.padding = "same", .dilation = {2}, .padding_mode = "reflect"}),
             one());
  check_case("conv1d_unbatched_f64", f64(std::make_shared<Conv1d>(2, 4, 3, ConvOptions{.groups = 2, .bias = false})),
             one());
  check_case("conv2d",
             std::make_shared<Conv2d>(4, 6, std::vector<int64_t>{3, 2},
                                      ConvOptions{.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}, .groups = 2}),
             one());
  check_case("conv2d_same_even", std::make_shared<Conv2d>(2, 3, 4, ConvOptions{.padding = "same"}), one());
  check_case("conv2d_circular", std::make_shared<Conv2d>(2, 3, 3, ConvOptions{.padding = 1, .padding_mode = "circular"}),
             one());
  check_case("conv2d_replicate_f64",
             f64(std::make_shared<Conv2d>(2, 2, std::vector<int64_t>{2, 3},
                                          ConvOptions{.padding = {1, 2}, .padding_mode = "replicate"})),
             one());
}

TEST(NnParity, ConvTranspose2d) {
  check_case("conv_transpose2d",
             std::make_shared<ConvTranspose2d>(
                 4, 2, 3, ConvTransposeOptions{.stride = {2}, .padding = {1}, .output_padding = {1}, .groups = 2}),
             one());
  check_case("conv_transpose2d_output_size",
             std::make_shared<ConvTranspose2d>(2, 3, std::vector<int64_t>{3, 2},
                                               ConvTransposeOptions{.stride = {2, 3}, .dilation = {1, 2}}),
             [](Module& m, const Ins& x, const Fixture&) {
               return std::vector<Tensor>{static_cast<ConvTranspose2d&>(m).forward(x[0], {8, 14})};
             });
}

TEST(NnParity, Pooling) {
  check_case("max_pool2d", std::make_shared<MaxPool2d>(3, MaxPool2dOptions{.stride = {2}, .padding = {1}}), one());
  check_case("max_pool2d_ceil_dilation",
             std::make_shared<MaxPool2d>(std::vector<int64_t>{2, 3},
                                         MaxPool2dOptions{.stride = {2, 2}, .dilation = {1, 2}, .ceil_mode = true}),
             one());
  check_case("avg_pool2d",
             std::make_shared<AvgPool2d>(3, AvgPool2dOptions{.stride = {2}, .padding = {1}, .count_include_pad = false}),
             one());
  check_case("avg_pool2d_ceil_divisor",
             std::make_shared<AvgPool2d>(2, AvgPool2dOptions{.ceil_mode = true, .divisor_override = 3}), one());
  check_case("adaptive_avg_pool2d",
             std::make_shared<AdaptiveAvgPool2d>(std::vector<std::optional<int64_t>>{3, std::nullopt}), one());
  check_case("adaptive_avg_pool2d_sq", std::make_shared<AdaptiveAvgPool2d>(4), one());
}

// ---- attention ---------------------------------------------------------------------------------

// Masks come from the fixture (extra.<name>); an absent one is None.
Tensor extra(const Fixture& f, const std::string& name) {
  auto it = f.find("extra." + name);
  return it == f.end() ? Tensor() : it->second;
}

RunFn mha(bool need_weights, bool average) {
  return [=](Module& m, const Ins& x, const Fixture& f) {
    const Tensor& q = x[0];
    const Tensor& k = x.size() > 1 ? x[1] : q;
    const Tensor& v = x.size() > 2 ? x[2] : k;
    auto [o, w] = static_cast<MultiheadAttention&>(m).forward(q, k, v, extra(f, "key_padding_mask"), need_weights,
                                                              extra(f, "attn_mask"), average);
    return std::vector<Tensor>{o, w};
  };
}

TEST(NnParity, MultiheadAttention) {
  check_case("mha_self_masks", std::make_shared<MultiheadAttention>(8, 2), mha(true, true));
  check_case("mha_cross_batch_first_kdim",
             std::make_shared<MultiheadAttention>(8, 4,
                                                  MultiheadAttentionOptions{.add_bias_kv = true,
                                                                            .add_zero_attn = true,
                                                                            .kdim = 6,
                                                                            .vdim = 5,
                                                                            .batch_first = true}),
             mha(true, false));
  check_case("mha_no_weights_3d_mask",
             std::make_shared<MultiheadAttention>(8, 2, MultiheadAttentionOptions{.bias = false}), mha(false, true));
  check_case("mha_unbatched_f64", f64(std::make_shared<MultiheadAttention>(4, 2)), mha(true, true));
}

TEST(NnParity, TransformerEncoderLayer) {
  RunFn enc = [](Module& m, const Ins& x, const Fixture& f) {
    return std::vector<Tensor>{
        static_cast<TransformerEncoderLayer&>(m).forward(x[0], extra(f, "src_mask"), extra(f, "key_padding_mask"))};
  };
  for (bool nf : {false, true})
    check_case(std::string("transformer_encoder_norm_first_") + (nf ? "1" : "0"),
               std::make_shared<TransformerEncoderLayer>(
                   8, 2, TransformerLayerOptions{.dim_feedforward = 16, .dropout = 0.0, .norm_first = nf}),
               enc);
  check_case("transformer_encoder_gelu_batch_first",
             std::make_shared<TransformerEncoderLayer>(
                 8, 2,
                 TransformerLayerOptions{
                     .dim_feedforward = 16, .dropout = 0.0, .activation = "gelu", .batch_first = true}),
             enc);
}

TEST(NnParity, TransformerDecoderLayer) {
  RunFn dec = [](Module& m, const Ins& x, const Fixture& f) {
    return std::vector<Tensor>{static_cast<TransformerDecoderLayer&>(m).forward(
        x[0], x[1], extra(f, "tgt_mask"), Tensor(), Tensor(), extra(f, "memory_key_padding_mask"))};
  };
  for (bool nf : {false, true})
    check_case(std::string("transformer_decoder_norm_first_") + (nf ? "1" : "0"),
               std::make_shared<TransformerDecoderLayer>(
                   8, 2, TransformerLayerOptions{.dim_feedforward = 16, .dropout = 0.0, .norm_first = nf}),
               dec);
}

// ---- recurrent ---------------------------------------------------------------------------------

TEST(NnParity, LSTM) {
  RunFn run = [](Module& m, const Ins& x, const Fixture&) {
    auto [o, h, c] = static_cast<LSTM&>(m).forward_with_state(x[0], x.size() > 1 ? x[1] : Tensor(),
                                                               x.size() > 2 ? x[2] : Tensor());
    return std::vector<Tensor>{o, h, c};
  };
  check_case("lstm_2layer_bidir_batch_first",
             std::make_shared<LSTM>(3, 4, RNNOptions{.num_layers = 2, .batch_first = true, .bidirectional = true}), run);
  check_case("lstm_proj_f64", f64(std::make_shared<LSTM>(3, 5, RNNOptions{.proj_size = 2})), run);
}

TEST(NnParity, GRU) {
  RunFn run = [](Module& m, const Ins& x, const Fixture&) {
    auto [o, h] = static_cast<GRU&>(m).forward_with_state(x[0], x.size() > 1 ? x[1] : Tensor());
    return std::vector<Tensor>{o, h};
  };
  check_case("gru_2layer_bidir_batch_first",
             std::make_shared<GRU>(3, 4, RNNOptions{.num_layers = 2, .batch_first = true, .bidirectional = true}), run);
  check_case("gru_unbatched_nobias", std::make_shared<GRU>(3, 4, RNNOptions{.bias = false}), run);
}

// ---- containers --------------------------------------------------------------------------------

TEST(NnParity, Sequential) {
  auto seq = std::make_shared<Sequential>(std::make_shared<Linear>(4, 8), std::make_shared<ReLU>(),
                                          std::make_shared<Dropout>(0.0), std::make_shared<Linear>(8, 2),
                                          std::make_shared<Tanh>());
  check_case("sequential", seq, one());
}

// ---- activations and losses --------------------------------------------------------------------

TEST(NnParity, Activations) {
  Fixture f = load("activations");
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> acts = {
      {"relu", std::make_shared<ReLU>()},
      {"gelu", std::make_shared<GELU>()},
      {"gelu_tanh", std::make_shared<GELU>("tanh")},
      {"silu", std::make_shared<SiLU>()},
      {"tanh", std::make_shared<Tanh>()},
      {"sigmoid", std::make_shared<Sigmoid>()},
      {"leaky_relu", std::make_shared<LeakyReLU>(0.2)},
      {"elu", std::make_shared<ELU>(0.7)},
      {"selu", std::make_shared<SELU>()},
      {"celu", std::make_shared<CELU>(1.3)},
      {"softplus", std::make_shared<Softplus>(2.0, 3.0)},
      {"softsign", std::make_shared<Softsign>()},
      {"hardtanh", std::make_shared<Hardtanh>(-0.5, 1.5)},
      {"relu6", std::make_shared<ReLU6>()},
      {"hardsigmoid", std::make_shared<Hardsigmoid>()},
      {"hardswish", std::make_shared<Hardswish>()},
      {"mish", std::make_shared<Mish>()},
      {"logsigmoid", std::make_shared<LogSigmoid>()},
      {"softmax", std::make_shared<Softmax>(1)},
      {"log_softmax", std::make_shared<LogSoftmax>(-1)},
      {"softmax_legacy", std::make_shared<Softmax>()},
  };
  for (auto& [name, m] : acts) {
    SCOPED_TRACE(name);
    Tensor x = f.at("x").clone();
    x.requires_grad_(true);
    Tensor y = (*m)(x);
    expect_close(y, f.at(name + ".out"), name + ".out");
    autograd::backward({y}, {f.at("gout")});
    expect_close(x.grad(), f.at(name + ".grad"), name + ".grad");
  }
}

TEST(NnParity, Losses) {
  Fixture f = load("losses");
  struct L {
    std::string name;
    std::shared_ptr<Loss> loss;
  };
  // Class weights and pos_weight are the fixture's extra.* tensors.
  std::vector<L> losses = {
      {"cross_entropy", std::make_shared<CrossEntropyLoss>()},
      {"cross_entropy_weight_ignore_smooth",
       std::make_shared<CrossEntropyLoss>(CrossEntropyLossOptions{.weight = f.at("extra.w5"), .label_smoothing = 0.1})},
      {"cross_entropy_probs_sum", std::make_shared<CrossEntropyLoss>(CrossEntropyLossOptions{.reduction = "sum"})},
      {"cross_entropy_4d_none", std::make_shared<CrossEntropyLoss>(CrossEntropyLossOptions{.reduction = "none"})},
      {"nll_loss_weight", std::make_shared<NLLLoss>(NLLLossOptions{.weight = f.at("extra.w5")})},
      {"mse_loss", std::make_shared<MSELoss>()},
      {"mse_loss_none", std::make_shared<MSELoss>("none")},
      {"l1_loss_sum", std::make_shared<L1Loss>("sum")},
      {"smooth_l1_loss", std::make_shared<SmoothL1Loss>("mean", 0.5)},
      {"huber_loss", std::make_shared<HuberLoss>("mean", 0.7)},
      {"bce_loss_weight", std::make_shared<BCELoss>(f.at("extra.bce_weight"))},
      {"bce_with_logits_pos_weight", std::make_shared<BCEWithLogitsLoss>(Tensor(), "mean", f.at("extra.pos_weight"))},
      {"kl_div_batchmean", std::make_shared<KLDivLoss>("batchmean")},
      {"kl_div_log_target_sum", std::make_shared<KLDivLoss>("sum", true)},
  };
  for (auto& [name, loss] : losses) {
    SCOPED_TRACE(name);
    Tensor x = f.at(name + ".input").clone();
    x.requires_grad_(true);
    Tensor y = (*loss)(x, f.at(name + ".target"));
    expect_close(y, f.at(name + ".out"), name + ".out");
    autograd::backward({y}, {f.at(name + ".gout")});
    expect_close(x.grad(), f.at(name + ".grad"), name + ".grad");
  }
}

}  // namespace
}  // namespace foundry::nn
