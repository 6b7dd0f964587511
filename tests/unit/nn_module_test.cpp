// nn::Module behaviour: registration order and dotted names, state_dict/load_state_dict and its
// errors, train/eval, to(dtype), zero_grad, apply, weight tying, parameter counts, the printed
// tree (strings taken from PyTorch 1.13's repr), and the small layers without parity fixtures.
#include <gtest/gtest.h>

#include <cmath>

#include "foundry/autograd/autograd.h"
#include "foundry/autograd/grad_mode.h"
#include "foundry/nn/layers.h"
#include "foundry/ops/ops.h"

namespace foundry::nn {
namespace {

std::vector<std::string> keys(const NamedTensors& v) {
  std::vector<std::string> k;
  for (auto& [n, t] : v) k.push_back(n);
  return k;
}

// A user-defined module: own parameters and buffers, then children, registered in this order.
class Block : public Module {
 public:
  Block() {
    register_parameter("scale", ones({4}));
    fc = register_module("fc", std::make_shared<Linear>(4, 4));
    register_buffer("step", zeros({}, DType::Int64));
    register_buffer("cache", zeros({2}), /*persistent=*/false);
    norm = register_module("norm", std::make_shared<LayerNorm>(4));
  }
  std::string type_name() const override { return "Block"; }
  Tensor forward(const Tensor& x) override { return norm->forward(fc->forward(x) * parameter("scale")); }
  std::shared_ptr<Linear> fc;
  std::shared_ptr<LayerNorm> norm;
};

class Net : public Module {
 public:
  Net() {
    emb = register_module("emb", std::make_shared<Embedding>(10, 4));
    blocks = register_module("blocks", std::make_shared<ModuleList>());
    for (int i = 0; i < 2; ++i) blocks->append(std::make_shared<Block>());
    head = register_module("head", std::make_shared<Linear>(4, 10, false));
    head->weight = emb->weight;  // tied, as GPT-2's lm_head and wte
  }
  std::string type_name() const override { return "Net"; }
  Tensor forward(const Tensor& idx) override {
    Tensor x = emb->forward(idx);
    for (auto& b : *blocks) x = b->forward(x);
    return head->forward(x);
  }
  std::shared_ptr<Embedding> emb;
  std::shared_ptr<ModuleList> blocks;
  std::shared_ptr<Linear> head;
};

TEST(NnModule, NamedParametersOrderAndNames) {
  Net net;
  std::vector<std::string> want = {"emb.weight",
                                   "blocks.0.scale", "blocks.0.fc.weight", "blocks.0.fc.bias", "blocks.0.norm.weight",
                                   "blocks.0.norm.bias",
                                   "blocks.1.scale", "blocks.1.fc.weight", "blocks.1.fc.bias", "blocks.1.norm.weight",
                                   "blocks.1.norm.bias"};
  EXPECT_EQ(keys(net.named_parameters()), want);  // the tied head.weight is listed once
  EXPECT_EQ(keys(net.named_parameters(false)).size(), 0u);
  EXPECT_EQ(keys(net.blocks->child("0")->named_parameters(false)), std::vector<std::string>{"scale"});
  EXPECT_EQ(keys(net.named_buffers()),
            (std::vector<std::string>{"blocks.0.step", "blocks.0.cache", "blocks.1.step", "blocks.1.cache"}));
  std::vector<std::string> mods;
  for (auto& [n, m] : net.named_modules()) mods.push_back(n + ":" + m->type_name());
  EXPECT_EQ(mods, (std::vector<std::string>{":Net", "emb:Embedding", "blocks:ModuleList", "blocks.0:Block",
                                            "blocks.0.fc:Linear", "blocks.0.norm:LayerNorm", "blocks.1:Block",
                                            "blocks.1.fc:Linear", "blocks.1.norm:LayerNorm", "head:Linear"}));
  EXPECT_EQ(keys(net.named_parameters()).size(), net.parameters().size());
  std::vector<std::string> children;
  for (auto& [n, m] : net.named_children()) children.push_back(n);
  EXPECT_EQ(children, (std::vector<std::string>{"emb", "blocks", "head"}));
  EXPECT_EQ(net.get_submodule("blocks.1.fc")->type_name(), "Linear");
  EXPECT_THROW(net.get_submodule("blocks.7"), IndexError);
}

TEST(NnModule, StateDictHasPersistentBuffersAndTiedNames) {
  Net net;
  std::vector<std::string> want = {"emb.weight",
                                   "blocks.0.scale", "blocks.0.step", "blocks.0.fc.weight", "blocks.0.fc.bias",
                                   "blocks.0.norm.weight", "blocks.0.norm.bias",
                                   "blocks.1.scale", "blocks.1.step", "blocks.1.fc.weight", "blocks.1.fc.bias",
                                   "blocks.1.norm.weight", "blocks.1.norm.bias", "head.weight"};
  NamedTensors sd = net.state_dict();
  EXPECT_EQ(keys(sd), want);
  EXPECT_EQ(sd.front().second.data_ptr(), sd.back().second.data_ptr());  // tied: one storage, two names
  EXPECT_FALSE(sd.front().second.requires_grad());                     // detached, as keep_vars=False
  EXPECT_EQ(sd.front().second.data_ptr(), net.emb->weight.data_ptr());
  // PyTorch's BatchNorm keys.
  Sequential seq(std::make_shared<Conv2d>(1, 2, 3), std::make_shared<BatchNorm2d>(2));
  EXPECT_EQ(keys(seq.state_dict()), (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias",
                                                             "1.running_mean", "1.running_var",
                                                             "1.num_batches_tracked"}));
  // Loss weights are buffers; an undefined one (None) is not in the state_dict.
  EXPECT_EQ(keys(CrossEntropyLoss({.weight = ones({3})}).state_dict()), std::vector<std::string>{"weight"});
  EXPECT_TRUE(CrossEntropyLoss().state_dict().empty());
  EXPECT_TRUE(Linear(2, 2, false).state_dict().size() == 1);
}

TEST(NnModule, TiedWeightsShareGradients) {
  Net net;
  Tensor idx = tensor<int64_t>({1, 2, 3}, {3});
  Tensor y = net(idx);
  y.sum().backward();
  EXPECT_TRUE(net.head->weight.is_same(net.emb->weight));
  Tensor g = net.emb->weight.grad();
  ASSERT_TRUE(g.defined());
  // Rows never looked up get gradient only through the head.
  EXPECT_GT(abs(g.select(0, 7)).sum().item<double>(), 0.0);
  EXPECT_EQ(net.num_parameters(), 10 * 4 + 2 * (4 + 16 + 4 + 4 + 4));
}

TEST(NnModule, LoadStateDictRoundTripAndErrors) {
  Net a, b;
  a.load_state_dict(b.state_dict());
  for (size_t i = 0; i < a.parameters().size(); ++i)
    EXPECT_TRUE(equal(a.parameters()[i], b.parameters()[i]));
  // The copy happened into the existing tensors (handles stay valid) and kept requires_grad.
  EXPECT_FALSE(a.emb->weight.is_same(b.emb->weight));
  EXPECT_TRUE(a.emb->weight.requires_grad());
  EXPECT_TRUE(a.emb->weight.is_leaf());

  NamedTensors sd = b.state_dict();
  sd.erase(sd.begin() + 1);                              // missing blocks.0.scale
  sd.emplace_back("blocks.0.extra", zeros({1}));         // unexpected
  sd.emplace_back("bogus", zeros({1}));                  // unexpected
  sd[2].second = zeros({5, 4});                          // blocks.0.fc.weight: shape mismatch
  Tensor before = a.blocks->at<Block>(1)->fc->weight.clone();
  try {
    a.load_state_dict(sd);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("Error(s) in loading state_dict for Net:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Missing key(s) in state_dict: \"blocks.0.scale\"."), std::string::npos) << msg;
    EXPECT_NE(msg.find("Unexpected key(s) in state_dict: \"blocks.0.extra\", \"bogus\"."), std::string::npos) << msg;
    EXPECT_NE(msg.find("size mismatch for blocks.0.fc.weight: copying a param with shape [5, 4] from checkpoint, the "
                       "shape in current model is [4, 4]."),
              std::string::npos)
        << msg;
  }
  // Nothing was copied.
  EXPECT_TRUE(equal(a.blocks->at<Block>(1)->fc->weight, before));

