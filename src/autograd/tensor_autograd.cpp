// The autograd half of Tensor's API.
#include <atomic>

#include "foundry/autograd/autograd.h"
#include "foundry/autograd/node.h"
#include "foundry/ops/ops.h"

namespace foundry {

using autograd::AutogradMeta;

namespace {
int next_hook_handle() {
  static std::atomic<int> counter{1};
  return counter.fetch_add(1);
}
const std::shared_ptr<autograd::Node> kNoNode;
}  // namespace

bool Tensor::requires_grad() const {
  const auto& m = impl_->autograd;
  return m && (m->requires_grad || m->grad_fn);
}

Tensor& Tensor::requires_grad_(bool required) {
  if (!required && !impl_->autograd) return *this;
  if (!is_leaf())
    raise<Error>("you can only change requires_grad flags of leaf tensors; use detach() to get a leaf");
  if (required && !(is_floating(dtype()) && !is_float8(dtype())))
    raise<TypeError>("only tensors of floating point dtype can require gradients (got {})", dtype_name(dtype()));
  impl_->autograd_meta().requires_grad = required;
  return *this;
}

Tensor Tensor::grad() const {
  if (!impl_->autograd) return Tensor();
  const AutogradMeta& m = *impl_->autograd;
  if (m.grad_fn) return m.retained_grad ? *m.retained_grad : Tensor();
  return m.grad;
}

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined())
    FOUNDRY_CHECK(Shape(g.sizes()) == Shape(sizes()), "assigned grad has shape {} but the tensor has shape {}",
                  shape_str(g.sizes()), shape_str(sizes()));
  AutogradMeta& m = impl_->autograd_meta();
  if (m.grad_fn && m.retained_grad) *m.retained_grad = g;
  else m.grad = g;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  return impl_->autograd ? impl_->autograd->grad_fn : kNoNode;
}

bool Tensor::is_leaf() const { return !impl_->autograd || !impl_->autograd->grad_fn; }

uint32_t Tensor::output_nr() const { return impl_->autograd ? impl_->autograd->output_nr : 0; }

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph, create_graph);
}

Tensor Tensor::detach() const {
  return make_tensor(storage(), sizes(), strides(), storage_offset(), dtype());
}

Tensor& Tensor::detach_() {
  if (impl_->autograd) {
    impl_->autograd->grad_fn.reset();
    impl_->autograd->requires_grad = false;
    impl_->autograd->is_differentiable_view = false;
  }
  return *this;
}

void Tensor::retain_grad() const {
  FOUNDRY_CHECK(requires_grad(), "can't retain_grad on a tensor that has requires_grad=False");
  if (is_leaf()) return;
  AutogradMeta& m = impl_->autograd_meta();
  if (m.retained_grad) return;
  m.retained_grad = std::make_shared<Tensor>();
  std::shared_ptr<Tensor> slot = m.retained_grad;
  // Retain hooks run after user hooks (negative handle, appended last).
  m.grad_fn->pre_hooks[m.output_nr].push_back({-1, [slot](const Tensor& g) {
                                                 *slot = slot->defined() ? *slot + g : g.detach();
                                                 return Tensor();
                                               }});
}

bool Tensor::retains_grad() const { return impl_->autograd && impl_->autograd->retained_grad != nullptr; }

int Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  FOUNDRY_CHECK(requires_grad(), "cannot register a hook on a tensor that doesn't require gradient");
  int handle = next_hook_handle();
  std::shared_ptr<autograd::Node> node = is_leaf() ? autograd::grad_accumulator(*this) : grad_fn();
  uint32_t nr = is_leaf() ? 0 : output_nr();
  if (is_leaf()) impl_->autograd_meta().leaf_hooks.push_back({handle, hook});
  else {
    auto& hooks = node->pre_hooks[nr];
    auto pos = std::find_if(hooks.begin(), hooks.end(), [](const auto& h) { return h.first < 0; });
    hooks.insert(pos, {handle, std::move(hook)});
  }
  return handle;
}

void Tensor::remove_hook(int handle) const {
  if (!impl_->autograd) return;
  auto& leaf = impl_->autograd->leaf_hooks;
  std::erase_if(leaf, [&](const auto& h) { return h.first == handle; });
  if (grad_fn())
    for (auto& [nr, hooks] : grad_fn()->pre_hooks) std::erase_if(hooks, [&](const auto& h) { return h.first == handle; });
}

}  // namespace foundry
