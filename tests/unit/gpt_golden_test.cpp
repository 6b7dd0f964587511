// llm.c's idea: a tiny GPT-2 in PyTorch 1.13 (tools/gen_gpt_golden.py) and Foundry's gpt2
// architecture (the model registry's GPT2LMHeadModel) with the same weights give the same logits,
// loss, every parameter gradient, and the same losses over 10 AdamW steps.
#include <gtest/gtest.h>

#include "foundry/autograd/grad_mode.h"
#include "foundry/io/npy.h"
#include "foundry/models/pretrained.h"
#include "foundry/ops/ops.h"
#include "foundry/optim/optimizer.h"

using namespace foundry;

#ifndef FOUNDRY_SOURCE_DIR
#define FOUNDRY_SOURCE_DIR "."
#endif

TEST(GPTGolden, MatchesPyTorch) {
  auto g = io::load_npz(std::string(FOUNDRY_SOURCE_DIR) + "/tests/parity/gpt/golden.npz");
  auto created = models::create_model(
      R"({"model_type": "gpt2", "vocab_size": 37, "n_positions": 12, "n_layer": 2, "n_head": 4, "n_embd": 32,
          "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0})");
  models::CausalLM& model = *created;
  auto loss_of = [](const Tensor& logits, const Tensor& targets) {
    return cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
  };
  nn::NamedTensors state;
  for (auto& [k, v] : g)
    if (k.rfind("param.", 0) == 0) state.emplace_back(k.substr(6), v);
  state.emplace_back("lm_head.weight", g.at("param.transformer.wte.weight"));
  model.load_state_dict(state);
  model.eval();  // dropout 0 anyway
  Tensor idx = g.at("idx").to(DType::Int64), targets = g.at("targets").to(DType::Int64);
  Tensor logits = model.forward(idx);
  EXPECT_TRUE(allclose(logits, g.at("logits"), 1e-5, 1e-5)) << "max diff " << amax(abs(logits - g.at("logits"))).item<double>();
  {
    // Inference, where nothing records: the layer norms' direct kernel calls and the in-place
    // residual add give the recorded path's logits, bit for bit.
    autograd::NoGradGuard no_grad;
    EXPECT_TRUE(equal(model.forward(idx), logits));
  }
  Tensor loss = loss_of(logits, targets);
  EXPECT_NEAR(loss.item<double>(), g.at("loss").item<double>(), 1e-5);
  loss.backward();
  int checked = 0;
  for (auto& [name, p] : model.named_parameters()) {
    const Tensor& ref = g.at("grad." + name);
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_TRUE(allclose(p.grad(), ref, 1e-5, 1e-5))
        << name << " max diff " << amax(abs(p.grad() - ref)).item<double>();
    checked++;
  }
  EXPECT_EQ(checked, 2 + 12 * 2 + 2);

  // Ten AdamW steps from the same start.
  model.load_state_dict(state);
  model.zero_grad();
  optim::AdamW opt(model.parameters(), {.lr = 1e-2, .betas = {0.9, 0.95}, .eps = 1e-8, .weight_decay = 0.1});
  std::vector<double> ref = g.at("adamw_losses").to_vector<double>();
  for (int step = 0; step < 10; ++step) {
    opt.zero_grad();
    Tensor l = loss_of(model.forward(idx), targets);
    l.backward();
    opt.step();
    EXPECT_NEAR(l.item<double>(), ref[size_t(step)], 2e-5 * std::max(1.0, ref[size_t(step)])) << "step " << step;
  }
}
