// nn::Module: registration, traversal, state_dict/load_state_dict, modes, dtype conversion and
// printing, following torch/nn/modules/module.py (1.13).
#include "foundry/nn/module.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <unordered_set>

#include <fmt/format.h>

#include "foundry/autograd/grad_mode.h"
#include "foundry/ops/ops.h"

namespace foundry::nn {

Module::~Module() = default;

Tensor Module::forward(const Tensor&) {
  raise<NotImplementedError>("Module [{}] is missing the required \"forward\" function (or takes other inputs)",
                             type_name());
}

// ---- registration ------------------------------------------------------------------------------

void Module::check_new_name(const std::string& name, const char* kind) const {
  FOUNDRY_CHECK_AS(ValueError, !name.empty(), "{}: {} name can't be empty", type_name(), kind);
  FOUNDRY_CHECK_AS(ValueError, name.find('.') == std::string::npos, "{}: {} name can't contain \".\", got \"{}\"",
                   type_name(), kind, name);
  const std::string k = kind;
  auto in = [&](const std::deque<Slot>& d) {
    return std::any_of(d.begin(), d.end(), [&](const Slot& s) { return s.name == name; });
  };
  bool in_children = std::any_of(children_.begin(), children_.end(), [&](const auto& c) { return c.first == name; });
  if ((k != "parameter" && in(params_)) || (k != "buffer" && in(buffers_)) || (k != "module" && in_children))
    raise<ValueError>("{}: attribute \"{}\" already exists as another kind than {}", type_name(), name, kind);
}

Tensor& Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_new_name(name, "parameter");
  if (t.defined()) {
    if (!(t.is_leaf() && t.requires_grad())) {
      t = t.detach();
      if (requires_grad) {
        FOUNDRY_CHECK_AS(TypeError, t.is_floating_point(),
                         "{}: parameter \"{}\" must be floating point to require grad, got {}", type_name(), name,
                         dtype_name(t.dtype()));
        t.requires_grad_(true);
      }
    }
  }
  for (Slot& s : params_)
    if (s.name == name) {
      s.tensor = std::move(t);
      return s.tensor;
    }
  params_.push_back({name, std::move(t), true});
  return params_.back().tensor;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t, bool persistent) {
  check_new_name(name, "buffer");
  for (Slot& s : buffers_)
    if (s.name == name) {
      s.tensor = std::move(t);
      s.persistent = persistent;
      return s.tensor;
    }
  buffers_.push_back({name, std::move(t), persistent});
  return buffers_.back().tensor;
}

void Module::register_module_impl(const std::string& name, std::shared_ptr<Module> m) {
  check_new_name(name, "module");
  FOUNDRY_CHECK_AS(ValueError, m.get() != this, "{}: a module can't be its own child", type_name());
  for (auto& c : children_)
    if (c.first == name) {
      c.second = std::move(m);
      return;
    }
  children_.emplace_back(name, std::move(m));
}

// ---- lookup ------------------------------------------------------------------------------------

Tensor& Module::parameter(const std::string& name) {
  for (Slot& s : params_)
    if (s.name == name) return s.tensor;
  raise<IndexError>("{} has no parameter \"{}\"", type_name(), name);
}

Tensor& Module::buffer(const std::string& name) {
  for (Slot& s : buffers_)
    if (s.name == name) return s.tensor;
  raise<IndexError>("{} has no buffer \"{}\"", type_name(), name);
}

bool Module::has_parameter(const std::string& name) const {
  return std::any_of(params_.begin(), params_.end(), [&](const Slot& s) { return s.name == name; });
}

bool Module::has_buffer(const std::string& name) const {
  return std::any_of(buffers_.begin(), buffers_.end(), [&](const Slot& s) { return s.name == name; });
}

std::shared_ptr<Module> Module::child(const std::string& name) const {
  for (const auto& c : children_)
    if (c.first == name) return c.second;
  raise<IndexError>("{} has no child module \"{}\"", type_name(), name);
}

