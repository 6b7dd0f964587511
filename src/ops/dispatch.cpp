// Running an op: argument checking, the forward, and recording its backward node.
#include <algorithm>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>

#include "foundry/autograd/grad_mode.h"
#include "foundry/autograd/node.h"
#include "foundry/ops/autocast.h"
#include "foundry/ops/ops.h"
#include "foundry/ops/registry.h"

namespace foundry::ops {

using autograd::AutogradMeta;
using autograd::Edge;
using autograd::Node;

namespace {

// ---- op profiling (FOUNDRY_PROFILE_OPS=1): inclusive time per op and per backward, at exit ----

struct OpProfile {
  std::mutex mu;
  std::map<std::string, std::pair<int64_t, double>> entries;  // name -> (calls, seconds)
  ~OpProfile() {
    std::vector<std::pair<std::string, std::pair<int64_t, double>>> v(entries.begin(), entries.end());
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
    std::fprintf(stderr, "%-44s %10s %12s %10s\n", "op (inclusive)", "calls", "total ms", "us/call");
    for (const auto& [name, e] : v)
      std::fprintf(stderr, "%-44s %10lld %12.2f %10.1f\n", name.c_str(), (long long)e.first, e.second * 1e3,
                   e.second * 1e6 / double(std::max<int64_t>(e.first, 1)));
  }
};

OpProfile* profile() {
  static OpProfile* p = std::getenv("FOUNDRY_PROFILE_OPS") ? new OpProfile : nullptr;
  static bool registered = p && (std::atexit([] { delete profile(); }) == 0);
  (void)registered;
  return p;
}

struct ProfileScope {
  OpProfile* prof;
  const std::string* name;
  const char* suffix;
  std::chrono::steady_clock::time_point t0;
  ProfileScope(const std::string& n, const char* sfx) : prof(profile()), name(&n), suffix(sfx) {
    if (prof) t0 = std::chrono::steady_clock::now();
  }
  ~ProfileScope() {
    if (!prof) return;
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard<std::mutex> lock(prof->mu);
    auto& e = prof->entries[*name + suffix];
    e.first++;
    e.second += s;
  }
};


const char* type_name(Param::Type t) {
  switch (t) {
    case Param::Type::Tensor: return "Tensor";
    case Param::Type::TensorList: return "list of Tensors";
    case Param::Type::Scalar: return "number";
    case Param::Type::Int: return "int";
    case Param::Type::Float: return "float";
    case Param::Type::Bool: return "bool";
    case Param::Type::IntList: return "list of ints";
    case Param::Type::FloatList: return "list of floats";
    case Param::Type::Str: return "str";
    case Param::Type::DType: return "dtype";
  }
  return "?";
}

// Checks one argument against its parameter and converts compatible forms (int -> float, a
// single int -> [int], number -> Scalar).
void coerce(Value& v, const Param& p, const std::string& op) {
  if (v.is_none()) {
    if (p.optional || (p.has_default && p.default_value.is_none())) return;
    if (p.type == Param::Type::Tensor)
      raise<TypeError>("{}(): argument '{}' must be a Tensor, not None", op, p.name);
    raise<TypeError>("{}(): argument '{}' must be {}, not None", op, p.name, type_name(p.type));
  }
  auto fail = [&] {
    raise<TypeError>("{}(): argument '{}' must be {}, not {}", op, p.name, type_name(p.type), v.describe());
  };
  switch (p.type) {
    case Param::Type::Tensor:
      if (!v.is_tensor()) fail();
      if (!v.tensor().defined() && !p.optional) raise<TypeError>("{}(): argument '{}' is an undefined Tensor", op, p.name);
      break;
    case Param::Type::TensorList:
      if (!v.is_tensor_list()) fail();
      break;
    case Param::Type::Scalar:
      if (v.is_tensor() && v.tensor().defined() && v.tensor().numel() == 1) v = v.tensor().item();
      else if (!(v.is_scalar() || v.is_int() || v.is_double() || v.is_bool())) fail();
      else v = v.scalar();
      break;
    case Param::Type::Int:
      if (v.is_int()) break;
      if (v.is_bool()) { v = int64_t(v.to_bool()); break; }
      if (v.is_scalar() && !v.scalar().is_float()) { v = v.scalar().to_int(); break; }
      fail();
      break;
    case Param::Type::Float:
      if (v.is_double()) break;
      if (v.is_int() || v.is_scalar() || v.is_bool()) { v = v.to_double(); break; }
      fail();
      break;
    case Param::Type::Bool:
      if (v.is_bool()) break;
      if (v.is_scalar() && v.scalar().is_bool()) { v = v.scalar().to_bool(); break; }
      fail();
      break;
    case Param::Type::IntList:
      if (v.is_int()) { v = std::vector<int64_t>{v.to_int()}; break; }
      if (!v.is_int_list()) fail();
      break;
    case Param::Type::FloatList:
      if (v.is_double() || v.is_int() || v.is_int_list()) { v = v.double_list(); break; }
      if (!std::holds_alternative<std::vector<double>>(v.variant())) fail();
      break;
    case Param::Type::Str:
      if (!v.is_string()) fail();
      break;
    case Param::Type::DType:
      if (!v.is_dtype()) fail();
      break;
  }
}

void complete_args(const OpDef& op, std::vector<Value>& values) {
  const Schema& s = op.schema;
  FOUNDRY_CHECK_AS(TypeError, values.size() <= s.params.size(), "{}() takes {} arguments but {} were given",
                   s.name, s.params.size(), values.size());
  values.reserve(s.params.size());  // one allocation for the defaults, not one per doubling
  for (size_t i = values.size(); i < s.params.size(); ++i) {
    if (!s.params[i].has_default)
      raise<TypeError>("{}() missing required argument '{}'", s.name, s.params[i].name);
    values.push_back(s.params[i].default_value);
  }
  for (size_t i = 0; i < values.size(); ++i) coerce(values[i], s.params[i], s.name);
}

// Tensor slots: one per Tensor parameter, one per element of a Tensor[] parameter.
struct Slots {
  std::vector<int> first;  // first slot of each parameter (-1 for non-tensor parameters)
  std::vector<Tensor> tensors;
  std::vector<int> param_of;
};

Slots collect_slots(const Schema& s, const std::vector<Value>& values) {
  Slots slots;
  slots.first.assign(s.params.size(), -1);
  for (size_t i = 0; i < s.params.size(); ++i) {
    if (s.params[i].type == Param::Type::Tensor) {
      slots.first[i] = int(slots.tensors.size());
      slots.tensors.push_back(values[i].is_tensor() ? values[i].tensor() : Tensor());
      slots.param_of.push_back(int(i));
    } else if (s.params[i].type == Param::Type::TensorList) {
      slots.first[i] = int(slots.tensors.size());
      for (const Tensor& t : values[i].tensor_list()) {
        slots.tensors.push_back(t);
        slots.param_of.push_back(int(i));
      }
    }
  }
  return slots;
}

bool differentiable_slot(const OpDef& op, const Tensor& t, int param) {
  if (!t.defined() || !t.requires_grad()) return false;
  const std::string& name = op.schema.params[size_t(param)].name;
  return std::find(op.nondiff_params.begin(), op.nondiff_params.end(), name) == op.nondiff_params.end();
}

Tensor alias_of(const Tensor& t) {
  return make_tensor(t.storage(), t.sizes(), t.strides(), t.storage_offset(), t.dtype());
}

class OpNode;

class OpBackwardContext : public BackwardContext {
 public:
  OpBackwardContext(OpNode& node, std::vector<Tensor>& grads) : node_(node), grads_(grads) {}
  const Value& arg(const std::string& name) const override;
  Tensor output(int k) const override;
  const Tensor& grad(int k) const override;
  size_t num_outputs() const override { return grads_.size(); }
  Shape input_sizes(const std::string& name) const override;
  size_t num_inputs_of(const std::string& name) const override;
  Shape input_sizes_of(const std::string& name, int element) const override;
  DType input_dtype(const std::string& name) const override;
  bool needs_grad(const std::string& name, int element) const override;
  Tensor take_pending_grad(const std::string& name) override;

