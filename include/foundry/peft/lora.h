// LoRA fine-tuning with PEFT's semantics and file format (peft 0.11): low-rank adapters wrapped
// around the projections of any Hugging Face model load_pretrained() builds, trained while the
// base stays frozen (float, or quantized in memory: QLoRA), saved as adapter_config.json +
// adapter_model.safetensors that PEFT loads, loaded from files PEFT wrote, merged into the base.
//
// The wrapping is PEFT's: a targeted projection `q_proj` becomes a LoRA layer whose children are
// `base_layer` (the projection), `lora_dropout`, `lora_A` and `lora_B` (one entry per adapter
// name), so a PeftModel's parameter names are PEFT's
// ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"). The architectures
// keep calling their projection; the projection hands its output to the LoRA layer (y = W x + b +
// scaling * B(A(dropout(x))) for each active, unmerged adapter).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "foundry/models/pretrained.h"
#include "foundry/nn/module.h"

namespace foundry::peft {

/// PEFT's LoraConfig (the fields Foundry implements; the JSON holds only keys PEFT 0.11 knows).
struct LoraConfig {
  int64_t r = 8;
  double lora_alpha = 8;
  double lora_dropout = 0;
  /// Module-name suffixes (PEFT's list form: a module `a.b.q_proj` matches "q_proj" and "b.q_proj").
  std::vector<std::string> target_modules;
  /// PEFT's string form: a regular expression the whole module name must match (ECMAScript
  /// syntax, which covers the patterns people write: alternation, classes, `.*`).
  std::optional<std::string> target_modules_regex;
  /// "all-linear": every projection but the output layer.
  bool all_linear = false;
  /// Weights stored [in, out] (GPT-2's Conv1D); set automatically for such layers, as PEFT does.
  bool fan_in_fan_out = false;
  std::string bias = "none";  ///< "none" | "all" | "lora_only"
  bool use_rslora = false;    ///< scaling lora_alpha / sqrt(r) instead of lora_alpha / r
  /// Modules trained in full and saved with the adapter (e.g. "lm_head", "score").
  std::vector<std::string> modules_to_save;
  /// "true" (A kaiming-uniform a=sqrt(5), B zeros), "gaussian" (A normal(0, 1/r)), "false"
  /// (random B too: for tests that need a non-zero adapter).
  std::string init_lora_weights = "true";
  /// Only these layer indices (of `layers.N` / `h.N` in the module path); empty: all.
  std::vector<int64_t> layers_to_transform;
  /// Per-module rank and alpha overrides (PEFT's rank_pattern / alpha_pattern: a key matches a
  /// module whose name ends with it).
  std::map<std::string, int64_t> rank_pattern;
  std::map<std::string, double> alpha_pattern;
  bool use_dora = false;
  std::string task_type = "CAUSAL_LM";
  std::string base_model_name_or_path;
  bool inference_mode = false;

  /// adapter_config.json's object (PEFT 0.11's keys only).
  std::string to_json() const;
  /// Parses adapter_config.json text; `source` names the file in errors. Refuses a peft_type
  /// other than LORA (IA3, prefix tuning, ...) and values it does not implement.
  static LoraConfig from_json(const std::string& text, const std::string& source);
};

/// The target modules PEFT uses for a model_type when none are given (q_proj,v_proj for Llama,
/// c_attn for GPT-2, query_key_value for BLOOM / Falcon / GPT-NeoX, ...).
std::vector<std::string> default_target_modules(const std::string& model_type);

/// A causal LM with LoRA adapters (PEFT's PeftModelForCausalLM): children base_model (LoraModel)
/// -> model (the CausalLM, its targeted projections wrapped in place). Holds the base model; the
/// base's own forward now runs the adapters too (the wrapping is in place, as in PEFT).
class PeftModel : public nn::Module {
 public:
  /// get_peft_model: wraps `model` with a fresh adapter; only adapter parameters (and biases /
  /// modules_to_save per the config) require grad afterwards.
  PeftModel(std::shared_ptr<models::CausalLM> model, const LoraConfig& config,
            const std::string& adapter_name = "default");
  ~PeftModel() override;
  /// PeftModel.from_pretrained: the adapter in `dir` (adapter_config.json +
  /// adapter_model.safetensors), frozen unless is_trainable.
  static std::shared_ptr<PeftModel> from_pretrained(std::shared_ptr<models::CausalLM> model, const std::string& dir,
                                                    const std::string& adapter_name = "default",
                                                    bool is_trainable = false);
  std::string type_name() const override { return "PeftModelForCausalLM"; }