  // strict = false: missing/unexpected are returned, shape mismatches still raise.
  sd[2].second = b.blocks->at<Block>(0)->fc->weight;
  IncompatibleKeys k = a.load_state_dict(sd, false);
  EXPECT_EQ(k.missing_keys, std::vector<std::string>{"blocks.0.scale"});
  EXPECT_EQ(k.unexpected_keys, (std::vector<std::string>{"blocks.0.extra", "bogus"}));
  EXPECT_TRUE(equal(a.blocks->at<Block>(1)->fc->weight, b.blocks->at<Block>(1)->fc->weight));
  sd[2].second = zeros({4});
  EXPECT_THROW(a.load_state_dict(sd, false), Error);

  // dtype conversion on load (float64 checkpoint into float32 parameters).
  Linear l1(3, 2), l2(3, 2);
  NamedTensors d64;
  for (auto& [n, t] : l2.state_dict()) d64.emplace_back(n, t.to(DType::Float64));
  l1.load_state_dict(d64);
  EXPECT_EQ(l1.weight.dtype(), DType::Float32);
  EXPECT_TRUE(allclose(l1.weight, l2.weight));
}

TEST(NnModule, TrainEvalPropagates) {
  Net net;
  EXPECT_TRUE(net.is_training());
  net.eval();
  for (auto& m : net.modules()) EXPECT_FALSE(m->is_training()) << m->type_name();
  net.train();
  for (auto& m : net.modules()) EXPECT_TRUE(m->is_training());

  Dropout d(0.5);
  Tensor x = ones({1000});
  d.eval();
  EXPECT_TRUE(equal(d(x), x));
  d.train();
  Tensor y = d(x);
  auto v = y.to_vector<float>();
  int zeros_n = 0;
  for (float e : v) {
    EXPECT_TRUE(e == 0.0f || std::abs(e - 2.0f) < 1e-6);
    zeros_n += e == 0.0f;
  }
  EXPECT_NEAR(zeros_n / 1000.0, 0.5, 0.08);
  EXPECT_THROW(Dropout(1.5), ValueError);

  // BatchNorm: eval uses the running statistics and leaves them alone.
  BatchNorm1d bn(2);
  Tensor in = tensor<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  bn(in);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  EXPECT_TRUE(allclose(bn.running_mean, tensor<float>({0.3f, 0.4f})));
  bn.eval();
  Tensor rm = bn.running_mean.clone();
  Tensor out = bn(in);
  EXPECT_TRUE(equal(bn.running_mean, rm));
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  Tensor want = (in - bn.running_mean) / sqrt(bn.running_var + 1e-5);
  EXPECT_TRUE(allclose(out, want, 1e-5, 1e-6));
  EXPECT_THROW(bn(zeros({2, 2, 2, 2})), ValueError);
}

