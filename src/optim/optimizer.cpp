// Optimizer base: parameter groups, per-parameter state in flat buffers, zero_grad, and the
// torch-like state_dict()/load_state_dict().
#include "foundry/optim/optimizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "foundry/autograd/grad_mode.h"
#include "foundry/ops/ops.h"
#include "optim/common.h"

namespace foundry::optim {

using nlohmann::json;

Optimizer::Optimizer(std::string name, std::vector<ParamGroup> groups, std::map<std::string, double> defaults)
    : name_(std::move(name)), defaults_(std::move(defaults)) {
  size_t n = 0;
  for (const auto& g : groups) n += g.params.size();
  if (n == 0) raise<ValueError>("{}: optimizer got an empty parameter list", name_);
  for (auto& g : groups) add_param_group(std::move(g));
}

Optimizer::~Optimizer() = default;

void Optimizer::add_param_group(ParamGroup group) {
  std::unordered_set<const TensorImpl*> seen;
  for (const auto& g : groups_)
    for (const auto& p : g.params) seen.insert(p.impl());
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& p = group.params[i];
    if (!p.defined()) raise<ValueError>("{}: parameter {} of the new group is undefined", name_, i);
    if (!p.is_floating_point())
      raise<ValueError>("{}: can only optimize floating-point tensors, but parameter {} is {}", name_, i,
                        dtype_name(p.dtype()));
    if (!p.is_leaf()) raise<ValueError>("{}: can't optimize a non-leaf Tensor (parameter {})", name_, i);
    if (!seen.insert(p.impl()).second)
      raise<ValueError>("{}: some parameters appear in more than one parameter group", name_);
  }
  for (const auto& [key, value] : defaults_) group.options.emplace(key, value);
  for (const auto& [key, value] : group.options)
    if (!defaults_.count(key) && key != "initial_lr")
      raise<ValueError>("{}: unknown option '{}' in a parameter group", name_, key);
  groups_.push_back(std::move(group));
}

double Optimizer::option(const std::string& key, size_t group) const {
  if (group >= groups_.size())
    raise<IndexError>("{}: parameter group {} out of range ({} groups)", name_, group, groups_.size());
  auto it = groups_[group].options.find(key);
  if (it == groups_[group].options.end())
    raise<ValueError>("{}: parameter group {} has no option '{}'", name_, group, key);
  return it->second;
}

void Optimizer::set_lr(double lr, size_t group) {
  if (group >= groups_.size())
    raise<IndexError>("{}: parameter group {} out of range ({} groups)", name_, group, groups_.size());
  groups_[group].options["lr"] = lr;
}

void Optimizer::zero_grad(bool set_to_none) {
  autograd::NoGradGuard no_grad;
  for (auto& g : groups_)
    for (auto& p : g.params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        p.set_grad(Tensor());
      } else {
        if (grad.grad_fn()) {
          grad = grad.detach();
          p.set_grad(grad);
        }
        grad.zero_();
      }
    }
}

const ParamState* Optimizer::state(const Tensor& param) const {
  auto it = state_.find(param.impl());
  return it == state_.end() ? nullptr : &it->second;
}

ParamState& Optimizer::state_for(const Tensor& param) { return state_[param.impl()]; }

bool Optimizer::has_state(const Tensor& param) const { return state_.count(param.impl()) != 0; }

size_t Optimizer::num_params() const {
  size_t n = 0;
  for (const auto& g : groups_) n += g.params.size();
  return n;
}

void Optimizer::init_state(const std::vector<Tensor>& params, const std::vector<std::string>& names, bool with_step,
                           double fill) {
  std::vector<Tensor> fresh;
  for (const Tensor& p : params)
    if (!has_state(p)) fresh.push_back(p);
  if (fresh.empty()) return;
  for (const std::string& name : names) {
    std::vector<Tensor> views = detail::flat_zeros_like(fresh, fill);
    for (size_t i = 0; i < fresh.size(); ++i) state_for(fresh[i]).tensors[name] = views[i];
  }
  for (const Tensor& p : fresh) {
    ParamState& s = state_for(p);  // creates it even when `names` is empty
    if (with_step) s.scalars["step"] = 0;
  }
}