 private:
  OpNode& node_;
  std::vector<Tensor>& grads_;
};

struct SavedSlot {
  uint32_t version = 0;
};

class OpNode : public Node {
 public:
  const OpDef* op;
  std::vector<Value> args;            // tensors kept only for saved parameters
  std::vector<bool> saved_param;      // per parameter
  std::vector<std::vector<uint32_t>> versions;  // per parameter, per tensor element
  std::vector<int> first_slot;
  std::vector<Shape> slot_sizes;
  std::vector<DType> slot_dtypes;
  std::vector<bool> slot_needs;
  std::vector<Tensor> saved_outputs;  // aliases without autograd metadata
  std::vector<uint32_t> saved_output_versions;
  bool released = false;

  std::string name() const override { return op->name() + "_backward"; }

  void release_saved() override {
    released = true;
    for (size_t i = 0; i < args.size(); ++i)
      if (saved_param[i]) args[i] = Value();
    saved_outputs.clear();
  }

  void check_released() const {
    if (released)
      raise<Error>("trying to backward through the graph a second time (or to use saved tensors of '{}' after "
                   "they were freed); pass retain_graph=true to the first backward if you need to",
                   op->name());
  }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    ProfileScope scope(op->name(), " (backward)");
    check_released();
    grads.resize(outputs.size());
    OpBackwardContext ctx(*this, grads);
    std::vector<Tensor> result = op->backward(ctx);
    result.resize(slot_sizes.size());
    for (size_t i = 0; i < result.size(); ++i) {
      if (!slot_needs[i]) {
        result[i] = Tensor();
        continue;
      }
      Tensor& g = result[i];
      if (!g.defined()) continue;
      if (!(Shape(g.sizes()) == slot_sizes[i]))
        raise<Error>("{}: backward returned a gradient of shape {} for input slot {} of shape {}", op->name(),
                     shape_str(g.sizes()), i, shape_str(slot_sizes[i]));
      if (g.dtype() != slot_dtypes[i]) g = g.to(slot_dtypes[i]);
    }
    return result;
  }
};

const Value& OpBackwardContext::arg(const std::string& name) const {
  int i = node_.op->schema.index_of(name);
  FOUNDRY_CHECK(i >= 0, "{} backward: no parameter named '{}'", node_.op->name(), name);
  const Param& p = node_.op->schema.params[size_t(i)];
  bool is_tensor = p.type == Param::Type::Tensor || p.type == Param::Type::TensorList;
  if (is_tensor && !node_.saved_param[size_t(i)])
    raise<Error>("{} backward reads '{}', which the op does not list in `saves`", node_.op->name(), name);
  const Value& v = node_.args[size_t(i)];
  if (is_tensor) {
    auto check = [&](const Tensor& t, uint32_t expected) {
      if (t.defined() && t.version() != expected)
        raise<Error>(
            "one of the tensors needed for gradient computation has been modified by an in-place operation: "
            "argument '{}' of {} ({}) is at version {}; expected version {}",
            name, node_.op->name(), Value(t).describe(), t.version(), expected);
    };
    if (v.is_tensor()) check(v.tensor(), node_.versions[size_t(i)][0]);
    if (v.is_tensor_list())
      for (size_t k = 0; k < v.tensor_list().size(); ++k) check(v.tensor_list()[k], node_.versions[size_t(i)][k]);
  }
  return v;
}

Tensor OpBackwardContext::output(int k) const {
  FOUNDRY_CHECK(std::find(node_.op->saves_outputs.begin(), node_.op->saves_outputs.end(), k) !=
                    node_.op->saves_outputs.end(),
                "{} backward reads output {}, which the op does not list in `saves_outputs`", node_.op->name(), k);
  const Tensor& saved = node_.saved_outputs.at(size_t(k));
  if (saved.version() != node_.saved_output_versions[size_t(k)])
    raise<Error>("one of the tensors needed for gradient computation has been modified by an in-place operation: "
                 "output {} of {} is at version {}; expected version {}",
                 k, node_.op->name(), saved.version(), node_.saved_output_versions[size_t(k)]);
  if (!autograd::is_grad_enabled() || !is_floating(saved.dtype())) return saved;
  // Reattach to this node so that a create_graph backward differentiates through the output.
  Tensor t = alias_of(saved);
  AutogradMeta& m = t.impl()->autograd_meta();
  m.requires_grad = true;
  m.grad_fn = const_cast<OpNode&>(node_).shared_from_this();
  m.output_nr = uint32_t(k);
  return t;
}

const Tensor& OpBackwardContext::grad(int k) const {
  Tensor& g = grads_.at(size_t(k));
  if (!g.defined()) g = zeros(node_.outputs[size_t(k)].sizes, node_.outputs[size_t(k)].dtype);
  return g;
}

Shape OpBackwardContext::input_sizes(const std::string& name) const {
  int i = node_.op->schema.index_of(name);
  FOUNDRY_CHECK(i >= 0 && node_.first_slot[size_t(i)] >= 0, "{} backward: '{}' is not a tensor parameter",
                node_.op->name(), name);
  return node_.slot_sizes[size_t(node_.first_slot[size_t(i)])];
}

size_t OpBackwardContext::num_inputs_of(const std::string& name) const {
  int i = node_.op->schema.index_of(name);
  FOUNDRY_CHECK(i >= 0 && node_.first_slot[size_t(i)] >= 0, "{} backward: '{}' is not a tensor parameter",
                node_.op->name(), name);
  size_t first = size_t(node_.first_slot[size_t(i)]);
  size_t end = node_.slot_sizes.size();
  for (size_t j = size_t(i) + 1; j < node_.first_slot.size(); ++j)
    if (node_.first_slot[j] >= 0) {
      end = size_t(node_.first_slot[j]);
      break;
    }
  return end - first;
}

Shape OpBackwardContext::input_sizes_of(const std::string& name, int element) const {
  int i = node_.op->schema.index_of(name);
  FOUNDRY_CHECK(i >= 0 && node_.first_slot[size_t(i)] >= 0, "{} backward: '{}' is not a tensor parameter",
                node_.op->name(), name);
  return node_.slot_sizes.at(size_t(node_.first_slot[size_t(i)] + element));
}

DType OpBackwardContext::input_dtype(const std::string& name) const {
  int i = node_.op->schema.index_of(name);
  FOUNDRY_CHECK(i >= 0 && node_.first_slot[size_t(i)] >= 0, "{} backward: '{}' is not a tensor parameter",
                node_.op->name(), name);
  return node_.slot_dtypes[size_t(node_.first_slot[size_t(i)])];
}

bool OpBackwardContext::needs_grad(const std::string& name, int element) const {
  int i = node_.op->schema.index_of(name);
  FOUNDRY_CHECK(i >= 0 && node_.first_slot[size_t(i)] >= 0, "{} backward: '{}' is not a tensor parameter",
                node_.op->name(), name);
  size_t slot = size_t(node_.first_slot[size_t(i)] + element);
  return slot < node_.slot_needs.size() && node_.slot_needs[slot];
}

Tensor OpBackwardContext::take_pending_grad(const std::string& name) {
  if (!needs_grad(name, 0)) return {};
  size_t slot = size_t(node_.first_slot[size_t(node_.op->schema.index_of(name))]);
  Tensor acc = autograd::take_pending_grad(node_, slot);
  FOUNDRY_CHECK(!acc.defined() || (Shape(acc.sizes()) == node_.slot_sizes[slot] && acc.dtype() == node_.slot_dtypes[slot]),
                "{} backward: the pending gradient of '{}' has shape {} and dtype {}; expected {} and {}",
                node_.op->name(), name, shape_str(acc.sizes()), dtype_name(acc.dtype()),
                shape_str(node_.slot_sizes[slot]), dtype_name(node_.slot_dtypes[slot]));
  return acc;
}

void record(const OpDef& op, const std::vector<Value>& values, const Slots& slots, std::vector<Tensor>& outs) {
  auto node = std::make_shared<OpNode>();
  node->op = &op;
  const Schema& s = op.schema;
  node->args.resize(values.size());
  node->saved_param.assign(values.size(), false);
  node->versions.resize(values.size());
  node->first_slot = slots.first;
  for (size_t i = 0; i < values.size(); ++i) {
    const Param& p = s.params[i];
    bool is_tensor = p.type == Param::Type::Tensor || p.type == Param::Type::TensorList;
    if (!is_tensor) {
      node->args[i] = values[i];
      continue;
    }
    bool saved = std::find(op.saves.begin(), op.saves.end(), p.name) != op.saves.end();
    node->saved_param[i] = saved;
    if (saved) {
      node->args[i] = values[i];
      if (values[i].is_tensor()) {
        node->versions[i].push_back(values[i].tensor().defined() ? values[i].tensor().version() : 0);
      } else if (values[i].is_tensor_list()) {
        for (const Tensor& t : values[i].tensor_list()) node->versions[i].push_back(t.defined() ? t.version() : 0);
      }
    }
  }
  for (size_t k = 0; k < slots.tensors.size(); ++k) {
    const Tensor& t = slots.tensors[k];
    node->slot_sizes.push_back(t.defined() ? Shape(t.sizes()) : Shape());
    node->slot_dtypes.push_back(t.defined() ? t.dtype() : DType::Float32);
    bool needs = differentiable_slot(op, t, slots.param_of[k]);
    node->slot_needs.push_back(needs);
    node->next_edges.push_back(needs ? autograd::gradient_edge(t) : Edge{});
  }
  for (const Tensor& o : outs) node->outputs.push_back({Shape(o.sizes()), o.dtype()});
  for (int k : op.saves_outputs) {
    FOUNDRY_CHECK(size_t(k) < outs.size(), "{}: saves_outputs names output {} of {}", op.name(), k, outs.size());
    if (node->saved_outputs.size() <= size_t(k)) {
      node->saved_outputs.resize(size_t(k) + 1);
      node->saved_output_versions.resize(size_t(k) + 1);
    }
    node->saved_outputs[size_t(k)] = alias_of(outs[size_t(k)]);
    node->saved_output_versions[size_t(k)] = outs[size_t(k)].version();
  }
  for (size_t k = 0; k < outs.size(); ++k) {
    Tensor& o = outs[k];
    if (!is_floating(o.dtype())) continue;
    // An output handle someone else also holds (an input returned as is) gets a TensorImpl of
    // its own, so recording never rewrites another tensor's history.
    if (o.impl()->use_count() > 1) o = alias_of(o);
    AutogradMeta& m = o.impl()->autograd_meta();
    m.requires_grad = true;
    m.grad_fn = node;
    m.output_nr = uint32_t(k);
    m.is_differentiable_view = op.kind == OpDef::Kind::View;
  }
}

// ---- autocast ------------------------------------------------------------------------------

enum AutocastPolicy : int8_t { kNoCast = 0, kLower = 1, kFloat32 = 2 };

int8_t autocast_policy_of(const OpDef& op) {
  if (op.autocast_policy >= 0) return op.autocast_policy;
  // PyTorch's CPU autocast lists: products in the low dtype; precision-sensitive ops in float32.
  static const std::set<std::string> lower = {"mm", "matmul", "bmm", "addmm", "baddbmm", "linear", "conv1d", "conv2d",
                                              "conv_transpose2d", "mv", "dot", "outer", "einsum", "tensordot"};
  static const std::set<std::string> fp32 = {
      "softmax", "log_softmax", "layer_norm", "rms_norm", "group_norm", "batch_norm", "cross_entropy", "nll_loss",
      "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits",
      "kl_div", "cosine_similarity", "pairwise_distance", "norm", "logsumexp", "exp", "expm1", "log", "log2",
      "log10", "log1p", "reciprocal", "rsqrt", "pow", "softplus", "cumsum", "cumprod", "prod", "acos", "asin",
      "cosh", "sinh", "tan", "erfinv", "var", "std", "var_mean", "std_mean"};
  const std::string& n = op.name();
  op.autocast_policy = lower.count(n) ? kLower : fp32.count(n) ? kFloat32 : kNoCast;
  return op.autocast_policy;
}

void apply_autocast(const OpDef& op, std::vector<Value>& values) {
  int8_t policy = autocast_policy_of(op);
  if (policy == kNoCast) return;
  DType low = autocast::lower_dtype();
  auto cast = [&](Tensor& t) {
    if (!t.defined() || !is_floating(t.dtype()) || t.impl()->wrapped_number) return;
    if (policy == kLower && t.dtype() == DType::Float32) t = t.to(low);
    else if (policy == kFloat32 && (t.dtype() == DType::BFloat16 || t.dtype() == DType::Float16)) t = t.to(DType::Float32);
  };
  for (Value& v : values) {
    if (v.is_tensor()) cast(v.tensor());
    else if (v.is_tensor_list())
      for (Tensor& t : v.tensor_list()) cast(t);
  }
}

}  // namespace

