#include "models/hf/blocks.h"

#include <algorithm>
#include <cmath>

#include "foundry/autograd/grad_mode.h"
#include "foundry/core/error.h"
#include "foundry/nn/init.h"
#include "foundry/ops/ops.h"

namespace foundry::models::hf {

bool records_parameters(const nn::Module& m) {
  if (!autograd::is_grad_enabled()) return false;
  for (const Tensor& p : m.parameters())
    if (p.requires_grad()) return true;
  return false;
}

bool records(const Tensor& a, const Tensor& b, const Tensor& c) {
  if (!autograd::is_grad_enabled()) return false;
  for (const Tensor* t : {&a, &b, &c})
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

std::optional<int64_t> config_pad_token(const ModelConfig& c) {
  json j = json::parse(c.json);
  auto it = j.find("pad_token_id");
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

// ---- WeightSource -----------------------------------------------------------------------------

WeightSource WeightSource::pp(const std::string& child) const {
  WeightSource out = *this;
  out.prefix_ = prefix_ + child + ".";
  return out;
}

Tensor Init::make(const Shape& shape, double default_std) const {
  Tensor t = empty(IntList(shape), DType::Float32);
  if (kind == Zeros) t.zero_();
  else if (kind == Ones) t.fill_(1.0);
  else if (kind == Custom) fill(t);
  else nn::init::normal_(t, 0.0, std > 0 ? std : default_std);
  return t;
}

Init Init::fan_in_uniform(int64_t fan_in) {
  const double bound = 1.0 / std::sqrt(double(fan_in));
  return custom([bound](Tensor& t) { nn::init::uniform_(t, -bound, bound); });
}

Tensor WeightSource::get(const std::string& name, const Shape& shape, const Init& init, Layout layout) const {
  return (*fetch_)(prefix_ + name, shape, init, layout);
}

bool WeightSource::has(const std::string& name) const { return (*has_)(prefix_ + name); }

// ---- Linear / Conv1D ----------------------------------------------------------------------------

Linear::Linear(const WeightSource& ws, int64_t in, int64_t out, bool with_bias, bool transposed, Init init)
    : weight(register_parameter("weight", transposed ? ws.get("weight", {in, out}, init, Layout::RowsOfTranspose)
                                                     : ws.get("weight", {out, in}, init))),
      bias(register_parameter("bias", with_bias ? ws.get("bias", {out}, Init::zeros()) : Tensor())),
      transposed_(transposed),
      products_(ws.products()) {}

Linear::Linear(const WeightSource& ws, const Tensor& tied_weight)
    : weight(register_parameter("weight", tied_weight)), bias(register_parameter("bias", Tensor())),
      products_(ws.products()) {}

std::string Linear::extra_repr() const {
  if (transposed_) return "nf=" + std::to_string(weight.size(1)) + ", nx=" + std::to_string(weight.size(0));
  return "in_features=" + std::to_string(weight.size(1)) + ", out_features=" + std::to_string(weight.size(0)) +
         ", bias=" + nn::py_bool(bias.defined());
}

Tensor Linear::forward(const Tensor& x) { return adapter_ ? adapter_->forward(*this, x) : base_forward(x); }

Tensor Linear::base_forward(const Tensor& x) {
  if (!records(x, weight, bias)) {
    // Training over a quantized frozen base (QLoRA) computes in float32 from the dequantized
    // tiles, as the recorded products do, not with inference's bf16 prefill or q8 activations.
    if (is_training() && products_->quantized_for(weight, transposed_))
      return products_->differentiable_product(x, weight, bias, transposed_);
    return products_->product(x, weight, bias, transposed_, &memo_);
  }
  if (products_->quantized_for(weight, transposed_)) {
    if (weight.requires_grad())
      raise<NotImplementedError>(
          "this model's weights are quantized in memory (a GGUF file, a quantized folder or --quantize): they can "
          "run and pass gradients (QLoRA) but not train themselves; load the float checkpoint to train them");
    return products_->differentiable_product(x, weight, bias, transposed_);
  }
  return WeightProducts::dense(x, weight, bias, transposed_);
}

std::vector<Tensor> Linear::forward_each(const Tensor& x, std::initializer_list<Linear*> projections) {
  if (projections.size() == 0) return {};
  const Linear* first = *projections.begin();
  bool together = true;
  SmallVec<WeightProducts::Operand, 4> weights;  // no allocation: decode makes two calls a layer
  for (Linear* p : projections) {
    together = together && !p->adapter_ && !p->is_training() && !records(x, p->weight, p->bias) &&
               p->products_ == first->products_ && p->transposed_ == first->transposed_;
    weights.push_back({&p->weight, &p->bias, &p->memo_});
  }
  if (together)
    return first->products_->products(x, std::span<const WeightProducts::Operand>(weights.data(), weights.size()),
                                      first->transposed_);
  std::vector<Tensor> out;
  for (Linear* p : projections) out.push_back(p->forward(x));
  return out;
}

// ---- Embedding ------------------------------------------------------------------------------------

Embedding::Embedding(const WeightSource& ws, int64_t num, int64_t dim, std::optional<int64_t> padding_idx)
    : weight(register_parameter("weight", ws.get("weight", {num, dim}))),
      padding_idx_(padding_idx),
      products_(ws.products()) {
  if (padding_idx_ && (*padding_idx_ < 0 || *padding_idx_ >= num)) padding_idx_.reset();
  // A fresh model (a checkpoint always has the tensor): transformers' _init_weights zeroes the padding row.
  if (padding_idx_ && !ws.has("weight")) weight.select(0, *padding_idx_).zero_();
}

std::string Embedding::extra_repr() const {
  std::string s = std::to_string(weight.size(0)) + ", " + std::to_string(weight.size(1));
  return padding_idx_ ? s + ", padding_idx=" + std::to_string(*padding_idx_) : s;
}

Tensor Embedding::forward(const Tensor& ids) {
  if (products_ && !records(weight))
    if (Tensor rows = products_->adopted_rows(weight, ids); rows.defined()) return rows;
  return embedding(ids, weight, padding_idx_);
}

// ---- norms --------------------------------------------------------------------------------------

Norm::Norm(const WeightSource& ws, int64_t dim, Kind kind, double eps, bool with_bias)
    : weight(register_parameter("weight", ws.get("weight", {dim}, kind == Kind::GemmaRMSNorm ? Init::zeros() : Init::ones()))),
      bias(register_parameter("bias", kind == Kind::LayerNorm && with_bias ? ws.get("bias", {dim}, Init::zeros()) : Tensor())),
      kind_(kind),
      eps_(eps),
      dim_(dim) {}

std::string Norm::type_name() const {
  return kind_ == Kind::LayerNorm ? "LayerNorm" : kind_ == Kind::RMSNorm ? "LlamaRMSNorm" : "GemmaRMSNorm";
}

std::string Norm::extra_repr() const { return "(" + std::to_string(dim_) + ",), eps=" + nn::py_float(eps_); }

Tensor Norm::forward(const Tensor& x) {
  if (kind_ == Kind::LayerNorm)
    return records(x, weight, bias) ? layer_norm(x, {dim_}, weight, bias, eps_) : layer_norm_rows(x, weight, bias, eps_);
  if (kind_ == Kind::RMSNorm) return records(x, weight) ? rms_norm(x, {dim_}, weight, eps_) : rms_norm_rows(x, weight, eps_);
  return rms_norm(x, {dim_}, weight + ones({}, weight.dtype()), eps_);
}

Tensor Norm::add_and_norm(Tensor& h, const Tensor& delta) {
  if (kind_ == Kind::LayerNorm || records(h, delta, weight)) {
    h = h + delta;
    return forward(h);
  }
  return add_rms_norm_(h, delta, kind_ == Kind::RMSNorm ? weight : weight + ones({}, weight.dtype()), eps_);
}

// ---- MLPs ---------------------------------------------------------------------------------------

GatedMLP::GatedMLP(const WeightSource& ws, int64_t hidden, int64_t intermediate, std::string act, bool bias,
                   GatedNames names)
    : act_(std::move(act)) {
  gate = add_block<Linear>(*this, ws, names.gate, hidden, intermediate, bias);
  up = add_block<Linear>(*this, ws, names.up, hidden, intermediate, bias);
  down = add_block<Linear>(*this, ws, names.down, intermediate, hidden, bias);
}

Tensor GatedMLP::forward(const Tensor& x) {
  std::vector<Tensor> gu = Linear::forward_each(x, {gate.get(), up.get()});
  if (act_ == "silu" && !records(gu[0])) return down->forward(silu_mul_(gu[0], gu[1]));
  return down->forward(activation(act_, gu[0]) * gu[1]);
}

MLP::MLP(const WeightSource& ws, int64_t hidden, int64_t intermediate, std::string act, const std::string& in_name,
         const std::string& out_name, bool bias, bool conv1d, double dropout, Init out_init)
    : act_(std::move(act)), dropout_(dropout) {
  fc_in = add_block<Linear>(*this, ws, in_name, hidden, intermediate, bias, conv1d);
  fc_out = add_block<Linear>(*this, ws, out_name, intermediate, hidden, bias, conv1d, out_init);
}

Tensor MLP::forward(const Tensor& x) {
  return maybe_dropout(*this, fc_out->forward(activation(act_, fc_in->forward(x))), dropout_);
}

SparseMoE::SparseMoE(const WeightSource& ws, int64_t hidden, Options o) : o_(std::move(o)) {
  FOUNDRY_CHECK_AS(ValueError, o_.top_k > 0 && o_.top_k <= o_.experts,
                   "config.json: experts per token ({}) must be in 1..experts ({})", o_.top_k, o_.experts);
  gate = add_block<Linear>(*this, ws, o_.router, hidden, o_.experts, false);
  auto list = register_module("experts", std::make_shared<Scope>("ModuleList"));
  const WeightSource ews = ws.pp("experts");
  for (int64_t e = 0; e < o_.experts; ++e)
    experts.push_back(add_block<GatedMLP>(*list, ews, std::to_string(e), hidden, o_.intermediate, o_.act, false,
                                          o_.names));
  if (o_.shared_intermediate > 0) {
    shared_expert = add_block<GatedMLP>(*this, ws, "shared_expert", hidden, o_.shared_intermediate, o_.act);
    shared_expert_gate = add_block<Linear>(*this, ws, "shared_expert_gate", hidden, 1, false);
  }
}

Tensor SparseMoE::forward(const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), N = B * T, K = o_.top_k;
  Tensor flat = x.reshape({N, C});
  Tensor probs = softmax(gate->forward(flat).to(DType::Float32), 1);
  auto [w, idx] = topk(probs, K, 1);
  if (o_.normalize) w = w / sum(w, {1}, true);
  w = w.to(x.dtype()).reshape({N * K});
  std::vector<int64_t> chosen = idx.contiguous().to_vector<int64_t>();
  Tensor out = zeros({N, C}, x.dtype());
  for (int64_t e = 0; e < o_.experts; ++e) {
    std::vector<int64_t> rows, slots;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        if (chosen[size_t(n * K + k)] == e) {
          rows.push_back(n);
          slots.push_back(n * K + k);
        }
    if (rows.empty()) continue;
    Tensor r = tensor<int64_t>(rows, {int64_t(rows.size())});
    Tensor scale = index_select(w, 0, tensor<int64_t>(slots, {int64_t(slots.size())})).unsqueeze(1);
    out = index_add(out, 0, r, experts[size_t(e)]->forward(index_select(flat, 0, r)) * scale);
  }
  if (shared_expert) out = out + sigmoid(shared_expert_gate->forward(flat)) * shared_expert->forward(flat);
  return out.reshape({B, T, C});
}

// ---- attention ----------------------------------------------------------------------------------

namespace {

// Whether the mask leaves every position in: undefined, or no zero in it. Read in place (a decode
// step's mask grows by a column each token, and the ops that check it were ~1% of the step);
// false for a layout not read here, which takes the general path to the same numbers.
bool no_padding(const Tensor& attention_mask) {
  if (!attention_mask.defined()) return true;
  if (!attention_mask.is_contiguous()) return false;
  const int64_t n = attention_mask.numel();
  auto none_zero = [n](const auto* v) { return std::find(v, v + n, 0) == v + n; };
  switch (attention_mask.dtype()) {
    case DType::Int64: return none_zero(attention_mask.data<int64_t>());
    case DType::Int32: return none_zero(attention_mask.data<int32_t>());
    case DType::Bool: return none_zero(static_cast<const uint8_t*>(attention_mask.data_ptr()));
    default: return false;
  }
}

// positions_from_mask for a mask without padding: past, past + 1, ... in every row.
Tensor consecutive_positions(int64_t B, int64_t past, int64_t T) {
  std::vector<int64_t> pos(size_t(B * T));
  for (int64_t i = 0; i < B * T; ++i) pos[size_t(i)] = past + i % T;
  return tensor<int64_t>(pos, {B, T});
}

}  // namespace

LayerContext layer_context(const ModelConfig& c, const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache,
                           DType dtype, const AttentionPositions& p) {
  const auto [B, T, past, mask] = begin_forward(c, input_ids, attention_mask, cache);
  LayerContext ctx;
  ctx.B = B, ctx.T = T, ctx.past = past, ctx.mask = mask, ctx.cache = cache;
  const bool every_position = no_padding(attention_mask);
  ctx.positions = every_position ? consecutive_positions(B, past, T) : positions_from_mask(mask, T);
  if (p.rotary_dims > 0) std::tie(ctx.cos, ctx.sin) = rope_tables(c, ctx.positions, p.rotary_dims, dtype);
  ctx.causal = !cache && T > 1 && !p.alibi_scale && (p.window == 0 || T - 1 <= p.window) &&
               (every_position || all(mask).item<bool>());
  if (!ctx.causal && every_position && T == 1 && !p.alibi_scale && (p.window == 0 || past <= p.window)) {
    ctx.bias = zeros({B, 1, 1, past + 1}, dtype);  // one query that sees every position: attention_bias's zeros
  } else if (!ctx.causal) {
    ctx.bias = attention_bias(mask, T, p.window, dtype);
    if (p.alibi_scale) ctx.bias = ctx.bias + alibi_bias(mask, c.num_heads, *p.alibi_scale, dtype);  // [B, H, T, S]
  }
  return ctx;
}

Tensor attend_layer(const LayerContext& ctx, int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v,
                    double dropout) {
  if (ctx.causal) return attend(q, k, v, Tensor(), dropout, /*causal=*/true);
  const bool graph = records(q, k, v);
  const bool streamable_q = q.dtype() == DType::Float32 || q.dtype() == DType::BFloat16 || q.dtype() == DType::Float16;
  if (ctx.cache && !graph && q.size(2) == 1 && ctx.cache->streams_attention() && streamable_q)
    return ctx.cache->append_and_attend(layer, q, k, v, ctx.bias);  // decode: streaming over the cache
  Tensor kk = k, vv = v;
  if (ctx.cache) std::tie(kk, vv) = ctx.cache->append(layer, k, v);
  return attend(q, kk, vv, ctx.bias, dropout);
}

Tensor rope_heads(const Tensor& x, int64_t heads, const LayerContext& ctx) {
  if (!ctx.cos.defined()) return split_heads(x, heads);  // no positions in attention (Jamba)
  if (!records(x) && ctx.cos.size(3) == x.size(2) / heads) return split_heads(rope_rows_(x, heads, ctx.cos, ctx.sin), heads);
  return apply_rope(split_heads(x, heads), ctx.cos, ctx.sin);
}

Tensor maybe_dropout(const nn::Module& m, const Tensor& x, double p) {
  return p > 0 && m.is_training() ? dropout(x, p, true) : x;
}

}  // namespace foundry::models::hf