std::shared_ptr<Module> Module::get_submodule(const std::string& target) {
  std::shared_ptr<Module> m = self_ptr();
  size_t start = 0;
  while (start < target.size()) {
    size_t dot = target.find('.', start);
    std::string part = target.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    m = m->child(part);
    FOUNDRY_CHECK_AS(IndexError, m != nullptr, "get_submodule: \"{}\" is None in \"{}\"", part, target);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return m;
}

std::shared_ptr<Module> Module::self_ptr() const {
  std::shared_ptr<const Module> owned = weak_from_this().lock();
  if (owned) return std::const_pointer_cast<Module>(owned);
  // Not owned by a shared_ptr (e.g. on the stack): a non-owning pointer.
  return std::shared_ptr<Module>(std::shared_ptr<Module>(), const_cast<Module*>(this));
}

// ---- traversal ---------------------------------------------------------------------------------

static std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

void Module::collect_modules(const std::string& prefix, std::vector<std::pair<std::string, Module*>>& out) const {
  // Pre-order, each module once (PyTorch's named_modules with remove_duplicate=True).
  for (const auto& [p, m] : out)
    if (m == this) return;
  out.emplace_back(prefix, const_cast<Module*>(this));
  for (const auto& [name, c] : children_)
    if (c) c->collect_modules(join(prefix, name), out);
}

namespace {
// Each defined tensor of the modules' slots (slots_of(module)) once, under its first name.
template <class SlotsOf>
NamedTensors each_tensor_once(const std::vector<std::pair<std::string, Module*>>& mods, SlotsOf slots_of) {
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  for (const auto& [prefix, m] : mods)
    for (const auto& s : slots_of(*m))
      if (s.tensor.defined() && seen.insert(s.tensor.impl()).second) out.emplace_back(join(prefix, s.name), s.tensor);
  return out;
}
}  // namespace

NamedTensors Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Module*>> mods;
  if (recurse) collect_modules("", mods);
  else mods.emplace_back("", const_cast<Module*>(this));
  return each_tensor_once(mods, [](const Module& m) -> const auto& { return m.params_; });
}

NamedTensors Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Module*>> mods;
  if (recurse) collect_modules("", mods);
  else mods.emplace_back("", const_cast<Module*>(this));
  return each_tensor_once(mods, [](const Module& m) -> const auto& { return m.buffers_; });
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  std::set<const Module*> seen;
  for (const auto& [name, c] : children_)
    if (c && seen.insert(c.get()).second) out.emplace_back(name, c);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() const {
  std::vector<std::pair<std::string, Module*>> mods;
  collect_modules("", mods);
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  for (const auto& [name, m] : mods) out.emplace_back(name, m->self_ptr());
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [n, m] : named_children()) out.push_back(m);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules() const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [n, m] : named_modules()) out.push_back(m);
  return out;
}

// ---- state -------------------------------------------------------------------------------------

void Module::collect_state(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out) const {
  // PyTorch's state_dict recursion: own parameters, own persistent buffers, then every child
  // (shared children and tensors appear under each of their names).
  for (const Slot& s : params_)
    if (s.tensor.defined()) out.emplace_back(prefix + s.name, const_cast<Tensor*>(&s.tensor));
  for (const Slot& s : buffers_)
    if (s.tensor.defined() && s.persistent) out.emplace_back(prefix + s.name, const_cast<Tensor*>(&s.tensor));
  for (const auto& [name, c] : children_)
    if (c) c->collect_state(prefix + name + ".", out);
}

NamedTensors Module::state_dict() const {
  std::vector<std::pair<std::string, Tensor*>> slots;
  collect_state("", slots);
  NamedTensors out;
  out.reserve(slots.size());
  for (auto& [k, t] : slots) out.emplace_back(k, t->detach());
  return out;
}

IncompatibleKeys Module::load_state_dict(const NamedTensors& state, bool strict) {
  std::vector<std::pair<std::string, Tensor*>> slots;
  collect_state("", slots);
  std::map<std::string, const Tensor*> given;
  for (const auto& [k, t] : state) given[k] = &t;

  IncompatibleKeys keys;
  std::vector<std::string> mismatches;
  std::set<std::string> expected;
  std::vector<std::pair<Tensor*, const Tensor*>> copies;
  for (auto& [k, t] : slots) {
    expected.insert(k);
    auto it = given.find(k);
    if (it == given.end()) {
      keys.missing_keys.push_back(k);
      continue;
    }
    const Tensor& src = *it->second;
    if (!src.defined() || !(src.sizes() == t->sizes())) {
      mismatches.push_back(fmt::format(
          "size mismatch for {}: copying a param with shape {} from checkpoint, the shape in current model is {}.", k,
          src.defined() ? shape_str(src.sizes()) : std::string("None"), shape_str(t->sizes())));
      continue;
    }
    copies.emplace_back(t, &src);
  }
  for (const auto& [k, t] : state)
    if (!expected.count(k)) keys.unexpected_keys.push_back(k);

  std::vector<std::string> errors;
  auto quoted = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", \"" : "\"") + v[i] + "\"";
    return s;
  };
  if (strict && !keys.missing_keys.empty()) errors.push_back("Missing key(s) in state_dict: " + quoted(keys.missing_keys) + ". ");
  if (strict && !keys.unexpected_keys.empty())
    errors.push_back("Unexpected key(s) in state_dict: " + quoted(keys.unexpected_keys) + ". ");
  errors.insert(errors.end(), mismatches.begin(), mismatches.end());
  if (!errors.empty()) {
    std::string msg = "Error(s) in loading state_dict for " + type_name() + ":";
    for (const auto& e : errors) msg += "\n\t" + e;
    throw Error(msg);
  }
  autograd::NoGradGuard no_grad;
  for (auto& [dst, src] : copies)
    if (dst->data_ptr() != src->data_ptr()) dst->copy_(*src);
  return keys;
}