TEST(NnModule, ToDtypeConvertsInPlace) {
  Sequential m(std::make_shared<Linear>(3, 2), std::make_shared<BatchNorm1d>(2));
  Tensor w = m.at<Linear>(0)->weight;  // a handle held elsewhere (an optimizer would)
  m(randn({4, 3})).sum().backward();
  m.to(DType::Float64);
  EXPECT_EQ(w.dtype(), DType::Float64);
  EXPECT_TRUE(w.is_same(m.at<Linear>(0)->weight));
  EXPECT_TRUE(w.requires_grad());
  EXPECT_EQ(w.grad().dtype(), DType::Float64);
  EXPECT_EQ(m.at<BatchNorm1d>(1)->running_mean.dtype(), DType::Float64);
  EXPECT_EQ(m.at<BatchNorm1d>(1)->num_batches_tracked.dtype(), DType::Int64);  // integer buffers stay
  Tensor y = m(randn({4, 3}, DType::Float64));
  EXPECT_EQ(y.dtype(), DType::Float64);
  m.to(DType::BFloat16);
  EXPECT_EQ(w.dtype(), DType::BFloat16);
  EXPECT_THROW(m.to(DType::Int32), TypeError);
}

TEST(NnModule, ZeroGrad) {
  Linear l(3, 2);
  l(ones({1, 3})).sum().backward();
  ASSERT_TRUE(l.weight.grad().defined());
  l.zero_grad(false);
  ASSERT_TRUE(l.weight.grad().defined());
  EXPECT_EQ(abs(l.weight.grad()).sum().item<double>(), 0.0);
  l(ones({1, 3})).sum().backward();
  EXPECT_TRUE(allclose(l.weight.grad(), ones({2, 3})));
  l.zero_grad();
  EXPECT_FALSE(l.weight.grad().defined());
  EXPECT_FALSE(l.bias.grad().defined());
}

