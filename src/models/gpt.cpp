#include "foundry/models/gpt.h"

#include <cmath>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "foundry/autograd/checkpoint.h"
#include "foundry/autograd/grad_mode.h"
#include "foundry/io/atomic_file.h"
#include "foundry/io/safetensors.h"
#include "foundry/nn/containers.h"
#include "foundry/nn/init.h"
#include "foundry/ops/ops.h"

namespace foundry::models {

Conv1D::Conv1D(int64_t in, int64_t out)
    : weight(register_parameter("weight", zeros({in, out}))), bias(register_parameter("bias", zeros({out}))) {}

std::string Conv1D::extra_repr() const {
  return "nf=" + std::to_string(weight.size(1)) + ", nx=" + std::to_string(weight.size(0));
}

Tensor Conv1D::forward(const Tensor& x) { return matmul(x, weight) + bias; }

TiedHead::TiedHead(const Tensor& embedding_weight) : weight(register_parameter("weight", embedding_weight)) {}

std::string TiedHead::extra_repr() const {
  return "in_features=" + std::to_string(weight.size(1)) + ", out_features=" + std::to_string(weight.size(0)) +
         ", bias=False";
}

Tensor TiedHead::forward(const Tensor& x) { return linear(x, weight); }

GPTAttention::GPTAttention(const GPTConfig& c) : cfg_(c) {
  FOUNDRY_CHECK_AS(ValueError, c.n_embd % c.n_head == 0, "GPT: n_embd ({}) must be divisible by n_head ({})",
                   c.n_embd, c.n_head);
  c_attn = register_module("c_attn", std::make_shared<Conv1D>(c.n_embd, 3 * c.n_embd));
  c_proj = register_module("c_proj", std::make_shared<Conv1D>(c.n_embd, c.n_embd));
}

Tensor GPTAttention::forward(const Tensor& x) {
  int64_t B = x.size(0), T = x.size(1), C = x.size(2), H = cfg_.n_head, D = C / H;
  Tensor qkv = c_attn->forward(x);  // [B, T, 3C]
  auto parts = split(qkv, C, 2);
  auto heads = [&](const Tensor& t) { return t.view({B, T, H, D}).transpose(1, 2); };  // [B, H, T, D]
  double p = is_training() ? cfg_.dropout : 0.0;
  Tensor y = scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), Tensor(), p, true);
  y = y.transpose(1, 2).reshape({B, T, C});
  y = c_proj->forward(y);
  return p > 0 ? dropout(y, p, true) : y;
}

GPTMLP::GPTMLP(const GPTConfig& c) : dropout_(c.dropout) {
  c_fc = register_module("c_fc", std::make_shared<Conv1D>(c.n_embd, 4 * c.n_embd));
  c_proj = register_module("c_proj", std::make_shared<Conv1D>(4 * c.n_embd, c.n_embd));
}

Tensor GPTMLP::forward(const Tensor& x) {
  Tensor h = c_proj->forward(gelu(c_fc->forward(x), "tanh"));
  return is_training() && dropout_ > 0 ? dropout(h, dropout_, true) : h;
}

GPTBlock::GPTBlock(const GPTConfig& c) {
  ln_1 = register_module("ln_1", std::make_shared<nn::LayerNorm>(c.n_embd, c.layer_norm_eps));
  attn = register_module("attn", std::make_shared<GPTAttention>(c));
  ln_2 = register_module("ln_2", std::make_shared<nn::LayerNorm>(c.n_embd, c.layer_norm_eps));
  mlp = register_module("mlp", std::make_shared<GPTMLP>(c));
}

Tensor GPTBlock::forward(const Tensor& x) {
  Tensor h = x + attn->forward(ln_1->forward(x));
  return h + mlp->forward(ln_2->forward(h));
}

GPTTrunk::GPTTrunk(const GPTConfig& c) : cfg_(c) {
  wte = register_module("wte", std::make_shared<nn::Embedding>(c.vocab_size, c.n_embd));
  wpe = register_module("wpe", std::make_shared<nn::Embedding>(c.block_size, c.n_embd));
  drop = register_module("drop", std::make_shared<nn::Dropout>(c.dropout));
  auto list = std::make_shared<nn::ModuleList>();
  for (int64_t i = 0; i < c.n_layer; ++i) {
    auto b = std::make_shared<GPTBlock>(c);
    list->append(b);
    blocks.push_back(b);
  }
  h = register_module("h", list);
  ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(c.n_embd, c.layer_norm_eps));
}

