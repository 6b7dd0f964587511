// PeftModel: injecting LoRA layers into a causal LM by PEFT's matching rules, freezing what PEFT
// freezes, and PEFT's adapter files (peft/utils/save_and_load.py's key mapping).
#include <algorithm>
#include <filesystem>
#include <optional>
#include <regex>
#include <set>

#include "foundry/autograd/grad_mode.h"
#include "foundry/core/error.h"
#include "foundry/io/atomic_file.h"
#include "foundry/io/safetensors.h"
#include "foundry/peft/lora.h"
#include "peft/lora_layer.h"

namespace foundry::peft {

namespace fs = std::filesystem;
using models::CausalLM;
using models::hf::Scope;

namespace {

constexpr const char* kWeightsFile = "adapter_model.safetensors";
constexpr const char* kConfigFile = "adapter_config.json";
constexpr const char* kPrefix = "base_model.model.";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
}

// PEFT's check_target_module_exists (0.11): a regex string must match the whole name; a list
// matches an exact name, or a dotted suffix subject to layers_to_transform. Built once per
// injection (the regex compiled once, not per module).
class TargetMatcher {
 public:
  explicit TargetMatcher(const LoraConfig& c) : c_(c) {
    if (c.target_modules_regex) regex_ = std::regex(*c.target_modules_regex);
  }
  bool operator()(const std::string& key) const {
    if (regex_) return std::regex_match(key, *regex_);
    if (std::count(c_.target_modules.begin(), c_.target_modules.end(), key)) return true;
    bool found = false;
    for (const std::string& t : c_.target_modules) found |= ends_with(key, "." + t);
    if (!found || c_.layers_to_transform.empty()) return found;
    std::smatch m;
    static const std::regex layer_index(R"(.*\.[^.]*\.(\d+)\.)");  // greedy, as PEFT 0.11
    if (!std::regex_search(key, m, layer_index) || m.position(0) != 0) return false;
    const int64_t index = std::stoll(m[1].str());
    return std::count(c_.layers_to_transform.begin(), c_.layers_to_transform.end(), index) > 0;
  }

 private:
  const LoraConfig& c_;
  std::optional<std::regex> regex_;
};

// rank_pattern / alpha_pattern: the first key that the module name ends with (after a dot).
template <class T>
T pattern_value(const std::map<std::string, T>& patterns, const std::string& key, T fallback) {
  for (const auto& [pattern, value] : patterns)
    if (std::regex_match(key, std::regex(".*\\." + pattern + "$")) || key == pattern) return value;
  return fallback;
}

std::pair<std::shared_ptr<nn::Module>, std::string> parent_of(nn::Module& root, const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return {root.shared_from_this(), name};
  return {root.get_submodule(name.substr(0, dot)), name.substr(dot + 1)};
}

// The module paths a model's named_modules() lists that are LoRA / modules_to_save wrappers.
template <class W>
std::vector<std::pair<std::string, std::shared_ptr<W>>> wrappers(const nn::Module& root) {
  std::vector<std::pair<std::string, std::shared_ptr<W>>> out;
  for (auto& [name, m] : root.named_modules())
    if (auto w = std::dynamic_pointer_cast<W>(m)) out.emplace_back(name, w);
  return out;
}

// Whether a module path lies inside a LoRA or modules_to_save wrapper (its base_layer, lora_A, ...):
// those are never targets themselves. Derived from the wrappers in `modules`.
class WrapperInteriors {
 public:
  explicit WrapperInteriors(const std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>>& modules) {
    for (const auto& [name, m] : modules)
      if (std::dynamic_pointer_cast<LoraLinear>(m) || std::dynamic_pointer_cast<ModulesToSaveLinear>(m))
        prefixes_.push_back(name + ".");
  }
  bool operator()(const std::string& name) const {
    for (const std::string& p : prefixes_)
      if (name.compare(0, p.size(), p) == 0) return true;
    return false;
  }

 private:
  std::vector<std::string> prefixes_;
};

}  // namespace

// ---- construction --------------------------------------------------------------------------------

