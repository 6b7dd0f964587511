// The shared blocks every architecture is wired from, as nn::Modules whose parameter names are
// transformers' (a block registered as "self_attn" with a child "q_proj" gives
// "...self_attn.q_proj.weight"). Each block runs two ways from one definition: when autograd
// records (grad enabled and a parameter or input requires grad) it uses differentiable ops; when it
// does not, the inference fast paths: quantized or dense weight products (WeightProducts), fused
// residual + RMSNorm, SiLU * up written over the gate, RoPE in place, and the KV cache's streaming
// decode attention. Nothing else in an architecture knows which path runs.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>

#include "foundry/nn/module.h"
#include "models/hf/common.h"

namespace foundry::models::hf {

/// Whether a forward of `m` records a graph (grad mode on and a parameter requires grad); when not,
/// the model's entry points run under NoGradGuard so every block takes its inference path.
bool records_parameters(const nn::Module& m);

/// Whether an op over these tensors records a graph (grad mode on and one of them requires grad).
bool records(const Tensor& a, const Tensor& b = {}, const Tensor& c = {});

/// How a parameter of a model trained from scratch starts (HF's _init_weights): normal(0, std) for
/// matrices and embeddings (std 0: the config's initializer_range), zeros for biases, ones for norm
/// weights.
struct Init {
  enum Kind { Normal, Zeros, Ones, Custom } kind = Normal;
  double std = 0;
  std::function<void(Tensor&)> fill;  ///< Custom: fills the new float32 tensor (RWKV's decay ramps, Mamba's A_log)
  static Init normal(double s = 0) { return {Normal, s, {}}; }
  static Init zeros() { return {Zeros, 0, {}}; }
  static Init ones() { return {Ones, 0, {}}; }
  static Init custom(std::function<void(Tensor&)> f) { return {Custom, 0, std::move(f)}; }
  /// PyTorch's default for nn.Linear / nn.Conv1d parameters: uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  static Init fan_in_uniform(int64_t fan_in);
  /// A new float32 tensor initialised this way (Normal without a std of its own: default_std, the
  /// config's initializer_range).
  Tensor make(const Shape& shape, double default_std) const;
};

/// Where parameters come from, by HF name (candle's VarBuilder): a checkpoint for a loaded model,
/// or an initialiser for a fresh one. pp("self_attn") is the source of a child module, so a
/// block's registered names and the names it reads are the same strings.
class WeightSource {
 public:
  using Fetch = std::function<Tensor(const std::string& name, const Shape& shape, const Init& init, Layout layout)>;
  using Has = std::function<bool(const std::string& name)>;
  WeightSource(Fetch fetch, Has has, std::shared_ptr<WeightProducts> products)
      : fetch_(std::make_shared<Fetch>(std::move(fetch))), has_(std::make_shared<Has>(std::move(has))),
        products_(std::move(products)) {}
  WeightSource pp(const std::string& child) const;
  /// `layout` is what the weight's user can take; a fresh or file-mapped weight stays row-major.
  Tensor get(const std::string& name, const Shape& shape, const Init& init = {}, Layout layout = Layout::RowMajor) const;
  bool has(const std::string& name) const;
  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<WeightProducts>& products() const { return products_; }

 private:
  std::shared_ptr<Fetch> fetch_;
  std::shared_ptr<Has> has_;
  std::shared_ptr<WeightProducts> products_;
  std::string prefix_;
};

/// Registers `block` as child `name` of `parent` (the block is built from ws.pp(name)).
template <class M, class... Args>
std::shared_ptr<M> add_block(nn::Module& parent, const WeightSource& ws, const std::string& name, Args&&... args) {
  return parent.register_module(name, std::make_shared<M>(ws.pp(name), std::forward<Args>(args)...));
}

/// A module that only holds children (transformers' LlamaModel, GPT2Model, ...), printed under
/// the class name transformers gives it.
class Scope : public nn::Module {
 public:
  explicit Scope(std::string type) : type_(std::move(type)) {}
  std::string type_name() const override { return type_; }