// ---- modes and conversions ---------------------------------------------------------------------

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_)
    if (c) c->train(on);
}

namespace {
// Makes `dst`'s impl hold `src`'s data (PyTorch's `param.data = src`): every handle to the
// parameter sees the new dtype/storage, autograd metadata (requires_grad, hooks) stays.
void set_data(const Tensor& dst, const Tensor& src) {
  TensorImpl* d = dst.impl();
  TensorImpl* s = src.impl();
  d->storage = s->storage;
  d->sizes = s->sizes;
  d->strides = s->strides;
  d->offset = s->offset;
  d->dtype = s->dtype;
  d->numel = s->numel;
}
}  // namespace

void Module::to(DType dtype) {
  FOUNDRY_CHECK_AS(TypeError, is_floating(dtype), "{}.to: only floating dtypes are allowed, got {}", type_name(),
                   dtype_name(dtype));
  autograd::NoGradGuard no_grad;
  std::unordered_set<const TensorImpl*> done;
  std::vector<std::pair<std::string, Module*>> mods;
  collect_modules("", mods);
  for (auto& [prefix, m] : mods) {
    for (std::deque<Slot>* slots : {&m->params_, &m->buffers_})
      for (Slot& s : *slots) {
        const Tensor& t = s.tensor;
        if (!t.defined() || !t.is_floating_point() || t.dtype() == dtype || !done.insert(t.impl()).second) continue;
        set_data(t, t.to(dtype).contiguous());
        Tensor g = t.grad();
        if (g.defined() && g.dtype() != dtype) t.set_grad(g.to(dtype));
      }
  }
}

void Module::zero_grad(bool set_to_none) {
  for (Tensor& p : parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      autograd::NoGradGuard no_grad;
      Tensor z = g.detach();
      z.zero_();
      p.set_grad(z);
    }
  }
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [n, c] : children_)
    if (c) c->apply(fn);
  fn(*this);
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (const Tensor& p : parameters())
    if (!trainable_only || p.requires_grad()) n += p.numel();
  return n;
}

// ---- printing ----------------------------------------------------------------------------------

namespace {
// torch.nn.modules.module._addindent: indents every line but the first.
std::string add_indent(const std::string& s, int spaces) {
  std::string out;
  std::string pad(size_t(spaces), ' ');
  for (char c : s) {
    out += c;
    if (c == '\n') out += pad;
  }
  return out;
}
}  // namespace

std::string Module::str() const {
  std::vector<std::string> extra_lines;
  std::string extra = extra_repr();
  if (!extra.empty()) {
    size_t start = 0;
    while (true) {
      size_t nl = extra.find('\n', start);
      extra_lines.push_back(extra.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
      if (nl == std::string::npos) break;
      start = nl + 1;
    }
  }
  std::vector<std::string> child_lines;
  for (const auto& [name, c] : children_)
    child_lines.push_back("(" + name + "): " + add_indent(c ? c->str() : std::string("None"), 2));
  std::string s = type_name() + "(";
  if (!extra_lines.empty() || !child_lines.empty()) {
    if (extra_lines.size() == 1 && child_lines.empty()) {
      s += extra_lines[0];
    } else {
      std::vector<std::string> lines = extra_lines;
      lines.insert(lines.end(), child_lines.begin(), child_lines.end());
      s += "\n";
      for (const auto& l : lines) s += "  " + l + "\n";
    }
  }
  return s + ")";
}

std::string py_tuple(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() == 1) s += ",";
  return s + ")";
}

}  // namespace foundry::nn
