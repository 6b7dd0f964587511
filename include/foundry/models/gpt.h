// GPT: the GPT-2 architecture (learned positions, pre-LayerNorm blocks, GELU-tanh MLP, causal
// attention through scaled_dot_product_attention, tied embeddings), with Hugging Face's GPT-2
// parameter names and shapes (Conv1D weights are [in, out]), so state dicts load from and save to
// HF checkpoints unchanged.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "foundry/core/rng.h"
#include "foundry/nn/module.h"

namespace foundry::models {

struct GPTConfig {
  int64_t vocab_size = 50257;
  int64_t block_size = 1024;  ///< n_positions
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  double dropout = 0.0;
  double layer_norm_eps = 1e-5;
  bool bias = true;
  /// Recompute each block's activations in backward instead of storing them (less memory).
  bool activation_checkpointing = false;
};

/// HF's Conv1D: y = x @ weight + bias with weight [in, out].
class Conv1D : public nn::Module {
 public:
  Conv1D(int64_t in, int64_t out, bool bias = true);
  std::string type_name() const override { return "Conv1D"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
};

class GPTBlock : public nn::Module {
 public:
  explicit GPTBlock(const GPTConfig& c);
  std::string type_name() const override { return "GPT2Block"; }
  Tensor forward(const Tensor& x) override;

 private:
  Tensor attention(const Tensor& x);
  GPTConfig cfg_;
  std::shared_ptr<nn::Module> ln_1_, ln_2_;
  std::shared_ptr<Conv1D> c_attn_, attn_proj_, c_fc_, mlp_proj_;
};

class GPT : public nn::Module {
 public:
  explicit GPT(const GPTConfig& config, Generator* init_generator = nullptr);
  std::string type_name() const override { return "GPT2LMHeadModel"; }
  /// idx: int64 [B, T] -> logits [B, T, vocab].
  Tensor forward(const Tensor& idx) override;
  /// Mean cross-entropy of the next-token predictions against targets [B, T] (ignore_index -100).
  Tensor loss(const Tensor& logits, const Tensor& targets) const;
  /// Appends max_new_tokens sampled tokens to each row of idx (temperature 0 = greedy; top_k 0 =
  /// all); the context is cropped to block_size.
  Tensor generate(const Tensor& idx, int64_t max_new_tokens, double temperature = 1.0, int64_t top_k = 0,
                  Generator* gen = nullptr);
  const GPTConfig& config() const { return cfg_; }

 private:
  GPTConfig cfg_;
  std::shared_ptr<nn::Module> transformer_;
  Tensor wte_, wpe_;
  std::vector<std::shared_ptr<GPTBlock>> blocks_;
  std::shared_ptr<nn::Module> ln_f_;
};

}  // namespace foundry::models