Tensor GPTTrunk::forward(const Tensor& idx) {
  FOUNDRY_CHECK_AS(ValueError, idx.dim() == 2 && idx.dtype() == DType::Int64,
                   "GPT: expected int64 token ids [batch, time], got {} {}", shape_str(idx.sizes()),
                   dtype_name(idx.dtype()));
  int64_t T = idx.size(1);
  FOUNDRY_CHECK_AS(ValueError, T <= cfg_.block_size, "GPT: sequence length {} exceeds block_size {}", T,
                   cfg_.block_size);
  Tensor x = wte->forward(idx) + wpe->forward(arange(T));
  x = drop->forward(x);
  for (auto& b : blocks) {
    if (cfg_.activation_checkpointing && autograd::is_grad_enabled() && is_training()) {
      auto block = b;
      x = autograd::checkpoint([block](const std::vector<Tensor>& in) { return std::vector<Tensor>{block->forward(in[0])}; },
                               {x})[0];
    } else {
      x = b->forward(x);
    }
  }
  return ln_f->forward(x);
}

GPT::GPT(const GPTConfig& c, Generator* gen) : cfg_(c) {
  transformer = register_module("transformer", std::make_shared<GPTTrunk>(c));
  lm_head = register_module("lm_head", std::make_shared<TiedHead>(transformer->wte->weight));  // tied, as GPT-2
  // GPT-2 initialisation (HF _init_weights): normal(0, 0.02) for weights and embeddings, zero
  // biases, unit LayerNorms; c_proj weights scaled by 1/sqrt(2 n_layer).
  autograd::NoGradGuard ng;
  const double proj_std = 0.02 / std::sqrt(2.0 * double(c.n_layer));
  for (auto& [name, p] : named_parameters()) {
    bool is_bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
    bool is_ln = name.find(".ln_") != std::string::npos;
    if (is_ln) {
      Tensor t = p;
      t.fill_(is_bias ? 0.0 : 1.0);
    } else if (is_bias) {
      Tensor t = p;
      t.zero_();
    } else {
      bool proj = name.find("c_proj.weight") != std::string::npos;
      nn::init::normal_(p, 0.0, proj ? proj_std : 0.02, gen);
    }
  }
}

Tensor GPT::forward(const Tensor& idx) { return lm_head->forward(transformer->forward(idx)); }

Tensor GPT::loss(const Tensor& logits, const Tensor& targets) {
  int64_t V = logits.size(-1);
  return cross_entropy(logits.reshape({-1, V}), targets.reshape({-1}));
}

Tensor GPT::generate(const Tensor& idx_in, int64_t max_new_tokens, double temperature, int64_t top_k, Generator* gen) {
  autograd::NoGradGuard ng;
  bool was_training = is_training();
  eval();
  Tensor idx = idx_in;
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    int64_t T = idx.size(1);
    Tensor ctx = T > cfg_.block_size ? idx.slice(1, T - cfg_.block_size, None) : idx;
    Tensor logits = forward(ctx).select(1, -1);  // [B, V]
    Tensor next;
    if (temperature <= 0) {
      next = argmax(logits, -1, true);
    } else {
      logits = logits / temperature;
      if (top_k > 0 && top_k < logits.size(-1)) {
        Tensor kth = std::get<0>(topk(logits, top_k, -1)).slice(1, top_k - 1, top_k);
        logits = masked_fill(logits, logits < kth, -INFINITY);
      }
      next = multinomial(softmax(logits, -1), 1, false, gen);
    }
    idx = cat({idx, next}, 1);
  }
  train(was_training);
  return idx;
}

void save_gpt_pretrained(const GPT& model, const std::string& dir, const std::string& tokenizer_file) {
  namespace fs = std::filesystem;
  const GPTConfig& c = model.config();
  fs::create_directories(dir);
  std::map<std::string, Tensor> tensors;
  for (const auto& [name, t] : model.state_dict()) tensors[name] = t.detach().to(DType::Float32).contiguous();
  io::save_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
  const nlohmann::json config = {{"architectures", {"GPT2LMHeadModel"}},
                                 {"model_type", "gpt2"},
                                 {"vocab_size", c.vocab_size},
                                 {"n_positions", c.block_size},
                                 {"n_ctx", c.block_size},
                                 {"n_embd", c.n_embd},
                                 {"n_layer", c.n_layer},
                                 {"n_head", c.n_head},
                                 {"n_inner", nullptr},
                                 {"activation_function", "gelu_new"},
                                 {"layer_norm_epsilon", c.layer_norm_eps},
                                 {"tie_word_embeddings", true},
                                 {"torch_dtype", "float32"}};
  if (!tokenizer_file.empty())
    io::write_file_atomic((fs::path(dir) / "tokenizer.json").string(), io::read_file(tokenizer_file));
  io::write_file_atomic((fs::path(dir) / "config.json").string(), config.dump(2) + "\n");
}

}  // namespace foundry::models