  /// Another adapter beside the existing ones (not active until set_adapter).
  void add_adapter(const std::string& adapter_name, const LoraConfig& config);
  /// Reads an adapter folder into `adapter_name` (PEFT's load_adapter).
  void load_adapter(const std::string& dir, const std::string& adapter_name, bool is_trainable = false);
  /// Makes `adapter_name` the active adapter (the only one whose parameters require grad).
  void set_adapter(const std::string& adapter_name);
  const std::string& active_adapter() const { return active_; }
  std::vector<std::string> adapter_names() const;
  const LoraConfig& peft_config(const std::string& adapter_name) const;
  void delete_adapter(const std::string& adapter_name);
  /// enable_adapter_layers / disable_adapter_layers: the base model's outputs while disabled.
  void set_adapters_enabled(bool enabled);
  bool adapters_enabled() const { return enabled_; }

  /// Adds the active adapter's B A * scaling into the base weights (merge_adapter) / takes it out
  /// again (unmerge_adapter; the base comes back within float rounding).
  void merge_adapter();
  void unmerge_adapter();
  /// Merges the active adapter, removes every LoRA layer and returns the plain model
  /// (merge_and_unload); unload() removes them without merging.
  std::shared_ptr<models::CausalLM> merge_and_unload();
  std::shared_ptr<models::CausalLM> unload();

  /// PEFT's layout: adapter_config.json + adapter_model.safetensors in `dir` for the default
  /// adapter, in dir/<name> for the others. Atomic per file.
  void save_pretrained(const std::string& dir) const;
  /// The adapter's tensors under the file's key names (get_peft_model_state_dict).
  std::map<std::string, Tensor> adapter_state_dict(const std::string& adapter_name) const;

  models::CausalLMOutput operator()(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& labels = {});
  Tensor forward(const Tensor& input_ids) override;
  models::CausalLM& base_model() const { return *model_; }
  const std::shared_ptr<models::CausalLM>& base_model_ptr() const { return model_; }
  /// (trainable, all) parameter elements (print_trainable_parameters's numbers).
  std::pair<int64_t, int64_t> trainable_parameters() const;
  /// Names (under this module) of the LoRA layers of the active adapter.
  std::vector<std::string> lora_module_names() const;

 private:
  void inject(const std::string& adapter_name, const LoraConfig& config);
  void mark_trainable(const std::string& adapter_name, bool trainable);
  void remove_layers(bool merge);
  std::shared_ptr<models::CausalLM> model_;
  std::map<std::string, LoraConfig> configs_;
  std::string active_;
  bool enabled_ = true;
  bool unloaded_ = false;
};

}  // namespace foundry::peft

namespace foundry::peft {

/// Whether a module path names a causal LM's output layer (lm_head; GPT-NeoX's embed_out).
bool is_output_layer(const std::string& module_name);

/// QLoRA's frozen base: every projection but the LM head computes from `format` bytes afterwards
/// and its float weight is dropped (a placeholder stays in its slot, frozen). "nf4" reproduces
/// bitsandbytes' NF4 with double quantization (its codes and dequantized block maxima, held as
/// Foundry's nf4 rows), "int8" bitsandbytes' LLM.int8 row-wise codes (held as q8_0 blocks carrying
/// the row's scale in fp16), any other name a GGML block format ("q4_0", "q8_0", "q4_K", ...).
/// Projections whose rows are not whole blocks stay float (and frozen). Returns how many were
/// quantized.
int64_t quantize_base(models::CausalLM& model, const std::string& format);

}  // namespace foundry::peft