PeftModel::PeftModel(std::shared_ptr<CausalLM> model, const LoraConfig& config, const std::string& adapter_name)
    : model_(std::move(model)) {
  FOUNDRY_CHECK_AS(ValueError, model_ != nullptr, "PeftModel: no base model");
  auto lora_model = register_module("base_model", std::make_shared<Scope>("LoraModel"));
  lora_model->register_module("model", model_);
  training_ = model_->is_training();
  active_ = adapter_name;
  inject(adapter_name, config);
  mark_trainable(adapter_name, !configs_.at(adapter_name).inference_mode);
}

PeftModel::~PeftModel() = default;

void PeftModel::inject(const std::string& adapter, const LoraConfig& config) {
  FOUNDRY_CHECK_AS(ValueError, !adapter.empty() && !contains(adapter, "."),
                   "PeftModel: adapter name '{}' must be non-empty and without dots", adapter);
  FOUNDRY_CHECK_AS(ValueError, !configs_.count(adapter), "PeftModel: adapter '{}' already exists", adapter);
  if (config.use_dora) raise<NotImplementedError>("LoRA: use_dora (DoRA) is not supported yet");
  if (config.bias != "none" && !configs_.empty())
    raise<ValueError>("LoRA: an adapter with bias='{}' can't sit beside other adapters (PEFT's rule)", config.bias);
  LoraConfig c = config;
  if (c.target_modules.empty() && !c.target_modules_regex && !c.all_linear)
    c.target_modules = default_target_modules(model_->config().model_type);
  const auto modules = model_->named_modules();
  const WrapperInteriors inside_wrapper(modules);
  if (c.all_linear) {  // every projection's last name but the output layer's (PEFT 0.11-0.13)
    std::set<std::string> names;
    for (auto& [name, m] : modules)
      if (!name.empty() && !inside_wrapper(name) && std::dynamic_pointer_cast<Linear>(m))
        names.insert(name.substr(name.rfind('.') + 1));
    for (auto it = names.begin(); it != names.end();) it = is_output_layer(*it) ? names.erase(it) : std::next(it);
    c.target_modules.assign(names.begin(), names.end());
    c.all_linear = false;
  }
  const TargetMatcher targeted(c);
  int64_t matched = 0;
  std::vector<std::function<void()>> wraps;  // applied after the walk (it holds the old tree)
  for (auto& [name, m] : modules) {
    if (name.empty() || inside_wrapper(name) || !targeted(name)) continue;
    LoraLayerSettings s;
    s.r = pattern_value(c.rank_pattern, name, c.r);
    s.alpha = pattern_value(c.alpha_pattern, name, c.lora_alpha);
    s.dropout = c.lora_dropout;
    s.rslora = c.use_rslora;
    s.init = c.init_lora_weights;
    if (auto lora = std::dynamic_pointer_cast<LoraLinear>(m)) {
      lora->update_layer(adapter, s);
    } else if (auto linear = std::dynamic_pointer_cast<Linear>(m)) {
      c.fan_in_fan_out = linear->transposed();  // PEFT writes the layer kind back into the config
      wraps.push_back([this, name = name, linear, adapter, s] {
        auto lora = std::make_shared<LoraLinear>(linear);
        lora->set_active({active_});
        lora->update_layer(adapter, s);
        auto [parent, last] = parent_of(*model_, name);
        parent->register_module(last, lora);
      });
    } else {
      raise<NotImplementedError>("LoRA: target module '{}' is a {}; LoRA wraps linear projections (nn.Linear, Conv1D)",
                                 name, m->type_name());
    }
    ++matched;
  }
  if (matched == 0) {
    std::string list = c.target_modules_regex.value_or("");
    for (const std::string& t : c.target_modules) list += (list.empty() ? "" : ", ") + t;
    raise<ValueError>("Target modules [{}] not found in the base model ({}). Please check the target modules and try again.",
                      list, model_->config().architecture);
  }
  for (auto& wrap : wraps) wrap();
  for (const std::string& keep : c.modules_to_save) {
    bool found = false;
    const auto now = model_->named_modules();  // with the LoRA layers just made
    const WrapperInteriors inside(now);
    for (auto& [name, m] : now) {
      if (name.empty() || inside(name) || !ends_with(name, keep)) continue;
      found = true;
      if (auto w = std::dynamic_pointer_cast<ModulesToSaveLinear>(m)) {
        w->add_copy(adapter);
      } else if (auto linear = std::dynamic_pointer_cast<Linear>(m)) {
        auto w2 = std::make_shared<ModulesToSaveLinear>(linear);
        w2->set_active(active_);
        w2->add_copy(adapter);
        auto [parent, last] = parent_of(*model_, name);
        parent->register_module(last, w2);
      } else {
        raise<NotImplementedError>("LoRA: modules_to_save '{}' is a {}; only linear layers (heads) are supported", name,
                                   m->type_name());
      }
    }
    if (!found) raise<ValueError>("LoRA: modules_to_save '{}' matches no module of the base model", keep);
  }
  configs_[adapter] = c;
}