 private:
  std::string type_;
};

/// The config's pad_token_id as config.json has it (transformers' embeddings use it as padding_idx).
std::optional<int64_t> config_pad_token(const ModelConfig& c);

class Linear;

/// A wrapper that takes over a projection's forward (peft's LoRA layers, modules_to_save copies):
/// the architecture still calls its projection, which hands x to the wrapper.
class LinearAdapter {
 public:
  virtual ~LinearAdapter() = default;
  virtual Tensor forward(Linear& base, const Tensor& x) = 0;
};

/// nn.Linear (weight [out, in]) or GPT-2's Conv1D (weight [in, out]: `transposed`). An adapter
/// (peft's LoRA layers) may hook its output; the architectures keep calling the projection itself.
class Linear : public nn::Module {
 public:
  Linear(const WeightSource& ws, int64_t in, int64_t out, bool bias, bool transposed = false, Init init = {});
  /// A head sharing `weight` (a tied LM head: one tensor, two state_dict names).
  Linear(const WeightSource& ws, const Tensor& tied_weight);
  std::string type_name() const override { return transposed_ ? "Conv1D" : "Linear"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  /// The projection alone (x W^T + b), without the adapter. A frozen weight held quantized
  /// (QLoRA) still passes gradients to x: each tile of rows is dequantized in turn, forward and
  /// backward, so no float copy of the whole matrix is made.
  Tensor base_forward(const Tensor& x);
  /// forward(x) of each projection of one input (q, k and v; gate and up): at inference, without
  /// adapters, their weight products run together (WeightProducts::products).
  static std::vector<Tensor> forward_each(const Tensor& x, std::initializer_list<Linear*> projections);
  void set_adapter(LinearAdapter* adapter) { adapter_ = adapter; }
  LinearAdapter* adapter() const { return adapter_; }
  bool transposed() const { return transposed_; }
  int64_t in_features() const { return weight.size(transposed_ ? 0 : 1); }
  int64_t out_features() const { return weight.size(transposed_ ? 1 : 0); }
  const std::shared_ptr<WeightProducts>& products() const { return products_; }
  Tensor& weight;
  Tensor& bias;

 private:
  bool transposed_ = false;
  std::shared_ptr<WeightProducts> products_;
  mutable WeightProducts::Memo memo_;  // where products_ keeps this weight's quantized rows
  LinearAdapter* adapter_ = nullptr;
};

class Embedding : public nn::Module {
 public:
  Embedding(const WeightSource& ws, int64_t num, int64_t dim, std::optional<int64_t> padding_idx = std::nullopt);
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& ids) override;
  Tensor& weight;

 private:
  std::optional<int64_t> padding_idx_;
  std::shared_ptr<WeightProducts> products_;  // where a table kept quantized (adopted) is read
};

/// LayerNorm (weight, bias), RMSNorm (weight; HF's LlamaRMSNorm) or Gemma's RMSNorm scaling by
/// (1 + weight).
class Norm : public nn::Module {
 public:
  enum class Kind { LayerNorm, RMSNorm, GemmaRMSNorm };
  Norm(const WeightSource& ws, int64_t dim, Kind kind, double eps, bool bias = true);
  std::string type_name() const override;
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  /// h += delta, then this norm of h: one fused pass in place when nothing records.
  Tensor add_and_norm(Tensor& h, const Tensor& delta);
  Tensor& weight;
  Tensor& bias;

 private:
  Kind kind_;
  double eps_;
  int64_t dim_;
};

/// The three projections' names of a gated MLP.
struct GatedNames {
  std::string gate = "gate_proj", up = "up_proj", down = "down_proj";
};

/// down(act(gate(x)) * up(x)) (Llama's MLP; Mixtral's experts with names w1 / w3 / w2).
class GatedMLP : public nn::Module {
 public:
  GatedMLP(const WeightSource& ws, int64_t hidden, int64_t intermediate, std::string act, bool bias = false,
           GatedNames names = {});
  std::string type_name() const override { return "MLP"; }
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Linear> gate, up, down;

 private:
  std::string act_;
};

/// fc_out(act(fc_in(x))) with optional dropout after it (GPT-2, GPT-NeoX, Phi, Falcon, BLOOM).
class MLP : public nn::Module {
 public:
  MLP(const WeightSource& ws, int64_t hidden, int64_t intermediate, std::string act, const std::string& in_name,
      const std::string& out_name, bool bias = true, bool conv1d = false, double dropout = 0, Init out_init = {});
  std::string type_name() const override { return "MLP"; }
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Linear> fc_in, fc_out;

