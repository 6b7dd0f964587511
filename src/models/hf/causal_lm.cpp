// CausalLM: what every architecture's module tree shares — the forward entry points (logits, and
// HF's shifted loss with labels), per-block gradient checkpointing, weight-product settings, the
// KV cache factory, and writing the model back as an HF folder.
#include <filesystem>
#include <map>
#include <set>

#include "foundry/autograd/checkpoint.h"
#include "foundry/autograd/grad_mode.h"
#include "foundry/io/atomic_file.h"
#include "foundry/io/safetensors.h"
#include "foundry/ops/ops.h"
#include "foundry/quant/block_formats.h"
#include "models/hf/blocks.h"

namespace foundry::models {

namespace fs = std::filesystem;

CausalLM::CausalLM(const ModelConfig& c, std::shared_ptr<hf::WeightProducts> products)
    : config_(c), products_(std::move(products)) {}

Tensor CausalLM::forward(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache, int64_t last_positions) {
  // Nothing records when no parameter requires grad: the blocks take their inference paths.
  if (!hf::records_parameters(*this)) {
    autograd::NoGradGuard no_grad;
    return hf::float_logits(run(input_ids, attention_mask, cache, last_positions));
  }
  return hf::float_logits(run(input_ids, attention_mask, cache, last_positions));
}

Tensor CausalLM::hidden_states(const Tensor& input_ids, const Tensor& attention_mask) {
  autograd::NoGradGuard no_grad;
  struct Restore {
    bool& flag;
    ~Restore() { flag = false; }
  } restore{return_hidden_};
  return_hidden_ = true;
  Tensor h = run(input_ids, attention_mask, nullptr, 0);
  return h.dtype() == DType::Float32 ? h : h.to(DType::Float32);
}

Tensor CausalLM::causal_lm_loss(const Tensor& logits, const Tensor& labels) {
  FOUNDRY_CHECK_AS(ValueError, logits.dim() == 3 && labels.dim() == 2 && labels.size(0) == logits.size(0) &&
                                   labels.size(1) == logits.size(1),
                   "labels must be [batch, tokens] = [{}, {}], got {}", logits.size(0), logits.size(1),
                   shape_str(labels.sizes()));
  FOUNDRY_CHECK_AS(TypeError, !is_floating(labels.dtype()) && labels.dtype() != DType::Bool,
                   "labels must be integer token ids, got {}", dtype_name(labels.dtype()));
  const int64_t T = logits.size(1), V = logits.size(2);
  Tensor shifted = logits.narrow(1, 0, T - 1).reshape({-1, V});
  Tensor targets = labels.narrow(1, 1, T - 1).to(DType::Int64).reshape({-1});
  return cross_entropy(shifted.to(DType::Float32), targets, Tensor(), -100);
}

CausalLMOutput CausalLM::operator()(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& labels) {
  CausalLMOutput out;
  out.logits = forward(input_ids, attention_mask);
  if (labels.defined()) out.loss = causal_lm_loss(out.logits, labels);
  return out;
}

namespace hf {

bool checkpoints(const CausalLM& model) {
  return model.gradient_checkpointing() && model.is_training() && autograd::is_grad_enabled();
}

Tensor checkpointed(const CausalLM& model, const std::function<Tensor(const Tensor&)>& layer, const Tensor& h) {
  if (!checkpoints(model)) return layer(h);
  // The first pass runs without recording, where blocks may update their input in place (the
  // fused residual + norm): give them a copy, so the input saved for the recomputation stays intact.
  return autograd::checkpoint(
      [layer](const std::vector<Tensor>& in) { return std::vector<Tensor>{layer(in[0].clone())}; }, {h})[0];
}

}  // namespace hf

KVCache CausalLM::make_cache(int64_t batch, int64_t capacity) const {
  return KVCache(config_.num_layers, batch, config_.num_kv_heads, capacity, config_.head_dim, dtype_, kv_format_);
}

void CausalLM::set_kv_cache_format(const std::string& format) {
  if (!format.empty()) {
    const quant::BlockFormatTraits& t = quant::traits(format);  // ValueError naming the formats if unknown
    FOUNDRY_CHECK_AS(ValueError, config_.head_dim % t.block_size == 0 && t.format != quant::BlockFormat::Q8_K,
                     "KV cache format {}: head_dim {} is not whole blocks of {} values", t.name, config_.head_dim,
                     t.block_size);
  }
  kv_format_ = format;
}

std::map<std::string, Tensor> CausalLM::weights() const {
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : named_parameters()) out[name] = t;
  return out;
}

