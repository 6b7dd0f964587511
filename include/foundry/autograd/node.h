// The autograd graph: a Node per recorded op with edges to the nodes of its inputs. Leaves that
// require grad end in an AccumulateGrad node that adds into `.grad`.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "foundry/core/tensor.h"

namespace foundry::autograd {

class Node;

/// Where a gradient goes: input `input_nr` of `node` (null node: nowhere).
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t input_nr = 0;
  bool valid() const { return bool(node); }
};

/// Shape and dtype of a node output, to check incoming gradients and make zeros.
struct OutputMeta {
  Shape sizes;
  DType dtype = DType::Float32;
};

using GradHook = std::function<Tensor(const Tensor&)>;

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node() = default;

  /// Gradients of this node's inputs (one per next edge) from the gradients of its outputs.
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) = 0;
  virtual std::string name() const = 0;
  /// Frees saved tensors after a backward pass without retain_graph.
  virtual void release_saved() {}

  std::vector<Edge> next_edges;
  std::vector<OutputMeta> outputs;
  uint64_t sequence_nr;
  /// Hooks on the gradient of output k (tensor hooks of non-leaf tensors), by handle.
  std::map<uint32_t, std::vector<std::pair<int, GradHook>>> pre_hooks;
};

/// The sink for a leaf tensor that requires grad.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(Tensor leaf);
  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override;
  std::string name() const override { return "AccumulateGrad"; }
  Tensor leaf;
};

/// Per-tensor autograd state; allocated only for tensors that take part in autograd.
struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;
  std::weak_ptr<Node> grad_accumulator;
  /// For non-leaf tensors after retain_grad(): where the engine stores the gradient.
  std::shared_ptr<Tensor> retained_grad;
  /// Set when this tensor is a view made by a recorded view op (in-place on it is restricted).
  bool is_differentiable_view = false;
  /// Hooks of a leaf, run by the engine before its gradient is accumulated (kept here, not on the
  /// AccumulateGrad node, which lives only while a graph uses it).
  std::vector<std::pair<int, GradHook>> leaf_hooks;
};

/// The edge a gradient for `t` should flow into: its grad_fn, or its AccumulateGrad if it is a
/// leaf requiring grad, or an invalid edge.
Edge gradient_edge(const Tensor& t);
/// The leaf's AccumulateGrad node, created on first use.
std::shared_ptr<Node> grad_accumulator(const Tensor& leaf);

/// While the engine runs `node`: hands over the gradient already summed for next edge `edge`
/// (from the other uses of that input) when only the engine holds it and no graph is being
/// built, so a backward that scatters into zeros (embedding, index_select) can add into it
/// instead. The backward must then return it, with its own contribution added, for that edge.
/// Undefined otherwise (nothing summed yet, shared, non-contiguous, create_graph, not in backward).
Tensor take_pending_grad(const Node& node, size_t edge);
/// Adds one to a fresh sequence number; later nodes run first in backward.
uint64_t next_sequence_nr();

}  // namespace foundry::autograd