void PeftModel::mark_trainable(const std::string& adapter, bool trainable) {
  const LoraConfig& c = configs_.at(adapter);
  std::set<std::string> lora_layers;
  for (auto& [name, w] : wrappers<LoraLinear>(*this))
    if (w->has_adapter(adapter)) lora_layers.insert(name);
  for (auto& [name, p] : named_parameters()) {
    bool on = contains(name, ".lora_A." + adapter + ".") || contains(name, ".lora_B." + adapter + ".") ||
              contains(name, ".modules_to_save." + adapter + ".");
    if (c.bias == "all" && ends_with(name, "bias")) on = true;
    if (c.bias == "lora_only" && ends_with(name, ".base_layer.bias") &&
        lora_layers.count(name.substr(0, name.size() - std::string(".base_layer.bias").size())))
      on = true;
    p.requires_grad_(on && trainable);
  }
}

std::shared_ptr<PeftModel> PeftModel::from_pretrained(std::shared_ptr<CausalLM> model, const std::string& dir,
                                                      const std::string& adapter_name, bool is_trainable) {
  const std::string config_path = (fs::path(dir) / kConfigFile).string();
  if (!fs::exists(config_path)) raise<IOError>("{}: no {} (not a PEFT adapter folder)", dir, kConfigFile);
  LoraConfig c = LoraConfig::from_json(io::read_file(config_path), config_path);
  c.inference_mode = !is_trainable;
  // Reads (and checks) the weights before touching the model: a bad file leaves it as it was.
  const std::string weights_path = (fs::path(dir) / kWeightsFile).string();
  if (!fs::exists(weights_path)) {
    if (fs::exists(fs::path(dir) / "adapter_model.bin"))
      raise<IOError>("{}: only adapter_model.bin (a PyTorch pickle) is there; save the adapter with safetensors "
                     "(PEFT's default, safe_serialization=True)",
                     dir);
    raise<IOError>("{}: no {}", dir, kWeightsFile);
  }
  auto peft = std::make_shared<PeftModel>(model, c, adapter_name);
  try {
    peft->load_adapter(dir, adapter_name, is_trainable);
  } catch (...) {
    peft->unload();  // the base model is returned to its own layers
    throw;
  }
  if (!is_trainable) peft->eval();
  return peft;
}

// ---- files -------------------------------------------------------------------------------------

std::map<std::string, Tensor> PeftModel::adapter_state_dict(const std::string& adapter) const {
  const LoraConfig& c = peft_config(adapter);
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : state_dict()) {
    std::string key = name;
    const bool lora = contains(key, ".lora_A." + adapter + ".") || contains(key, ".lora_B." + adapter + ".");
    const bool saved_module = contains(key, ".modules_to_save." + adapter + ".");
    bool bias = false;
    if (c.bias == "all") bias = ends_with(key, "bias") && !contains(key, ".lora_");
    if (c.bias == "lora_only") bias = ends_with(key, ".base_layer.bias");
    if (!lora && !saved_module && !bias) continue;
    replace_all(key, ".lora_A." + adapter + ".", ".lora_A.");
    replace_all(key, ".lora_B." + adapter + ".", ".lora_B.");
    replace_all(key, ".modules_to_save." + adapter + ".", ".");
    out[key] = t.detach().to(DType::Float32).contiguous();
  }
  return out;
}

void PeftModel::save_pretrained(const std::string& dir) const {
  FOUNDRY_CHECK_AS(ValueError, !unloaded_, "PeftModel: the adapters were unloaded");
  for (const auto& [name, config] : configs_) {
    const fs::path out = name == "default" ? fs::path(dir) : fs::path(dir) / name;
    fs::create_directories(out);
    io::save_safetensors((out / kWeightsFile).string(), adapter_state_dict(name), {{"format", "pt"}});
    LoraConfig written = config;
    written.inference_mode = true;  // as PEFT writes it
    io::write_file_atomic((out / kConfigFile).string(), written.to_json() + "\n");
  }
}