OptimizerState Optimizer::state_dict() const {
  OptimizerState out;
  json j;
  j["optimizer"] = name_;
  j["state"] = json::object();
  j["param_groups"] = json::array();
  int64_t index = 0;
  for (const auto& g : groups_) {
    json group = json::object();
    for (const auto& [key, value] : g.options) group[key] = value;
    json ids = json::array();
    for (const auto& p : g.params) {
      ids.push_back(index);
      if (const ParamState* s = state(p)) {
        json entry = json::object();
        for (const auto& [key, value] : s->scalars) entry[key] = value;
        j["state"][std::to_string(index)] = entry;
        for (const auto& [key, t] : s->tensors) out.tensors[fmt::format("state.{}.{}", index, key)] = t;
      }
      ++index;
    }
    group["params"] = ids;
    j["param_groups"].push_back(group);
  }
  out.json = j.dump();
  return out;
}

void Optimizer::load_state_dict(const OptimizerState& saved) {
  json j;
  try {
    j = json::parse(saved.json);
  } catch (const std::exception& e) {
    raise<ValueError>("{}: load_state_dict: malformed JSON: {}", name_, e.what());
  }
  if (!j.is_object() || !j.contains("param_groups") || !j["param_groups"].is_array())
    raise<ValueError>("{}: load_state_dict: the state has no param_groups", name_);
  if (j.value("optimizer", name_) != name_)
    raise<ValueError>("{}: load_state_dict: the state was saved by {}", name_, j.value("optimizer", std::string()));
  const json& groups = j["param_groups"];
  if (groups.size() != groups_.size())
    raise<ValueError>("{}: loaded state dict has {} parameter groups, the optimizer has {}", name_, groups.size(),
                      groups_.size());
  // Saved index -> parameter, checking the group layout first (nothing changes on error).
  std::map<int64_t, Tensor> by_index;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const json& ids = groups[gi].value("params", json::array());
    if (ids.size() != groups_[gi].params.size())
      raise<ValueError>("{}: loaded state dict contains a parameter group {} of {} parameters, the optimizer's has {}",
                        name_, gi, ids.size(), groups_[gi].params.size());
    for (size_t k = 0; k < ids.size(); ++k) by_index[ids[k].get<int64_t>()] = groups_[gi].params[k];
  }
  std::map<const TensorImpl*, std::map<std::string, Tensor>> tensors;
  for (const auto& [key, t] : saved.tensors) {
    // "state.<index>.<name>"
    size_t a = key.find('.'), b = a == std::string::npos ? a : key.find('.', a + 1);
    if (key.compare(0, 6, "state.") != 0 || b == std::string::npos)
      raise<ValueError>("{}: load_state_dict: unexpected tensor '{}'", name_, key);
    int64_t index = std::stoll(key.substr(a + 1, b - a - 1));
    auto it = by_index.find(index);
    if (it == by_index.end()) raise<ValueError>("{}: load_state_dict: tensor '{}' names no parameter", name_, key);
    if (Shape(t.sizes()) != Shape(it->second.sizes()))
      raise<ValueError>("{}: load_state_dict: '{}' has shape {} but the parameter has shape {}", name_, key,
                        shape_str(t.sizes()), shape_str(it->second.sizes()));
    tensors[it->second.impl()][key.substr(b + 1)] = t;
  }
  // Commit: options, then state in fresh flat buffers (one per state name).
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    std::map<std::string, double> options;
    for (const auto& [key, value] : groups[gi].items())
      if (key != "params" && value.is_number()) options[key] = value.get<double>();
    groups_[gi].options = std::move(options);
  }
  state_.clear();
  const json& st = j.value("state", json::object());
  std::map<std::string, std::vector<Tensor>> by_name;  // state name -> parameters that have it
  for (const auto& [index, p] : by_index) {
    auto sit = st.find(std::to_string(index));
    auto tit = tensors.find(p.impl());
    if (sit == st.end() && tit == tensors.end()) continue;
    ParamState& s = state_for(p);
    if (sit != st.end())
      for (const auto& [key, value] : sit->items())
        if (value.is_number()) s.scalars[key] = value.get<double>();
    if (tit != tensors.end())
      for (const auto& [name, t] : tit->second) by_name[name].push_back(p);
  }
  autograd::NoGradGuard no_grad;
  for (const auto& [name, params] : by_name) {
    std::vector<Tensor> views = detail::flat_zeros_like(params, 0.0);
    for (size_t i = 0; i < params.size(); ++i) {
      views[i].copy_(tensors[params[i].impl()][name]);
      state_for(params[i]).tensors[name] = views[i];
    }
  }
}

}  // namespace foundry::optim
