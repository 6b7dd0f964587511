#include "peft/lora_layer.h"

#include <algorithm>
#include <cmath>

#include "foundry/autograd/grad_mode.h"
#include "foundry/core/error.h"
#include "foundry/nn/init.h"
#include "foundry/ops/ops.h"

namespace foundry::peft {

using models::hf::Scope;
using models::hf::WeightProducts;

namespace {

std::shared_ptr<nn::Module> module_dict() { return std::make_shared<Scope>("ModuleDict"); }

// Whether products with the projection's weight read quantized bytes (QLoRA's frozen base).
bool quantized_base(const Linear& l) { return l.products()->quantized_for(l.weight, l.transposed()); }

}  // namespace

// ---- LoraLinear -------------------------------------------------------------------------------

LoraLinear::LoraLinear(std::shared_ptr<Linear> base) : base_(std::move(base)) {
  register_module("base_layer", base_);
  dropout_ = register_module("lora_dropout", module_dict());
  A_ = register_module("lora_A", module_dict());
  B_ = register_module("lora_B", module_dict());
  base_->set_adapter(this);
  training_ = base_->is_training();
}

LoraLinear::~LoraLinear() { detach_base(); }

void LoraLinear::detach_base() {
  if (base_ && base_->adapter() == this) base_->set_adapter(nullptr);
}

void LoraLinear::update_layer(const std::string& adapter, const LoraLayerSettings& s) {
  FOUNDRY_CHECK_AS(ValueError, s.r > 0, "LoRA: r must be a positive integer, got {}", s.r);
  FOUNDRY_CHECK_AS(ValueError, s.dropout >= 0 && s.dropout < 1, "LoRA: lora_dropout must be in [0, 1), got {}",
                   s.dropout);
  FOUNDRY_CHECK_AS(ValueError, s.init == "true" || s.init == "false" || s.init == "gaussian",
                   "LoRA: init_lora_weights must be true, false or \"gaussian\", got '{}'", s.init);
  Adapter a;
  a.A = std::make_shared<nn::Linear>(base_->in_features(), s.r, false);  // kaiming_uniform_(a=sqrt(5))
  a.B = std::make_shared<nn::Linear>(s.r, base_->out_features(), false);
  {
    autograd::NoGradGuard no_grad;
    if (s.init == "gaussian") nn::init::normal_(a.A->weight, 0.0, 1.0 / double(s.r));
    if (s.init != "false") a.B->weight.zero_();
  }
  if (s.dropout > 0) a.dropout = std::make_shared<nn::Dropout>(s.dropout);
  else a.dropout = std::make_shared<nn::Identity>();
  a.scaling = s.alpha / (s.rslora ? std::sqrt(double(s.r)) : double(s.r));
  dropout_->register_module(adapter, a.dropout);
  A_->register_module(adapter, a.A);
  B_->register_module(adapter, a.B);
  a.dropout->train(is_training());
  a.A->train(is_training());
  a.B->train(is_training());
  adapters_[adapter] = std::move(a);
}

void LoraLinear::delete_adapter(const std::string& adapter) {
  if (!adapters_.erase(adapter)) return;
  dropout_->register_module<nn::Module>(adapter, nullptr);
  A_->register_module<nn::Module>(adapter, nullptr);
  B_->register_module<nn::Module>(adapter, nullptr);
  active_.erase(std::remove(active_.begin(), active_.end(), adapter), active_.end());
}

Tensor LoraLinear::forward(Linear& base, const Tensor& x) {
  Tensor y = base.base_forward(x);
  if (disabled_) return y;
  for (const std::string& name : active_) {
    auto it = adapters_.find(name);
    if (it == adapters_.end() || std::count(merged_.begin(), merged_.end(), name)) continue;
    const Adapter& a = it->second;
    Tensor h = a.dropout->forward(x);
    const DType wd = a.A->weight.dtype();
    Tensor d = a.B->forward(a.A->forward(h.dtype() == wd ? h : h.to(wd)));
    if (a.scaling != 1.0) d = d * a.scaling;
    y = y + (d.dtype() == y.dtype() ? d : d.to(y.dtype()));
  }
  return y;
}

Tensor LoraLinear::delta_weight(const std::string& adapter) const {
  const Adapter& a = adapters_.at(adapter);
  Tensor d = matmul(a.B->weight.detach().to(DType::Float32), a.A->weight.detach().to(DType::Float32)) * a.scaling;
  return base_->transposed() ? d.t().contiguous() : d;  // fan_in_fan_out: weight [in, out]
}

void LoraLinear::merge(const std::vector<std::string>& adapters) {
  for (const std::string& name : adapters) {
    if (!adapters_.count(name) || std::count(merged_.begin(), merged_.end(), name)) continue;
    if (quantized_base(*base_))
      raise<NotImplementedError>(
          "LoRA merge: the base weight of this layer is quantized in memory; merge into the float checkpoint "
          "(foundry merge) and quantize the result");
    autograd::NoGradGuard no_grad;
    base_->weight.add_(delta_weight(name).to(base_->weight.dtype()));
    merged_.push_back(name);
  }
}

void LoraLinear::unmerge() {
  autograd::NoGradGuard no_grad;
  while (!merged_.empty()) {
    base_->weight.add_(delta_weight(merged_.back()).to(base_->weight.dtype()), -1);
    merged_.pop_back();
  }
}

// ---- modules_to_save --------------------------------------------------------------------------

ModulesToSaveLinear::ModulesToSaveLinear(std::shared_ptr<Linear> original) : original_(std::move(original)) {
  register_module("original_module", original_);
  dict_ = register_module("modules_to_save", module_dict());
  original_->set_adapter(this);
  training_ = original_->is_training();
}

ModulesToSaveLinear::~ModulesToSaveLinear() { detach_base(); }

void ModulesToSaveLinear::detach_base() {
  if (original_ && original_->adapter() == this) original_->set_adapter(nullptr);
}

void ModulesToSaveLinear::add_copy(const std::string& adapter) {
  if (quantized_base(*original_))
    raise<NotImplementedError>("modules_to_save: the layer's weight is quantized in memory; it can't be trained");
  const Linear& o = *original_;
  auto fetch = [&o](const std::string& name, const Shape&, const models::hf::Init&, models::hf::Layout) {
    return (name == "weight" ? o.weight : o.bias).detach().to(DType::Float32).clone();
  };
  auto has = [&o](const std::string& name) { return name == "weight" || (name == "bias" && o.bias.defined()); };
  models::hf::WeightSource ws(fetch, has, std::make_shared<WeightProducts>());
  auto copy = std::make_shared<Linear>(ws, o.in_features(), o.out_features(), o.bias.defined(), o.transposed());
  copy->train(is_training());
  dict_->register_module(adapter, copy);
  copies_[adapter] = copy;
}

void ModulesToSaveLinear::delete_copy(const std::string& adapter) {
  if (!copies_.erase(adapter)) return;
  dict_->register_module<nn::Module>(adapter, nullptr);
}

std::shared_ptr<Linear> ModulesToSaveLinear::copy(const std::string& adapter) const {
  auto it = copies_.find(adapter);
  return it == copies_.end() ? nullptr : it->second;
}

Tensor ModulesToSaveLinear::forward(Linear& base, const Tensor& x) {
  auto it = copies_.find(active_);
  if (disabled_ || it == copies_.end()) return base.base_forward(x);
  return it->second->base_forward(x);
}

}  // namespace foundry::peft
