// The op registry. Each op is ONE OpDef: its schema (names, types and defaults of the arguments,
// as in PyTorch's native_functions.yaml), a forward (shape/dtype rule + kernel), and either a
// backward written with Foundry ops (so gradients of gradients work) or an explicit
// not-differentiable mark; plus a sample generator that the test suite, the parity fixtures and
// the docs all derive from. Nothing about an op is written down anywhere else.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "foundry/core/rng.h"
#include "foundry/ops/value.h"

namespace foundry::ops {

/// One parameter of a schema: `Tensor input`, `int dim=-1`, `ScalarType? dtype=None`, ...
struct Param {
  enum class Type { Tensor, TensorList, Scalar, Int, Float, Bool, IntList, FloatList, Str, DType };
  std::string name;
  Type type;
  bool optional = false;      ///< `T?`: None is allowed
  bool kwarg_only = false;    ///< after `*` in the schema
  bool has_default = false;
  Value default_value;
  std::string type_str;       ///< as written in the schema
};

struct Schema {
  std::string name;
  std::vector<Param> params;
  std::vector<std::string> returns;  ///< return names ("" when unnamed); "[]" marks a Tensor[]
  bool returns_list = false;         ///< returns Tensor[]
  std::string text;                  ///< the schema as written

  /// Parses "name(Tensor input, int dim=-1, *, bool keepdim=False) -> Tensor".
  static Schema parse(const std::string& text);
  int index_of(const std::string& param) const;  ///< -1 if absent
};

/// Arguments bound to a schema, in schema order (defaults filled in).
class Args {
 public:
  Args() = default;
  Args(const Schema* schema, std::vector<Value> values) : schema_(schema), values_(std::move(values)) {}

  size_t size() const { return values_.size(); }
  const Value& operator[](size_t i) const { return values_[i]; }
  Value& operator[](size_t i) { return values_[i]; }
  const Value& get(const std::string& name) const;
  Value& get(const std::string& name);
  const Tensor& tensor(size_t i) const { return values_[i].tensor(); }
  const std::vector<Value>& values() const { return values_; }
  std::vector<Value>& values() { return values_; }
  const Schema& schema() const { return *schema_; }

 private:
  const Schema* schema_ = nullptr;
  std::vector<Value> values_;
};

class BackwardContext;

/// A test sample: arguments (in schema order) plus what the harness needs to know about them.
struct Sample {
  std::vector<Value> args;
  std::string note;            ///< e.g. "broadcast", "0-d", "empty", "negative stride"
  bool gradcheck = true;       ///< false where finite differences are ill-conditioned
  double rtol = -1, atol = -1; ///< per-sample tolerance overrides (-1: the dtype default)
};

/// Generates samples for one dtype. Tensors should be small (tens of elements).
using SampleFn = std::function<std::vector<Sample>(DType dtype, Generator& gen)>;

struct OpDef {
  enum class Kind {
    Primitive,  ///< forward runs a kernel; the op records its own backward node
    View,       ///< forward returns views sharing storage; records a node like a primitive
    Composite,  ///< forward is written in other Foundry ops; gradients flow through those
  };

  std::string schema_text;
  std::string family;  ///< "unary", "binary", "reduction", "shape", "indexing", "linalg", "nn", "loss", ...
  std::string doc;     ///< one line
  Kind kind = Kind::Primitive;

  /// False marks an op with no gradient (integer/bool results, random draws, ...).
  bool differentiable = true;
  /// Parameters whose values the backward reads (by name); everything else is kept as metadata
  /// only, so an in-place change to an unsaved input does not invalidate the graph.
  std::vector<std::string> saves;
  /// Outputs whose values the backward reads (by index).
  std::vector<int> saves_outputs;
  /// Floating-point tensor parameters that get no gradient (e.g. a running-statistics buffer).
  std::vector<std::string> nondiff_params;