void PeftModel::load_adapter(const std::string& dir, const std::string& adapter, bool is_trainable) {
  const std::string config_path = (fs::path(dir) / kConfigFile).string();
  const std::string weights_path = (fs::path(dir) / kWeightsFile).string();
  if (!configs_.count(adapter)) {
    if (!fs::exists(config_path)) raise<IOError>("{}: no {} (not a PEFT adapter folder)", dir, kConfigFile);
    LoraConfig c = LoraConfig::from_json(io::read_file(config_path), config_path);
    c.inference_mode = !is_trainable;
    inject(adapter, c);
  }
  if (!fs::exists(weights_path)) raise<IOError>("{}: no {}", dir, kWeightsFile);
  const std::map<std::string, Tensor> file = io::load_safetensors(weights_path).tensors;
  const LoraConfig& c = configs_.at(adapter);
  std::map<std::string, Tensor> own;  // this adapter's tensors by their in-memory names (aliases)
  for (auto& [name, t] : state_dict()) own[name] = t;
  std::vector<std::pair<Tensor, Tensor>> copies;
  std::set<std::string> seen;
  for (const auto& [file_key, value] : file) {
    if (file_key.rfind(kPrefix, 0) != 0)
      raise<ValueError>("{}: key '{}' does not start with '{}' (not a PEFT adapter state dict)", weights_path, file_key,
                        kPrefix);
    if (contains(file_key, "lora_magnitude_vector"))
      raise<NotImplementedError>("{}: '{}' is a DoRA magnitude; DoRA adapters are not supported yet", weights_path,
                                 file_key);
    if (contains(file_key, "lora_embedding_"))
      raise<NotImplementedError>("{}: '{}' is a LoRA on an embedding layer, which is not supported", weights_path,
                                 file_key);
    std::string key = file_key;
    if (contains(key, ".lora_A.") || contains(key, ".lora_B.")) {
      replace_all(key, ".lora_A.", ".lora_A." + adapter + ".");
      replace_all(key, ".lora_B.", ".lora_B." + adapter + ".");
    } else {
      for (const std::string& m : c.modules_to_save)
        if (size_t at = key.find(m + "."); at != std::string::npos) {
          key.replace(at, m.size(), m + ".modules_to_save." + adapter);
          break;
        }
    }
    auto it = own.find(key);
    if (it == own.end())
      raise<ValueError>("{}: '{}' names no LoRA layer of this {} (an adapter for another architecture or config?)",
                        weights_path, file_key, model_->config().architecture);
    if (!(Shape(value.sizes()) == Shape(it->second.sizes())))
      raise<ValueError>("{}: '{}' has shape {} but the model's is {} (another r, or another model size)", weights_path,
                        file_key, shape_str(value.sizes()), shape_str(it->second.sizes()));
    if (!is_floating(value.dtype()))
      raise<TypeError>("{}: '{}' has dtype {}; adapter weights must be floating point", weights_path, file_key,
                       dtype_name(value.dtype()));
    copies.emplace_back(it->second, value);
    seen.insert(key);
  }
  for (const auto& [name, t] : own) {
    const bool needed = contains(name, ".lora_A." + adapter + ".") || contains(name, ".lora_B." + adapter + ".") ||
                        contains(name, ".modules_to_save." + adapter + ".");
    if (needed && !seen.count(name))
      raise<ValueError>("{}: no tensor for '{}' (the file is incomplete, or its adapter_config.json targets other "
                        "modules)",
                        weights_path, name);
  }
  autograd::NoGradGuard no_grad;
  for (auto& [dst, src] : copies) const_cast<Tensor&>(dst).copy_(src.to(dst.dtype()));
  if (adapter == active_) mark_trainable(adapter, is_trainable);
}

// ---- adapters ------------------------------------------------------------------------------------

std::vector<std::string> PeftModel::adapter_names() const {
  std::vector<std::string> out;
  for (const auto& [name, c] : configs_) out.push_back(name);
  return out;
}

const LoraConfig& PeftModel::peft_config(const std::string& adapter) const {
  auto it = configs_.find(adapter);
  if (it == configs_.end()) raise<ValueError>("PeftModel: no adapter named '{}'", adapter);
  return it->second;
}