 private:
  std::string act_;
  double dropout_;
};

/// Routed experts: softmax over the router's logits in float32, top-k experts per token
/// (renormalised when `normalize`), each expert on its tokens only; Qwen2-MoE adds a shared expert
/// scaled by sigmoid(shared_expert_gate(x)).
class SparseMoE : public nn::Module {
 public:
  struct Options {
    int64_t experts = 0, top_k = 0, intermediate = 0, shared_intermediate = 0;
    bool normalize = true;
    GatedNames names;
    std::string act = "silu";
    std::string router = "gate";  ///< the router's name (Jamba: "router")
  };
  SparseMoE(const WeightSource& ws, int64_t hidden, Options o);
  std::string type_name() const override { return "SparseMoeBlock"; }
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Linear> gate, shared_expert_gate;
  std::vector<std::shared_ptr<GatedMLP>> experts;
  std::shared_ptr<GatedMLP> shared_expert;

 private:
  Options o_;
};

/// What every layer of one forward shares: sizes, the mask-derived positions and attention bias,
/// rotary tables, the KV cache.
struct LayerContext {
  int64_t B = 0, T = 0, past = 0;
  Tensor mask;       ///< [B, past + T] bool
  Tensor positions;  ///< [B, T] int64
  Tensor bias;       ///< additive attention bias [B, 1 or H, T, past + T]
  Tensor cos, sin;   ///< rotary tables [B, 1, T, rot] (undefined without rotary positions)
  KVCache* cache = nullptr;
  /// Plain causal masking (no padding, no cache, no window cutting in, no ALiBi): attention runs as
  /// causal SDPA and `bias` is left undefined (nothing [B, 1, T, T] to build or read).
  bool causal = false;
};

/// How an architecture encodes positions in attention.
struct AttentionPositions {
  int64_t rotary_dims = 0;            ///< rotary tables over the first rotary_dims of each head (0: none)
  int64_t window = 0;                 ///< sliding window (0: none)
  std::optional<double> alibi_scale;  ///< ALiBi bias, times this scale
};

/// Checks input_ids [B, T] and starts a forward's context: sizes, the full mask, the cache, the
/// positions from the mask, the rotary tables, and the attention bias unless plain causal.
LayerContext layer_context(const ModelConfig& c, const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache,
                           DType dtype, const AttentionPositions& positions = {});

/// Attention of q [B, H, T, D] over k, v [B, Hkv, T, D] and the cached positions of `layer`
/// (appending k, v to the cache): [B, T, H * D]. Decoding one token over a streaming-capable cache
/// reads it in place (KVCache::append_and_attend); `dropout` applies to the attention weights.
Tensor attend_layer(const LayerContext& ctx, int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v,
                    double dropout = 0);

/// Rotary embedding of x [B, T, heads * D] (a projection's output) -> [B, heads, T, D]; without rotary
/// tables in the context, the heads alone.
Tensor rope_heads(const Tensor& x, int64_t heads, const LayerContext& ctx);

/// h = layer(h), through autograd::checkpoint when the model's gradient checkpointing is on, it
/// trains and autograd records.
Tensor checkpointed(const CausalLM& model, const std::function<Tensor(const Tensor&)>& layer, const Tensor& h);
/// Whether checkpointed() recomputes in backward (checkpointing on, training, grad enabled).
bool checkpoints(const CausalLM& model);

/// Every layer over h in turn (layer->forward(h, ctx, index), each checkpointed when enabled), then
/// the cache advanced and the last `last_positions` positions kept (end_layers).
template <class Layer>
Tensor run_layers(const CausalLM& model, const std::vector<std::shared_ptr<Layer>>& layers, const LayerContext& ctx,
                  Tensor h, int64_t last_positions) {
  const bool recompute = checkpoints(model);
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!recompute) {  // a plain call: the closure below copies the context and allocates, every layer of every token
      h = layers[i]->forward(h, ctx, int64_t(i));
      continue;
    }
    std::shared_ptr<Layer> layer = layers[i];
    h = checkpointed(model, [layer, ctx, i](const Tensor& x) { return layer->forward(x, ctx, int64_t(i)); }, h);
  }
  return end_layers(h, ctx.cache, ctx.T, last_positions);
}

/// dropout(x, p) in training mode, x otherwise.
Tensor maybe_dropout(const nn::Module& m, const Tensor& x, double p);

}  // namespace foundry::models::hf
