// GPT: the GPT-2 architecture (learned positions, pre-LayerNorm blocks, GELU-tanh MLP, causal
// attention through scaled_dot_product_attention, tied embeddings), with Hugging Face's
// GPT2LMHeadModel parameter names and shapes (its Conv1D weights are [in, out]), so state dicts
// are interchangeable with HF checkpoints.
#pragma once

#include <memory>
#include <string>

#include "foundry/core/rng.h"
#include "foundry/nn/linear.h"
#include "foundry/nn/module.h"
#include "foundry/nn/norm.h"

namespace foundry::models {

struct GPTConfig {
  int64_t vocab_size = 50257;
  int64_t block_size = 1024;  ///< n_positions
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  double dropout = 0.0;
  double layer_norm_eps = 1e-5;
  /// Recompute each block's activations in backward instead of storing them (less memory).
  bool activation_checkpointing = false;
};

/// HF's Conv1D: y = x @ weight + bias, weight [in, out].
class Conv1D : public nn::Module {
 public:
  Conv1D(int64_t in, int64_t out);
  std::string type_name() const override { return "Conv1D"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  Tensor& weight;
  Tensor& bias;
};

class GPTAttention : public nn::Module {
 public:
  explicit GPTAttention(const GPTConfig& c);
  std::string type_name() const override { return "GPT2Attention"; }
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Conv1D> c_attn, c_proj;

 private:
  GPTConfig cfg_;
};

class GPTMLP : public nn::Module {
 public:
  explicit GPTMLP(const GPTConfig& c);
  std::string type_name() const override { return "GPT2MLP"; }
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Conv1D> c_fc, c_proj;

 private:
  double dropout_;
};

class GPTBlock : public nn::Module {
 public:
  explicit GPTBlock(const GPTConfig& c);
  std::string type_name() const override { return "GPT2Block"; }
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::LayerNorm> ln_1, ln_2;
  std::shared_ptr<GPTAttention> attn;
  std::shared_ptr<GPTMLP> mlp;
};

/// The trunk (HF's GPT2Model: "transformer.*").
class GPTTrunk : public nn::Module {
 public:
  explicit GPTTrunk(const GPTConfig& c);
  std::string type_name() const override { return "GPT2Model"; }
  /// idx int64 [B, T] -> hidden states [B, T, C].
  Tensor forward(const Tensor& idx) override;
  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::Module> h;  // ModuleList of GPTBlock
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::vector<std::shared_ptr<GPTBlock>> blocks;

 private:
  GPTConfig cfg_;
};

/// The language-model head: logits = x @ weight^T with the weight tied to the token embedding
/// (printed as PyTorch prints GPT-2's lm_head: a Linear without bias).
class TiedHead : public nn::Module {
 public:
  explicit TiedHead(const Tensor& embedding_weight);
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  Tensor& weight;
};

class GPT : public nn::Module {
 public:
  /// Initialised as GPT-2 (normal(0, 0.02), residual projections scaled by 1/sqrt(2 n_layer)).
  explicit GPT(const GPTConfig& config, Generator* init_generator = nullptr);
  std::string type_name() const override { return "GPT2LMHeadModel"; }
  /// idx int64 [B, T] -> logits [B, T, vocab].
  Tensor forward(const Tensor& idx) override;
  /// Mean next-token cross-entropy of logits [B, T, V] against targets [B, T].
  static Tensor loss(const Tensor& logits, const Tensor& targets);
  /// Appends max_new_tokens sampled tokens to each row of idx (temperature 0: greedy; top_k 0:
  /// all tokens); the context is cropped to block_size.
  Tensor generate(const Tensor& idx, int64_t max_new_tokens, double temperature = 1.0, int64_t top_k = 0,
                  Generator* gen = nullptr);
  const GPTConfig& config() const { return cfg_; }

  std::shared_ptr<GPTTrunk> transformer;
  std::shared_ptr<TiedHead> lm_head;

 private:
  GPTConfig cfg_;
};

/// Writes `model` as a Hugging Face GPT-2 folder (config.json + model.safetensors, float32, atomic
/// files) that load_pretrained / transformers' GPT2LMHeadModel read; with `tokenizer_file`, a copy
/// of it as tokenizer.json.
void save_gpt_pretrained(const GPT& model, const std::string& dir, const std::string& tokenizer_file = "");

}  // namespace foundry::models