Args bind(const OpDef& op, std::vector<Value> positional, std::vector<std::pair<std::string, Value>> kwargs) {
  const Schema& s = op.schema;
  std::vector<Value> values(s.params.size());
  std::vector<bool> given(s.params.size(), false);
  size_t max_positional = 0;
  while (max_positional < s.params.size() && !s.params[max_positional].kwarg_only) ++max_positional;
  if (positional.size() > max_positional)
    raise<TypeError>("{}() takes {} positional arguments but {} were given", s.name, max_positional, positional.size());
  for (size_t i = 0; i < positional.size(); ++i) {
    values[i] = std::move(positional[i]);
    given[i] = true;
  }
  for (auto& [name, v] : kwargs) {
    int i = s.index_of(name);
    if (i < 0) raise<TypeError>("{}() got an unexpected keyword argument '{}'", s.name, name);
    if (given[size_t(i)]) raise<TypeError>("{}() got multiple values for argument '{}'", s.name, name);
    values[size_t(i)] = std::move(v);
    given[size_t(i)] = true;
  }
  for (size_t i = 0; i < s.params.size(); ++i) {
    if (given[i]) continue;
    if (!s.params[i].has_default) raise<TypeError>("{}() missing required argument '{}'", s.name, s.params[i].name);
    values[i] = s.params[i].default_value;
  }
  for (size_t i = 0; i < values.size(); ++i) coerce(values[i], s.params[i], s.name);
  return Args(&s, std::move(values));
}