TEST(NnModule, ApplyVisitsChildrenFirst) {
  Net net;
  std::vector<std::string> order;
  net.apply([&](Module& m) { order.push_back(m.type_name()); });
  EXPECT_EQ(order, (std::vector<std::string>{"Embedding", "Linear", "LayerNorm", "Block", "Linear", "LayerNorm", "Block",
                                             "ModuleList", "Linear", "Net"}));
  // The usual use: re-initialise every Linear.
  net.apply([](Module& m) {
    if (auto* l = dynamic_cast<Linear*>(&m); l && l->bias.defined()) init::zeros_(l->bias);
  });
  EXPECT_EQ(abs(net.blocks->at<Block>(0)->fc->bias).sum().item<double>(), 0.0);
}

TEST(NnModule, RegistrationRules) {
  Linear l(2, 2);
  EXPECT_THROW(l.register_parameter("a.b", ones({1})), ValueError);
  EXPECT_THROW(l.register_parameter("", ones({1})), ValueError);
  EXPECT_THROW(l.register_buffer("weight", ones({1})), ValueError);  // already a parameter
  // Replacing keeps the position (PyTorch's dict assignment).
  l.register_parameter("weight", zeros({2, 2}));
  EXPECT_EQ(keys(l.named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(abs(l.weight).sum().item<double>(), 0.0);  // the member sees the new tensor
  EXPECT_TRUE(l.weight.requires_grad());
  // A non-leaf becomes a fresh leaf sharing storage.
  Tensor base = ones({2});
  base.requires_grad_(true);
  Tensor& p = l.register_parameter("extra", base * 2.0);
  EXPECT_TRUE(p.is_leaf());
  EXPECT_TRUE(p.requires_grad());
  Tensor& q = l.register_parameter("frozen", ones({2}), false);
  EXPECT_FALSE(q.requires_grad());
  EXPECT_EQ(l.num_parameters(), 4 + 2 + 2 + 2);
  EXPECT_EQ(l.num_parameters(true), 4 + 2 + 2);
  EXPECT_THROW(l.register_parameter("ints", ones({2}, DType::Int64)), TypeError);
  EXPECT_THROW(l.forward(ones({3, 3})), Error);
  Identity id;
  EXPECT_THROW(id.parameter("w"), IndexError);
}

TEST(NnModule, PrintsLikePyTorch) {
  Sequential cnn(std::make_shared<Conv2d>(3, 8, 3, ConvOptions{.padding = 1, .bias = false}),
                 std::make_shared<BatchNorm2d>(8, BatchNormOptions{.momentum = std::nullopt}),
                 std::make_shared<ReLU>(true), std::make_shared<MaxPool2d>(2), std::make_shared<Flatten>(),
                 std::make_shared<Linear>(128, 10), std::make_shared<Dropout>(0.25), std::make_shared<LogSoftmax>(1));
  EXPECT_EQ(cnn.str(),
            "Sequential(\n  (0): Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)\n  (1): "
            "BatchNorm2d(8, eps=1e-05, momentum=None, affine=True, track_running_stats=True)\n  (2): ReLU(inplace=True)\n "
            " (3): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)\n  (4): "
            "Flatten(start_dim=1, end_dim=-1)\n  (5): Linear(in_features=128, out_features=10, bias=True)\n  (6): "
            "Dropout(p=0.25, inplace=False)\n  (7): LogSoftmax(dim=1)\n)");
  TransformerDecoderLayer dec(8, 2, {.dim_feedforward = 16, .batch_first = true});
  EXPECT_EQ(dec.str(),
            "TransformerDecoderLayer(\n  (self_attn): MultiheadAttention(\n    (out_proj): "
            "NonDynamicallyQuantizableLinear(in_features=8, out_features=8, bias=True)\n  )\n  (multihead_attn): "
            "MultiheadAttention(\n    (out_proj): NonDynamicallyQuantizableLinear(in_features=8, out_features=8, "
            "bias=True)\n  )\n  (linear1): Linear(in_features=8, out_features=16, bias=True)\n  (dropout): Dropout(p=0.1, "
            "inplace=False)\n  (linear2): Linear(in_features=16, out_features=8, bias=True)\n  (norm1): LayerNorm((8,), "
            "eps=1e-05, elementwise_affine=True)\n  (norm2): LayerNorm((8,), eps=1e-05, elementwise_affine=True)\n  "
            "(norm3): LayerNorm((8,), eps=1e-05, elementwise_affine=True)\n  (dropout1): Dropout(p=0.1, inplace=False)\n  "
            "(dropout2): Dropout(p=0.1, inplace=False)\n  (dropout3): Dropout(p=0.1, inplace=False)\n)");
  ModuleDict d({
      {"enc", std::make_shared<LSTM>(4, 8, RNNOptions{.num_layers = 2, .batch_first = true, .dropout = 0.1,
                                                      .bidirectional = true})},
      {"emb", std::make_shared<Embedding>(100, 8, EmbeddingOptions{.padding_idx = -1, .max_norm = 2.0})},
      {"gru", std::make_shared<GRU>(3, 4, RNNOptions{.bias = false})},
      {"ln", std::make_shared<LayerNorm>(std::vector<int64_t>{4, 8}, 1e-5, false)},
      {"gn", std::make_shared<GroupNorm>(2, 8, 1e-5, false)},
      {"ct", std::make_shared<ConvTranspose2d>(4, 2, std::vector<int64_t>{3, 2},
                                               ConvTransposeOptions{.stride = {2}, .padding = {1}, .output_padding = {1},
                                                                    .groups = 2, .dilation = {2}})},
      {"c1", std::make_shared<Conv1d>(2, 4, 3, ConvOptions{.padding = "same", .bias = false, .padding_mode = "reflect"})},
      {"ap", std::make_shared<AvgPool2d>(std::vector<int64_t>{2, 3}, AvgPool2dOptions{.stride = {1}})},
      {"aap", std::make_shared<AdaptiveAvgPool2d>(3)},
      {"bil", std::make_shared<Bilinear>(2, 3, 4, false)},
      {"ml", std::make_shared<ModuleList>(std::make_shared<Identity>(), std::make_shared<Softplus>(2.5),
                                          std::make_shared<LeakyReLU>(0.2, true), std::make_shared<GELU>("tanh"),
                                          std::make_shared<Hardtanh>(0.0, 2.0))},
      {"un", std::make_shared<Unflatten>(1, std::vector<int64_t>{2, 4})},
      {"bce", std::make_shared<BCEWithLogitsLoss>()},
      {"ce", std::make_shared<CrossEntropyLoss>(CrossEntropyLossOptions{.weight = ones({3})})},
  });
  EXPECT_EQ(d.str(),
            "ModuleDict(\n  (enc): LSTM(4, 8, num_layers=2, batch_first=True, dropout=0.1, bidirectional=True)\n  (emb): "
            "Embedding(100, 8, padding_idx=99, max_norm=2.0)\n  (gru): GRU(3, 4, bias=False)\n  (ln): LayerNorm((4, 8), "
            "eps=1e-05, elementwise_affine=False)\n  (gn): GroupNorm(2, 8, eps=1e-05, affine=False)\n  (ct): "
            "ConvTranspose2d(4, 2, kernel_size=(3, 2), stride=(2, 2), padding=(1, 1), dilation=(2, 2), "
            "output_padding=(1, 1), groups=2)\n  (c1): Conv1d(2, 4, kernel_size=(3,), stride=(1,), padding=same, "
            "bias=False, padding_mode=reflect)\n  (ap): AvgPool2d(kernel_size=(2, 3), stride=1, padding=0)\n  (aap): "
            "AdaptiveAvgPool2d(output_size=3)\n  (bil): Bilinear(in1_features=2, in2_features=3, out_features=4, "
            "bias=False)\n  (ml): ModuleList(\n    (0): Identity()\n    (1): Softplus(beta=2.5, threshold=20)\n    (2): "
            "LeakyReLU(negative_slope=0.2, inplace=True)\n    (3): GELU(approximate='tanh')\n    (4): "
            "Hardtanh(min_val=0.0, max_val=2.0)\n  )\n  (un): Unflatten(dim=1, unflattened_size=(2, 4))\n  (bce): "
            "BCEWithLogitsLoss()\n  (ce): CrossEntropyLoss()\n)");
  EXPECT_EQ(keys(d.state_dict()).back(), "ce.weight");
  EXPECT_EQ(d.keys().front(), "enc");
  EXPECT_TRUE(d.contains("gru"));
  EXPECT_THROW(d["nope"], IndexError);
}

TEST(NnModule, ContainersAndSmallLayers) {
  auto seq = std::make_shared<Sequential>();
  seq->append(std::make_shared<Linear>(4, 3));
  seq->push_back(std::make_shared<Tanh>());
  EXPECT_EQ(seq->size(), 2u);
  EXPECT_EQ((*seq)[-1]->type_name(), "Tanh");
  EXPECT_THROW((*seq)[2], IndexError);
  EXPECT_EQ(shape_str((*seq)(ones({5, 4})).sizes()), "[5, 3]");
  Sequential named({{"fc", std::make_shared<Linear>(2, 2)}, {"act", std::make_shared<ReLU>()}});
  EXPECT_EQ(keys(named.state_dict()), (std::vector<std::string>{"fc.weight", "fc.bias"}));

  EXPECT_EQ(shape_str(Flatten()(ones({2, 3, 4, 5})).sizes()), "[2, 60]");
  EXPECT_EQ(shape_str(Flatten(0, 2)(ones({2, 3, 4, 5})).sizes()), "[24, 5]");
  EXPECT_EQ(shape_str(Unflatten(1, {3, 4})(ones({2, 12})).sizes()), "[2, 3, 4]");
  Tensor x = randn({2, 3});
  EXPECT_TRUE(Identity()(x).is_same(x));

  // MaxPool2d indices; legacy softmax dim.
  MaxPool2d mp(2);
  Tensor img = arange(16, DType::Float32).reshape({1, 1, 4, 4});
  auto [v, i] = mp.forward_with_indices(img);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{5, 7, 13, 15}));
  EXPECT_EQ(v.to_vector<float>(), (std::vector<float>{5, 7, 13, 15}));
  EXPECT_TRUE(allclose(Softmax()(x), softmax(x, 1)));
  EXPECT_TRUE(allclose(Softmax()(ones({2, 3, 4})), softmax(ones({2, 3, 4}), 0)));

  // Embedding.from_pretrained: frozen by default, values copied.
  Tensor table = arange(6, DType::Float32).reshape({3, 2});
  auto emb = Embedding::from_pretrained(table);
  EXPECT_FALSE(emb->weight.requires_grad());
  EXPECT_TRUE(equal(emb->weight, table));
  EXPECT_EQ(emb->parameters().size(), 1u);
  EXPECT_TRUE(Embedding::from_pretrained(table, false)->weight.requires_grad());
  EXPECT_THROW(Embedding(3, 2, {.padding_idx = 3}), ValueError);

  // Transformer helper mask.
  Tensor m = generate_square_subsequent_mask(3);
  auto mv = m.to_vector<float>();
  EXPECT_EQ(mv[0], 0.0f);
  EXPECT_TRUE(std::isinf(mv[1]) && mv[1] < 0);
  EXPECT_EQ(mv[3], 0.0f);
  EXPECT_EQ(make_activation("gelu")->str(), "GELU(approximate='none')");
  EXPECT_THROW(make_activation("swoosh"), ValueError);
}

