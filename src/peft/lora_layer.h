// PEFT's layers inside the library: the LoRA wrapper of one projection (peft/tuners/lora/layer.py's
// Linear) and the trainable copy of a module listed in modules_to_save (ModulesToSaveWrapper).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "foundry/nn/linear.h"
#include "models/hf/blocks.h"

namespace foundry::peft {

using models::hf::Linear;

/// What one adapter of one layer is made with.
struct LoraLayerSettings {
  int64_t r = 8;
  double alpha = 8;
  double dropout = 0;
  bool rslora = false;
  std::string init = "true";  ///< "true" | "gaussian" | "false"
};

/// y = base(x) + sum over active, unmerged adapters of scaling * B(A(dropout(x))). Children as
/// PEFT's: base_layer, lora_dropout, lora_A, lora_B (ModuleDicts keyed by adapter name).
class LoraLinear : public nn::Module, public models::hf::LinearAdapter {
 public:
  explicit LoraLinear(std::shared_ptr<Linear> base);
  ~LoraLinear() override;
  std::string type_name() const override { return "lora.Linear"; }
  Tensor forward(const Tensor& x) override { return base_->forward(x); }
  Tensor forward(Linear& base, const Tensor& x) override;

  void update_layer(const std::string& adapter, const LoraLayerSettings& s);
  bool has_adapter(const std::string& adapter) const { return adapters_.count(adapter) > 0; }
  void delete_adapter(const std::string& adapter);
  void set_active(const std::vector<std::string>& adapters) { active_ = adapters; }
  void set_disabled(bool disabled) { disabled_ = disabled; }
  /// scaling * B A in the base weight's layout ([out, in], or [in, out] for fan_in_fan_out).
  Tensor delta_weight(const std::string& adapter) const;
  void merge(const std::vector<std::string>& adapters);
  void unmerge();
  const std::vector<std::string>& merged() const { return merged_; }
  const std::shared_ptr<Linear>& base() const { return base_; }
  /// Releases the projection from the wrapper (its forward is its own again).
  void detach_base();
  Tensor& lora_A(const std::string& adapter) const { return adapters_.at(adapter).A->weight; }
  Tensor& lora_B(const std::string& adapter) const { return adapters_.at(adapter).B->weight; }
  double scaling(const std::string& adapter) const { return adapters_.at(adapter).scaling; }

 private:
  struct Adapter {
    std::shared_ptr<nn::Linear> A, B;
    std::shared_ptr<nn::Module> dropout;
    double scaling = 1;
  };
  std::shared_ptr<Linear> base_;
  std::shared_ptr<nn::Module> dropout_, A_, B_;  // ModuleDicts by adapter name
  std::map<std::string, Adapter> adapters_;
  std::vector<std::string> active_{"default"}, merged_;
  bool disabled_ = false;
};

/// modules_to_save for a projection (an LM head, a classifier): original_module is the base's
/// projection, modules_to_save.<adapter> trainable copies; the active adapter's copy computes
/// unless adapters are disabled.
class ModulesToSaveLinear : public nn::Module, public models::hf::LinearAdapter {
 public:
  explicit ModulesToSaveLinear(std::shared_ptr<Linear> original);
  ~ModulesToSaveLinear() override;
  std::string type_name() const override { return "ModulesToSaveWrapper"; }
  Tensor forward(const Tensor& x) override { return original_->forward(x); }
  Tensor forward(Linear& base, const Tensor& x) override;
  void add_copy(const std::string& adapter);
  bool has_copy(const std::string& adapter) const { return copies_.count(adapter) > 0; }
  void delete_copy(const std::string& adapter);
  void set_active(const std::string& adapter) { active_ = adapter; }
  void set_disabled(bool disabled) { disabled_ = disabled; }
  const std::shared_ptr<Linear>& original() const { return original_; }
  std::shared_ptr<Linear> copy(const std::string& adapter) const;
  void detach_base();

 private:
  std::shared_ptr<Linear> original_;
  std::shared_ptr<nn::Module> dict_;
  std::map<std::string, std::shared_ptr<Linear>> copies_;
  std::string active_ = "default";
  bool disabled_ = false;
};

}  // namespace foundry::peft
