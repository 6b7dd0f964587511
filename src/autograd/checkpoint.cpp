#include "foundry/autograd/checkpoint.h"

#include "foundry/autograd/autograd.h"
#include "foundry/autograd/node.h"
#include "foundry/core/rng.h"
#include "foundry/ops/ops.h"

namespace foundry::autograd {

namespace {

class CheckpointNode : public Node {
 public:
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> fn;
  std::vector<Tensor> inputs;  // detached
  std::vector<bool> input_requires;
  uint64_t rng_seed = 0, rng_offset = 0;
  bool released = false;

  std::string name() const override { return "CheckpointBackward"; }
  void release_saved() override {
    released = true;
    inputs.clear();
  }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    if (released)
      raise<Error>("checkpoint: trying to backward through the graph a second time; pass retain_graph=true");
    // Recompute with the generator as it was in forward.
    Generator& g = default_generator();
    uint64_t seed = g.seed(), offset = g.offset();
    g.set_state(rng_seed, rng_offset);
    std::vector<Tensor> leaves;
    for (size_t i = 0; i < inputs.size(); ++i) {
      Tensor t = inputs[i].detach();
      if (input_requires[i]) t.requires_grad_(true);
      leaves.push_back(t);
    }
    std::vector<Tensor> outs;
    {
      EnableGradGuard eg;
      outs = fn(leaves);
    }
    g.set_state(seed, offset);
    std::vector<Tensor> roots, root_grads;
    for (size_t k = 0; k < outs.size() && k < grads.size(); ++k) {
      if (!outs[k].requires_grad() || !grads[k].defined()) continue;
      roots.push_back(outs[k]);
      root_grads.push_back(grads[k]);
    }
    std::vector<Tensor> result(inputs.size());
    if (roots.empty()) return result;
    // Accumulates into parameters' .grad and into the input leaves.
    backward(roots, root_grads, /*retain_graph=*/false, /*create_graph=*/is_grad_enabled());
    for (size_t i = 0; i < leaves.size(); ++i)
      if (input_requires[i]) result[i] = leaves[i].grad();
    return result;
  }
};

}  // namespace

std::vector<Tensor> checkpoint(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                               const std::vector<Tensor>& inputs) {
  Generator& g = default_generator();
  uint64_t seed = g.seed(), offset = g.offset();
  std::vector<Tensor> outs;
  {
    NoGradGuard ng;
    outs = fn(inputs);
  }
  if (!is_grad_enabled()) return outs;
  auto node = std::make_shared<CheckpointNode>();
  node->fn = fn;
  node->rng_seed = seed;
  node->rng_offset = offset;
  bool any = false;
  for (const Tensor& t : inputs) {
    node->inputs.push_back(t.detach());
    bool req = t.requires_grad();
    node->input_requires.push_back(req);
    any |= req;
    node->next_edges.push_back(req ? gradient_edge(t) : Edge{});
  }
  // Parameters used inside fn are leaves the recomputation reaches by itself; the node must run
  // even when no input requires grad, so it is always recorded.
  (void)any;
  for (Tensor& o : outs) {
    node->outputs.push_back({Shape(o.sizes()), o.dtype()});
  }
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!is_floating(outs[k].dtype())) continue;
    Tensor alias = outs[k].detach();
    AutogradMeta& m = alias.impl()->autograd_meta();
    m.requires_grad = true;
    m.grad_fn = node;
    m.output_nr = uint32_t(k);
    outs[k] = alias;
  }
  return outs;
}

}  // namespace foundry::autograd