TEST(NnModule, StackAllocatedModulesTraverse) {
  Linear l(2, 3);
  auto mods = l.named_modules();
  ASSERT_EQ(mods.size(), 1u);
  EXPECT_EQ(mods[0].second.get(), &l);
  EXPECT_EQ(l.get_submodule("").get(), &l);
}

TEST(NnModule, RecurrentShapesAndErrors) {
  LSTM lstm(3, 5, {.num_layers = 2, .bidirectional = true});
  auto [o, h, c] = lstm.forward_with_state(randn({7, 2, 3}));
  EXPECT_EQ(shape_str(o.sizes()), "[7, 2, 10]");
  EXPECT_EQ(shape_str(h.sizes()), "[4, 2, 5]");
  EXPECT_EQ(shape_str(c.sizes()), "[4, 2, 5]");
  EXPECT_THROW(lstm(randn({7, 2, 4})), ValueError);
  EXPECT_THROW(lstm.forward_with_state(randn({7, 2, 3}), zeros({2, 2, 5})), ValueError);
  EXPECT_EQ(keys(lstm.named_parameters()).size(), 16u);
  // Dropout between layers only in training.
  GRU gru(3, 4, {.num_layers = 2, .dropout = 0.5});
  Tensor x = randn({5, 2, 3});
  gru.eval();
  EXPECT_TRUE(equal(gru(x), gru(x)));
  EXPECT_THROW(LSTM(3, 4, {.proj_size = 4}), ValueError);
  EXPECT_THROW(GRU(3, 4, {.proj_size = 2}), ValueError);
}

