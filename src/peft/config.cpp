// adapter_config.json as PEFT 0.11 writes and reads it: the 24 keys of its LoraConfig (sorted, as
// PEFT's json.dumps(sort_keys=True)), so PEFT 0.11 loads what Foundry writes (it raises on keys it
// does not know), and Foundry reads every LoRA config PEFT writes, refusing what it can't honour.
#include <algorithm>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "foundry/core/error.h"
#include "foundry/peft/lora.h"
#include "foundry/io/json_depth.h"

namespace foundry::peft {

using json = nlohmann::ordered_json;

std::vector<std::string> default_target_modules(const std::string& model_type) {
  // peft's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING (qwen2 as later versions add it).
  static const std::map<std::string, std::vector<std::string>> defaults = {
      {"llama", {"q_proj", "v_proj"}},   {"mistral", {"q_proj", "v_proj"}}, {"mixtral", {"q_proj", "v_proj"}},
      {"gemma", {"q_proj", "v_proj"}},   {"qwen2", {"q_proj", "v_proj"}},   {"qwen2_moe", {"q_proj", "v_proj"}},
      {"opt", {"q_proj", "v_proj"}},     {"gpt2", {"c_attn"}},               {"gpt_neox", {"query_key_value"}},
      {"bloom", {"query_key_value"}},    {"falcon", {"query_key_value"}},    {"phi", {"q_proj", "v_proj", "fc1", "fc2"}},
  };
  auto it = defaults.find(model_type);
  if (it == defaults.end())
    raise<ValueError>("LoRA: no default target modules for model_type '{}'; give target_modules", model_type);
  return it->second;
}

bool is_output_layer(const std::string& name) {
  const std::string last = name.substr(name.rfind('.') == std::string::npos ? 0 : name.rfind('.') + 1);
  return last == "lm_head" || last == "embed_out";
}

std::string LoraConfig::to_json() const {
  std::map<std::string, json> keys;  // sorted, as PEFT writes them
  keys["alpha_pattern"] = json::object();
  for (const auto& [k, v] : alpha_pattern) keys["alpha_pattern"][k] = v;
  keys["auto_mapping"] = nullptr;
  keys["base_model_name_or_path"] = base_model_name_or_path.empty() ? json(nullptr) : json(base_model_name_or_path);
  keys["bias"] = bias;
  keys["fan_in_fan_out"] = fan_in_fan_out;
  keys["inference_mode"] = inference_mode;
  keys["init_lora_weights"] = init_lora_weights == "gaussian" ? json("gaussian") : json(init_lora_weights != "false");
  keys["layer_replication"] = nullptr;
  keys["layers_pattern"] = nullptr;
  keys["layers_to_transform"] = layers_to_transform.empty() ? json(nullptr) : json(layers_to_transform);
  keys["loftq_config"] = json::object();
  keys["lora_alpha"] = lora_alpha == double(int64_t(lora_alpha)) ? json(int64_t(lora_alpha)) : json(lora_alpha);
  keys["lora_dropout"] = lora_dropout;
  keys["megatron_config"] = nullptr;
  keys["megatron_core"] = "megatron.core";
  keys["modules_to_save"] = modules_to_save.empty() ? json(nullptr) : json(modules_to_save);
  keys["peft_type"] = "LORA";
  keys["r"] = r;
  keys["rank_pattern"] = json::object();
  for (const auto& [k, v] : rank_pattern) keys["rank_pattern"][k] = v;
  keys["revision"] = nullptr;
  if (target_modules_regex) keys["target_modules"] = *target_modules_regex;
  else if (all_linear) keys["target_modules"] = "all-linear";
  else keys["target_modules"] = target_modules.empty() ? json(nullptr) : json(target_modules);
  keys["task_type"] = task_type.empty() ? json(nullptr) : json(task_type);
  keys["use_dora"] = use_dora;
  keys["use_rslora"] = use_rslora;
  json out = json::object();
  for (auto& [k, v] : keys) out[k] = std::move(v);
  return out.dump(2);
}

namespace {

[[noreturn]] void bad(const std::string& source, const std::string& key, const std::string& why) {
  raise<ValueError>("{}: '{}' {}", source, key, why);
}

template <class T>
T get(const json& j, const std::string& source, const std::string& key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    bad(source, key, "has the wrong type (" + it->dump() + ")");
  }
}

}  // namespace