  /// Runs with autograd recording before the kernel: type promotion, broadcasting and other
  /// normalisation done as differentiable ops of their own (their gradients live once, there).
  std::function<void(Args&)> prepare;
  /// Computes the outputs (shape/dtype rule and kernel). Primitive/View: runs under no_grad.
  std::function<std::vector<Tensor>(const Args&)> forward;
  /// Optional: computes the single output straight into `out` (the `self` of an in-place call)
  /// when nothing is recorded; returns false where it can't (dtype or shape differ, `out`
  /// overlaps another input, layout unsupported) and the call computes out of place and copies.
  std::function<bool(const Args&, Tensor& out)> forward_into;
  /// Gradients of the differentiable tensor inputs (flattened: Tensor[] arguments contribute one
  /// slot per element) given the output gradients, written with Foundry ops. Return an undefined
  /// Tensor for inputs that need none.
  std::function<std::vector<Tensor>(BackwardContext&)> backward;
  /// dtypes the op accepts for its main input (docs and test sweeps).
  std::vector<DType> dtypes;
  SampleFn samples;
  /// The reference to compare against: "torch.add", "torch.nn.functional.gelu", ... (the fixture
  /// generator resolves it; empty means torch.<name>).
  std::string ref;
  /// Extra documentation of semantics that differ from the reference, if any.
  std::string notes;
  /// Set for ops whose outputs are random; parity compares statistics, not values.
  bool random = false;
  /// Whether gradgradcheck is claimed (and tested) for this op.
  bool second_order = true;
  /// The result depends on the input's memory layout (as_strided): tests skip layout variants.
  bool layout_sensitive = false;

  // Filled in at registration.
  Schema schema;
  /// Autocast policy, resolved from the op's name on first use (see ops/autocast.h).
  mutable int8_t autocast_policy = -1;
  const std::string& name() const { return schema.name; }
};

/// The registry holds every op; it is built on first use by the family registration functions.
class Registry {
 public:
  static Registry& instance();
  const OpDef& add(OpDef def);
  const OpDef* find(const std::string& name) const;
  const OpDef& get(const std::string& name) const;  ///< throws ValueError for unknown names
  const std::vector<std::unique_ptr<OpDef>>& all() const { return ops_; }

 private:
  Registry() = default;
  std::vector<std::unique_ptr<OpDef>> ops_;
  std::map<std::string, OpDef*> by_name_;
};

inline const OpDef& find_op(const std::string& name) { return Registry::instance().get(name); }

/// Binds positional values and keyword values to the schema (filling defaults), checking names,
/// counts and types. Used by the Python bindings and by call_by_name.
Args bind(const OpDef& op, std::vector<Value> positional, std::vector<std::pair<std::string, Value>> kwargs);

/// Runs an op: prepare (recorded), forward (not recorded), then records a backward node when
/// grad mode is on and a differentiable input requires grad. `args` must hold every parameter.
std::vector<Tensor> call(const OpDef& op, std::vector<Value> args);
/// Runs an op and returns its single output.
Tensor call1(const OpDef& op, std::vector<Value> args);
/// Runs `op` in place on `self` (its first argument): computes the out-of-place result and
/// writes it into self, rebasing self's autograd history on the new node.
Tensor& call_inplace(const OpDef& op, Tensor& self, std::vector<Value> args);

/// What a backward function sees: saved inputs and outputs, argument values, input metadata,
/// output gradients, and which inputs need a gradient.
class BackwardContext {
 public:
  virtual ~BackwardContext() = default;
  /// Argument by name (non-tensor values are always kept; tensors only if listed in `saves`).
  virtual const Value& arg(const std::string& name) const = 0;
  const Tensor& input(const std::string& name) const { return arg(name).tensor(); }
  int64_t int_arg(const std::string& name) const { return arg(name).to_int(); }
  double double_arg(const std::string& name) const { return arg(name).to_double(); }
  bool bool_arg(const std::string& name) const { return arg(name).to_bool(); }
  /// Saved output k (reattached to this node so double backward sees it in the graph).
  virtual Tensor output(int k) const = 0;
  /// Gradient of output k; zeros when the output was not used.
  virtual const Tensor& grad(int k = 0) const = 0;
  virtual size_t num_outputs() const = 0;
  /// Shape and dtype of a tensor parameter (always available).
  virtual Shape input_sizes(const std::string& name) const = 0;
  /// For Tensor[] parameters: how many tensors, and the shape of element i.
  virtual size_t num_inputs_of(const std::string& name) const = 0;
  virtual Shape input_sizes_of(const std::string& name, int element) const = 0;
  virtual DType input_dtype(const std::string& name) const = 0;
  /// Whether the gradient of a tensor parameter (or of element i of a Tensor[] parameter) is needed.
  virtual bool needs_grad(const std::string& name, int element = 0) const = 0;
  /// The gradient other uses of tensor parameter `name` have already summed, handed over so this
  /// backward can add its contribution in place (see autograd::take_pending_grad); a backward
  /// that gets a defined tensor must return it, plus its own part, as that input's gradient.
  virtual Tensor take_pending_grad(const std::string& name) = 0;
};

/// Registers every family; called once by Registry::instance().
void register_all_ops(Registry& r);

}  // namespace foundry::ops