TEST(NnModule, AttentionShapesAndMasks) {
  MultiheadAttention mha(8, 2, {.batch_first = true});
  Tensor x = randn({3, 5, 8});
  auto [o, w] = mha.forward(x, x, x);
  EXPECT_EQ(shape_str(o.sizes()), "[3, 5, 8]");
  EXPECT_EQ(shape_str(w.sizes()), "[3, 5, 5]");
  EXPECT_TRUE(allclose(sum(w, -1), ones({3, 5}), 1e-5, 1e-5));
  auto [o2, w2] = mha.forward(x, x, x, {}, false);
  EXPECT_FALSE(w2.defined());
  EXPECT_TRUE(allclose(o, o2, 1e-5, 1e-5));  // the fused path agrees with the explicit one
  // A bool mask masks where True: a causal mask gives zero weight above the diagonal.
  Tensor causal = triu(ones({5, 5}, DType::Bool), 1);
  auto [o3, w3] = mha.forward(x, x, x, {}, true, causal, false);
  EXPECT_EQ(shape_str(w3.sizes()), "[3, 2, 5, 5]");
  EXPECT_EQ(abs(w3.select(2, 0).narrow(-1, 1, 4)).sum().item<double>(), 0.0);
  auto [o4, w4] = mha.forward(x, x, x, {}, false, causal);
  EXPECT_TRUE(allclose(o3, o4, 1e-5, 1e-5));
  EXPECT_THROW(mha.forward(x, x, x, {}, true, ones({4, 5}, DType::Bool)), ValueError);
  EXPECT_THROW(MultiheadAttention(7, 2), ValueError);
  EXPECT_EQ(keys(mha.named_parameters()),
            (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  // Encoder layer in eval mode is deterministic; dropout makes training runs differ.
  TransformerEncoderLayer enc(8, 2, {.dim_feedforward = 16, .dropout = 0.5, .batch_first = true});
  enc.eval();
  EXPECT_TRUE(equal(enc(x), enc(x)));
  enc.train();
  EXPECT_FALSE(equal(enc(x), enc(x)));
}

}  // namespace
}  // namespace foundry::nn