void PeftModel::add_adapter(const std::string& adapter, const LoraConfig& config) {
  FOUNDRY_CHECK_AS(ValueError, !unloaded_, "PeftModel: the adapters were unloaded");
  inject(adapter, config);
  mark_trainable(active_, !configs_.at(active_).inference_mode);
}

void PeftModel::set_adapter(const std::string& adapter) {
  peft_config(adapter);
  unmerge_adapter();
  active_ = adapter;
  for (auto& [name, w] : wrappers<LoraLinear>(*this)) w->set_active({adapter});
  for (auto& [name, w] : wrappers<ModulesToSaveLinear>(*this)) w->set_active(adapter);
  mark_trainable(adapter, !configs_.at(adapter).inference_mode);
}

void PeftModel::delete_adapter(const std::string& adapter) {
  peft_config(adapter);
  FOUNDRY_CHECK_AS(ValueError, configs_.size() > 1 || adapter != active_,
                   "PeftModel: '{}' is the only adapter; unload() removes it", adapter);
  for (auto& [name, w] : wrappers<LoraLinear>(*this)) w->delete_adapter(adapter);
  for (auto& [name, w] : wrappers<ModulesToSaveLinear>(*this)) w->delete_copy(adapter);
  configs_.erase(adapter);
  if (active_ == adapter) set_adapter(configs_.begin()->first);
}

void PeftModel::set_adapters_enabled(bool enabled) {
  if (!enabled) unmerge_adapter();
  enabled_ = enabled;
  for (auto& [name, w] : wrappers<LoraLinear>(*this)) w->set_disabled(!enabled);
  for (auto& [name, w] : wrappers<ModulesToSaveLinear>(*this)) w->set_disabled(!enabled);
}

void PeftModel::merge_adapter() {
  for (auto& [name, w] : wrappers<LoraLinear>(*this)) w->merge({active_});
}

void PeftModel::unmerge_adapter() {
  for (auto& [name, w] : wrappers<LoraLinear>(*this)) w->unmerge();
}

void PeftModel::remove_layers(bool merge) {
  FOUNDRY_CHECK_AS(ValueError, !unloaded_, "PeftModel: the adapters were unloaded already");
  if (merge) merge_adapter();
  for (auto& [name, w] : wrappers<LoraLinear>(*model_)) {
    auto [parent, last] = parent_of(*model_, name);
    parent->register_module(last, w->base());
    w->detach_base();
  }
  for (auto& [name, w] : wrappers<ModulesToSaveLinear>(*model_)) {
    // The architecture calls the original projection: it takes the trained copy's tensors.
    if (auto copy = w->copy(active_); copy && merge) {
      w->original()->weight = copy->weight;
      if (copy->bias.defined()) w->original()->bias = copy->bias;
    }
    auto [parent, last] = parent_of(*model_, name);
    parent->register_module(last, w->original());
    w->detach_base();
  }
  unloaded_ = true;
}

std::shared_ptr<CausalLM> PeftModel::merge_and_unload() {
  remove_layers(true);
  return model_;
}

std::shared_ptr<CausalLM> PeftModel::unload() {
  remove_layers(false);
  return model_;
}

// ---- running -------------------------------------------------------------------------------------

models::CausalLMOutput PeftModel::operator()(const Tensor& input_ids, const Tensor& attention_mask,
                                             const Tensor& labels) {
  FOUNDRY_CHECK_AS(ValueError, !unloaded_, "PeftModel: the adapters were unloaded; use the returned model");
  return (*model_)(input_ids, attention_mask, labels);
}

Tensor PeftModel::forward(const Tensor& input_ids) { return model_->forward(input_ids); }

std::pair<int64_t, int64_t> PeftModel::trainable_parameters() const {
  int64_t trainable = 0, all = 0;
  for (const Tensor& p : parameters()) {
    all += p.numel();
    if (p.requires_grad()) trainable += p.numel();
  }
  return {trainable, all};
}

std::vector<std::string> PeftModel::lora_module_names() const {
  std::vector<std::string> out;
  for (auto& [name, w] : wrappers<LoraLinear>(*this))
    if (w->has_adapter(active_)) out.push_back(name);
  return out;
}

}  // namespace foundry::peft