namespace {

// `into`: the self of an in-place call, written directly by op.forward_into when no graph is
// recorded (in-place updates of large buffers then need no temporary of their size).
std::vector<Tensor> call_impl(const OpDef& op, std::vector<Value> values, Tensor* into) {
  ProfileScope scope(op.name(), "");
  complete_args(op, values);
  if (autocast::is_enabled()) apply_autocast(op, values);
  Args args(&op.schema, std::move(values));
  if (op.kind == OpDef::Kind::Composite) return op.forward(args);
  if (op.prepare) op.prepare(args);
  bool grad_mode = autograd::is_grad_enabled();
  Slots slots;
  bool needs_record = false;
  if (grad_mode && op.differentiable) {
    slots = collect_slots(op.schema, args.values());
    for (size_t k = 0; k < slots.tensors.size(); ++k)
      if (differentiable_slot(op, slots.tensors[k], slots.param_of[k])) needs_record = true;
  }
  std::vector<Tensor> outs;
  {
    autograd::NoGradGuard no_grad;
    if (into && !needs_record && op.forward_into && op.forward_into(args, *into)) {
      into->storage()->bump_version();
      return {*into};
    }
    outs = op.forward(args);
  }
  if (needs_record) record(op, args.values(), slots, outs);
  return outs;
}

}  // namespace

