#include "foundry/autograd/node.h"

#include <atomic>

#include "foundry/autograd/grad_mode.h"
#include "foundry/core/layout.h"
#include "foundry/ops/ops.h"

namespace foundry::autograd {

uint64_t next_sequence_nr() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

Node::Node() : sequence_nr(next_sequence_nr()) {}

AccumulateGrad::AccumulateGrad(Tensor leaf_) : leaf(std::move(leaf_)) {
  // Accumulators run as soon as they are ready (PyTorch gives them the highest priority).
  sequence_nr = UINT64_MAX;
  outputs.push_back({Shape(leaf.sizes()), leaf.dtype()});
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  Tensor g = std::move(grads.at(0));
  if (!g.defined()) return {};
  AutogradMeta& meta = leaf.impl()->autograd_meta();
  if (!meta.grad.defined()) {
    if (is_grad_enabled()) {
      meta.grad = g;  // create_graph: keep the graph of the gradient
    } else {
      // Steal the buffer when nobody else holds it and it is contiguous or in the leaf's own order
      // (a loaded Conv1D weight stored as the rows of its transpose, whose linear() gradient arrives
      // so; PyTorch's AccumulateGrad keeps any dense layout of the leaf's, and the fused optimizers
      // walk weight and gradient as one flat array); otherwise copy so a later in-place
      // accumulation cannot write into a tensor the caller still owns.
      bool sole = g.impl()->use_count() == 1 && g.storage()->use_count() == 1 &&
                  (g.is_contiguous() || in_memory_order_of(g, leaf));
      meta.grad = sole ? g.detach() : g.detach().clone();
    }
  } else if (is_grad_enabled()) {
    meta.grad = meta.grad + g;
  } else {
    meta.grad.add_(g);
  }
  return {};
}

std::shared_ptr<Node> grad_accumulator(const Tensor& leaf) {
  AutogradMeta& meta = leaf.impl()->autograd_meta();
  if (auto acc = meta.grad_accumulator.lock()) return acc;
  // The accumulator holds a handle to the leaf; the leaf only a weak one back (no cycle).
  auto acc = std::make_shared<AccumulateGrad>(leaf);
  meta.grad_accumulator = acc;
  return acc;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.impl()->autograd) return {};
  const AutogradMeta& meta = *t.impl()->autograd;
  if (meta.grad_fn) return {meta.grad_fn, meta.output_nr};
  if (meta.requires_grad) return {grad_accumulator(t), 0};
  return {};
}

}  // namespace foundry::autograd
