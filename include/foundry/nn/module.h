// nn::Module: the base of every layer. A module owns parameters (leaf tensors that require grad),
// buffers (state that is not trained, e.g. BatchNorm's running statistics) and child modules, all
// kept in registration order. Dotted names ("encoder.0.linear1.weight") equal PyTorch's
// state_dict keys, so checkpoints are interchangeable with PyTorch/HF.
//
// Parameters live in slots owned by the module; register_parameter() returns a reference to the
// slot, which stays valid for the module's life. Layers keep such references as members
// (`Tensor& weight`), so assigning to the member rebinds the slot (weight tying: `head->weight =
// wte->weight` makes both keys of state_dict name one tensor, and named_parameters() lists it once).
// load_state_dict() copies into the existing tensors and to(dtype) converts them in place (the
// tensor handles an optimizer holds stay valid), as PyTorch does with `param.data = ...`.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "foundry/core/tensor.h"
#include "foundry/text/py_float.h"

namespace foundry::nn {

/// Keys that did not line up in load_state_dict(strict = false).
struct IncompatibleKeys {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module();

  /// The class name PyTorch prints ("Linear").
  virtual std::string type_name() const = 0;
  /// The text inside the parentheses of the printed module ("in_features=4, out_features=3, bias=True").
  virtual std::string extra_repr() const { return ""; }
  /// Single-input layers override this; the default throws NotImplementedError.
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  // ---- registration ----
  /// Adds (or replaces, keeping its position) a parameter. An undefined tensor registers None
  /// (e.g. bias=false): it is skipped by named_parameters and state_dict. A tensor that is not
  /// already a leaf requiring grad is detached into a new leaf sharing its storage (nn.Parameter);
  /// a leaf that requires grad (another module's parameter) is registered as is, so it is shared.
  Tensor& register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  /// Adds (or replaces) a buffer; non-persistent buffers are left out of state_dict.
  Tensor& register_buffer(const std::string& name, Tensor t, bool persistent = true);
  /// Adds (or replaces, keeping its position) a child module; null registers None.
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    register_module_impl(name, std::static_pointer_cast<Module>(m));
    return m;
  }

  // ---- lookup ----
  /// The slot of an own parameter, buffer or child by (undotted) name; throws IndexError if absent.
  Tensor& parameter(const std::string& name);
  Tensor& buffer(const std::string& name);
  std::shared_ptr<Module> child(const std::string& name) const;
  /// A descendant by dotted path ("layers.0.attn"); "" is this module.
  std::shared_ptr<Module> get_submodule(const std::string& target);
  bool has_parameter(const std::string& name) const;
  bool has_buffer(const std::string& name) const;

  // ---- traversal (registration order, PyTorch's orders) ----
  /// Parameters with dotted names; each tensor once (the first name wins for shared ones).
  NamedTensors named_parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  /// Pre-order: this module first (named ""), each module once.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules() const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  std::vector<std::shared_ptr<Module>> modules() const;

  // ---- state ----
  /// Parameters and persistent buffers, per module (own parameters, own buffers, then children),
  /// as PyTorch orders them; shared (tied) tensors appear under every name. The values are
  /// detached aliases of the module's tensors (PyTorch's keep_vars=False): they share storage
  /// (tied entries share one), so copy them before modifying.
  NamedTensors state_dict() const;
  /// Copies `state` into the parameters and buffers under no_grad (converting dtypes). Shape
  /// mismatches always raise; missing and unexpected keys raise when strict. The error lists
  /// every problem, PyTorch's way; nothing is copied when it raises.
  IncompatibleKeys load_state_dict(const NamedTensors& state, bool strict = true);

  /// Training mode for this module and all descendants (Dropout, BatchNorm behave differently).
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  /// Converts floating parameters and buffers (and gradients) to `dtype` in place.
  void to(DType dtype);
  /// Drops the gradients (set_to_none) or zeroes them.
  void zero_grad(bool set_to_none = true);
  /// Calls fn on every descendant (children first, then this module), as PyTorch's apply.
  void apply(const std::function<void(Module&)>& fn);
  /// Number of parameter elements (each shared tensor counted once).
  int64_t num_parameters(bool trainable_only = false) const;
  /// The module tree, printed as PyTorch prints it.
  std::string str() const;

 protected:
  bool training_ = true;

 private:
  struct Slot {
    std::string name;
    Tensor tensor;
    bool persistent = true;
  };
  void register_module_impl(const std::string& name, std::shared_ptr<Module> m);
  void check_new_name(const std::string& name, const char* kind) const;
  void collect_modules(const std::string& prefix, std::vector<std::pair<std::string, Module*>>& out) const;
  void collect_state(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out) const;
  std::shared_ptr<Module> self_ptr() const;

  // Deques keep references to slots valid as more are added.
  std::deque<Slot> params_;
  std::deque<Slot> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

/// Python's repr of a float ("1.0", "0.1", "1e-05"), used by extra_repr().
using text::py_float;
/// Python's repr of an int tuple ("(3,)", "(3, 3)").
std::string py_tuple(const std::vector<int64_t>& v);
/// "True" / "False".
inline const char* py_bool(bool b) { return b ? "True" : "False"; }

}  // namespace foundry::nn