std::vector<Tensor> call(const OpDef& op, std::vector<Value> values) { return call_impl(op, std::move(values), nullptr); }

Tensor call1(const OpDef& op, std::vector<Value> args) {
  std::vector<Tensor> outs = call(op, std::move(args));
  FOUNDRY_CHECK(outs.size() == 1, "{} returned {} outputs where one was expected", op.name(), outs.size());
  return std::move(outs[0]);
}

Tensor& call_inplace(const OpDef& op, Tensor& self, std::vector<Value> args) {
  FOUNDRY_CHECK(self.defined(), "{}_: self is undefined", op.name());
  if (self.storage()->read_only())
    raise<Error>("{}_: the tensor is backed by read-only memory (a memory-mapped file); clone() it first", op.name());
  bool grad_mode = autograd::is_grad_enabled();
  if (grad_mode && self.requires_grad() && self.is_leaf())
    raise<Error>("{}_: a leaf tensor that requires grad is being used in an in-place operation", op.name());
  std::vector<Tensor> outs = call_impl(op, std::move(args), &self);
  FOUNDRY_CHECK(outs.size() == 1, "{}_ returned {} outputs where one was expected", op.name(), outs.size());
  Tensor result = std::move(outs[0]);
  if (result.impl() == self.impl()) return self;  // written in place by forward_into
  FOUNDRY_CHECK(Shape(result.sizes()) == Shape(self.sizes()),
                "{}_: output with shape {} doesn't match the broadcast shape {}", op.name(),
                shape_str(self.sizes()), shape_str(result.sizes()));
  if (result.dtype() != self.dtype() && !can_cast(result.dtype(), self.dtype()))
    raise<TypeError>("{}_: result type {} can't be cast to the desired output type {}", op.name(),
                     dtype_name(result.dtype()), dtype_name(self.dtype()));
  bool recorded = result.requires_grad() && result.grad_fn();
  if (recorded && self.impl()->autograd && self.impl()->autograd->is_differentiable_view)
    raise<NotImplementedError>(
        "{}_: in-place operation on a view of a tensor that requires grad is not supported; use the out-of-place "
        "op or clone() the view",
        op.name());
  {
    autograd::NoGradGuard no_grad;
    copy_into(self, result);
  }
  if (recorded) {
    AutogradMeta& m = self.impl()->autograd_meta();
    m.grad_fn = result.grad_fn();
    m.output_nr = result.output_nr();
    m.requires_grad = true;
    if (result.dtype() != self.dtype()) m.grad_fn->outputs[m.output_nr].dtype = self.dtype();
  }
  return self;
}

}  // namespace foundry::ops