LoraConfig LoraConfig::from_json(const std::string& text, const std::string& source) {
  io::check_json_depth(text, source);
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) raise<ValueError>("{}: not a JSON object (malformed adapter config)", source);
  if (!j.contains("peft_type"))
    raise<ValueError>("{}: no 'peft_type' (not a PEFT adapter config)", source);
  const std::string type = j["peft_type"].is_string() ? j["peft_type"].get<std::string>() : j["peft_type"].dump();
  if (type != "LORA")
    raise<NotImplementedError>("{}: peft_type '{}' is not supported; Foundry loads LoRA adapters (peft_type LORA)",
                               source, type);
  LoraConfig c;
  c.r = get<int64_t>(j, source, "r", 8);
  if (c.r <= 0) bad(source, "r", "must be a positive integer");
  c.lora_alpha = get<double>(j, source, "lora_alpha", 8.0);
  c.lora_dropout = get<double>(j, source, "lora_dropout", 0.0);
  if (c.lora_dropout < 0 || c.lora_dropout >= 1) bad(source, "lora_dropout", "must be in [0, 1)");
  c.fan_in_fan_out = get<bool>(j, source, "fan_in_fan_out", false);
  c.bias = get<std::string>(j, source, "bias", "none");
  if (c.bias != "none" && c.bias != "all" && c.bias != "lora_only") bad(source, "bias", "must be none, all or lora_only");
  c.use_rslora = get<bool>(j, source, "use_rslora", false);
  c.use_dora = get<bool>(j, source, "use_dora", false);
  if (c.use_dora) raise<NotImplementedError>("{}: use_dora (DoRA) adapters are not supported yet", source);
  if (j.contains("layer_replication") && !j["layer_replication"].is_null())
    raise<NotImplementedError>("{}: layer_replication is not supported", source);
  if (j.contains("megatron_config") && !j["megatron_config"].is_null())
    raise<NotImplementedError>("{}: megatron_config is not supported", source);
  if (j.contains("layers_pattern") && !j["layers_pattern"].is_null())
    raise<NotImplementedError>("{}: layers_pattern is not supported (layers are found by their index)", source);
  if (auto it = j.find("init_lora_weights"); it != j.end() && !it->is_null()) {
    if (it->is_boolean()) c.init_lora_weights = it->get<bool>() ? "true" : "false";
    else if (it->is_string() && it->get<std::string>() == "gaussian") c.init_lora_weights = "gaussian";
    else
      raise<NotImplementedError>("{}: init_lora_weights {} changes the base weights (PiSSA / OLoRA / LoftQ); not supported",
                                 source, it->dump());
  }
  if (auto it = j.find("target_modules"); it != j.end() && !it->is_null()) {
    if (it->is_string()) {
      const std::string s = it->get<std::string>();
      std::string lower = s;
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      if (lower == "all-linear") c.all_linear = true;
      else c.target_modules_regex = s;
    } else {
      c.target_modules = get<std::vector<std::string>>(j, source, "target_modules", {});
    }
  }
  c.modules_to_save = get<std::vector<std::string>>(j, source, "modules_to_save", {});
  if (auto it = j.find("layers_to_transform"); it != j.end() && !it->is_null())
    c.layers_to_transform = it->is_number_integer() ? std::vector<int64_t>{it->get<int64_t>()}
                                                    : get<std::vector<int64_t>>(j, source, "layers_to_transform", {});
  c.rank_pattern = get<std::map<std::string, int64_t>>(j, source, "rank_pattern", {});
  c.alpha_pattern = get<std::map<std::string, double>>(j, source, "alpha_pattern", {});
  c.task_type = get<std::string>(j, source, "task_type", "");
  c.base_model_name_or_path = get<std::string>(j, source, "base_model_name_or_path", "");
  c.inference_mode = get<bool>(j, source, "inference_mode", false);
  return c;
}

}  // namespace foundry::peft