namespace foundry::nn {
namespace {

// Finite-difference checks of the composite layers' input gradients in float64 (the parameter
// gradients are compared with PyTorch in nn_layers_parity_test.cpp).
TEST(NnGradcheck, CompositeLayers) {
  using autograd::gradcheck;
  auto leaf = [](IntList shape) {
    Tensor t = randn(shape, DType::Float64);
    t.requires_grad_(true);
    return t;
  };
  auto lstm = std::make_shared<LSTM>(3, 4, RNNOptions{.num_layers = 2, .bidirectional = true, .proj_size = 2});
  lstm->to(DType::Float64);
  EXPECT_TRUE(gradcheck(
      [&](const std::vector<Tensor>& in) {
        auto [o, h, c] = lstm->forward_with_state(in[0], in[1], in[2]);
        return std::vector<Tensor>{o, h, c};
      },
      {leaf({4, 2, 3}), leaf({4, 2, 2}), leaf({4, 2, 4})}));
  auto gru = std::make_shared<GRU>(3, 4, RNNOptions{.batch_first = true});
  gru->to(DType::Float64);
  EXPECT_TRUE(gradcheck(
      [&](const std::vector<Tensor>& in) {
        auto [o, h] = gru->forward_with_state(in[0], in[1]);
        return std::vector<Tensor>{o, h};
      },
      {leaf({2, 5, 3}), leaf({1, 2, 4})}));
  auto mha = std::make_shared<MultiheadAttention>(6, 2, MultiheadAttentionOptions{.add_bias_kv = true, .kdim = 4});
  mha->to(DType::Float64);
  Tensor kpm = tensor<int64_t>({0, 1, 0, 0, 0, 0, 0, 1}, {2, 4}).to(DType::Bool);
  EXPECT_TRUE(gradcheck(
      [&](const std::vector<Tensor>& in) {
        auto [o, w] = mha->forward(in[0], in[1], in[2], kpm, true, {}, false);
        return std::vector<Tensor>{o, w};
      },
      {leaf({3, 2, 6}), leaf({4, 2, 4}), leaf({4, 2, 6})}));
  auto enc = std::make_shared<TransformerEncoderLayer>(
      6, 2, TransformerLayerOptions{.dim_feedforward = 8, .dropout = 0.0, .activation = "gelu", .norm_first = true});
  enc->to(DType::Float64);
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{enc->forward(in[0])}; },
                        {leaf({3, 2, 6})}));
  auto bil = std::make_shared<Bilinear>(3, 2, 4);
  bil->to(DType::Float64);
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{bil->forward(in[0], in[1])}; },
                        {leaf({2, 5, 3}), leaf({2, 5, 2})}));
}

}  // namespace
}  // namespace foundry::nn