std::map<std::string, CausalLM::StoredWeight> CausalLM::stored_weights() const {
  std::map<std::string, StoredWeight> out;
  for (auto& [name, t] : named_parameters()) {
    if (auto q = products_->adopted_storage(t)) out[name] = {q->first, t.numel(), q->second};
    else out[name] = {std::string(dtype_name(t.dtype())), t.numel(), t.nbytes()};
  }
  return out;
}

void CausalLM::set_weight_quantization(const std::string& format) { products_->set_format(format); }

const std::string& CausalLM::weight_quantization() const { return products_->format(); }

void CausalLM::set_quantized_prefill(const std::string& mode) { products_->set_prefill(mode); }

bool CausalLM::has_adopted_quantized_weights() const { return products_->any_adopted(); }

// The adopted parameters (their placeholders) by data pointer: state_dict's entries are detached
// aliases, the same memory under another tensor, and a tied weight has one entry per name.
namespace {
std::map<const void*, Tensor> adopted_parameters(const CausalLM& model, const hf::WeightProducts& products) {
  std::map<const void*, Tensor> out;
  if (!products.any_adopted()) return out;
  for (const auto& [name, t] : model.named_parameters())
    if (products.adopted(t)) out[t.data_ptr()] = t;
  return out;
}
}  // namespace

nn::NamedTensors CausalLM::state_dict() const {
  nn::NamedTensors out = nn::Module::state_dict();
  const std::map<const void*, Tensor> adopted = adopted_parameters(*this, *products_);
  if (adopted.empty()) return out;
  autograd::NoGradGuard no_grad;
  std::map<const void*, Tensor> dense;  // a tied weight dequantized once
  for (auto& [name, t] : out) {
    auto it = adopted.find(t.data_ptr());
    if (it == adopted.end()) continue;
    Tensor& d = dense[t.data_ptr()];
    if (!d.defined()) d = products_->adopted_dense(it->second);
    t = d;
  }
  return out;
}

nn::IncompatibleKeys CausalLM::load_state_dict(const nn::NamedTensors& state, bool strict) {
  const std::map<const void*, Tensor> adopted = adopted_parameters(*this, *products_);
  if (!adopted.empty()) {
    std::set<std::string> held;
    for (const auto& [name, t] : nn::Module::state_dict())
      if (adopted.count(t.data_ptr())) held.insert(name);
    for (const auto& [name, value] : state)
      if (held.count(name))
        raise<ValueError>("load_state_dict: '{}' is held quantized (the checkpoint's bytes, which the model "
                          "computes with); load the float checkpoint to change its weights",
                          name);
  }
  return nn::Module::load_state_dict(state, strict);
}

void CausalLM::freeze_if_quantized() {
  if (products_->format().empty() && !products_->any_adopted()) return;
  for (Tensor& p : parameters()) p.requires_grad_(false);
}

void CausalLM::adopt_quantized(const std::string& name, const std::string& format, const Tensor& bytes) {
  for (auto& [n, t] : named_parameters())
    if (n == name) return products_->adopt(t, format, bytes);
  raise<ValueError>("adopt_quantized: the model has no parameter '{}'", name);
}

void save_module_folder(const nn::Module& model, const std::string& config_json, const std::string& dir,
                        const std::vector<std::string>& tokenizer_files, bool keep_dtype, DType dtype) {
  fs::create_directories(dir);
  std::map<std::string, Tensor> tensors;
  for (const auto& [name, t] : model.named_parameters()) {  // tied tensors once, under their first name
    Tensor v = t.detach();
    tensors[name] = (keep_dtype ? v : v.to(DType::Float32)).contiguous();
  }
  io::save_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
  for (const std::string& f : tokenizer_files)
    io::write_file_atomic((fs::path(dir) / fs::path(f).filename()).string(), io::read_file(f));
  hf::json config = hf::json::parse(config_json);
  config["torch_dtype"] = keep_dtype ? dtype_name(dtype) : "float32";
  io::write_file_atomic((fs::path(dir) / "config.json").string(), config.dump(2) + "\n");
}

void save_pretrained(const CausalLM& model, const std::string& dir, const std::vector<std::string>& tokenizer_files,
                     bool keep_dtype) {
  FOUNDRY_CHECK_AS(ValueError, !model.has_adopted_quantized_weights(),
                   "save_pretrained: the model computes with quantized weights it holds no float copy of");
  save_module_folder(model, model.config().json, dir, tokenizer_files, keep_dtype, model.dtype());
}

}  // namespace foundry::models
