// The backward engine: a topological pass over the graph from the outputs, running each node
// once all gradients flowing into it have been summed (PyTorch's engine, single-threaded).
#include <algorithm>
#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "foundry/autograd/autograd.h"
#include "foundry/autograd/node.h"
#include "foundry/ops/ops.h"

namespace foundry::autograd {

namespace {

struct NodeState {
  int dependencies = 0;
  std::vector<Tensor> buffer;  // summed gradients per output of the node
  bool needed = true;          // runs (only false in grad() mode for nodes leading nowhere)
};

struct CompareSeq {
  bool operator()(Node* a, Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

// True when nothing but the engine's buffer can see `acc`: its only handle, its storage's only
// tensor, and no graph being built behind it (grad mode is off unless create_graph).
bool exclusively_owned(const Tensor& acc) {
  return !is_grad_enabled() && acc.impl()->use_count() == 1 && acc.storage()->use_count() == 1 &&
         !acc.requires_grad() && acc.is_contiguous();
}

bool can_add_in_place(const Tensor& acc, const Tensor& g) {
  return exclusively_owned(acc) && acc.dtype() == g.dtype() && Shape(acc.sizes()) == Shape(g.sizes());
}

// The node being applied and the buffers of the nodes it feeds (see take_pending_grad).
struct PendingScope;
thread_local PendingScope* t_pending = nullptr;
struct PendingScope {
  const Node* node;
  std::unordered_map<Node*, NodeState>* state;
  PendingScope* outer;  // a backward nested inside a node (checkpointing) restores it
  ~PendingScope() { t_pending = outer; }
};

void accumulate(std::vector<Tensor>& buffer, uint32_t nr, Tensor g) {
  if (buffer.size() <= nr) buffer.resize(nr + 1);
  Tensor& acc = buffer[nr];
  if (!acc.defined()) {
    acc = std::move(g);
  } else if (can_add_in_place(acc, g)) {
    acc.add_(g);  // a tied embedding's two 150 MB gradients need no third (PyTorch's InputBuffer)
  } else if (g.defined() && g.impl()->use_count() == 1 && can_add_in_place(g, acc)) {
    g.add_(acc);
    acc = std::move(g);
  } else {
    acc = acc + g;
  }
}

Tensor check_grad(Node* node, uint32_t nr, Tensor g) {
  if (!g.defined() || nr >= node->outputs.size()) return g;
  const OutputMeta& m = node->outputs[nr];
  if (!(Shape(g.sizes()) == m.sizes)) {
    // A gradient that broadcasts to the output's shape is summed down (PyTorch does the same
    // for grad_outputs given by the user); anything else is an error.
    raise<Error>("backward: gradient for output {} of {} has shape {} but the output has shape {}",
                 nr, node->name(), shape_str(g.sizes()), shape_str(m.sizes));
  }
  if (g.dtype() != m.dtype && is_floating(m.dtype)) g = g.to(m.dtype);
  return g;
}

struct RunOptions {
  bool keep_graph;
  bool create_graph;
  // grad() mode: capture gradients at these edges instead of accumulating into leaves.
  std::vector<Edge> captures;
};

// Runs the graph from `roots` with gradients `root_grads`; returns captured gradients.
std::vector<Tensor> run(const std::vector<Edge>& roots, std::vector<Tensor> root_grads, const RunOptions& opt) {
  std::unordered_map<Node*, NodeState> state;
  // 1. Dependencies: count incoming edges over the reachable graph.
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  for (const Edge& e : roots)
    if (e.node && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
  std::vector<Node*> order;  // discovery order, for the needed-pass
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    order.push_back(n);
    state[n];
    for (const Edge& e : n->next_edges) {
      if (!e.node) continue;
      state[e.node.get()].dependencies++;
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
  // 2. In grad() mode only nodes on a path to a captured edge run; leaves never accumulate.
  std::unordered_map<Node*, std::vector<std::pair<uint32_t, size_t>>> capture_at;
  bool capture_mode = !opt.captures.empty();
  if (capture_mode) {
    for (size_t i = 0; i < opt.captures.size(); ++i)
      if (opt.captures[i].node) capture_at[opt.captures[i].node.get()].push_back({opt.captures[i].input_nr, i});
    // needed(n) = any child is a capture node or needed. Resolve with a post-order DFS.
    std::unordered_map<Node*, int> memo;  // 0 unknown, 1 no, 2 yes
    std::function<bool(Node*)> leads = [&](Node* n) -> bool {
      auto it = memo.find(n);
      if (it != memo.end()) return it->second == 2;
      memo[n] = 1;
      bool any = false;
      for (const Edge& e : n->next_edges) {
        if (!e.node) continue;
        if (capture_at.count(e.node.get())) any = true;
        if (leads(e.node.get())) any = true;
      }
      memo[n] = any ? 2 : 1;
      return any;
    };
    for (Node* n : order) state[n].needed = leads(n);
  }
  std::vector<Tensor> captured(opt.captures.size());

  // 3. Seed the root buffers.
  std::priority_queue<Node*, std::vector<Node*>, CompareSeq> ready;
  for (size_t i = 0; i < roots.size(); ++i) {
    if (!roots[i].node) continue;
    NodeState& s = state[roots[i].node.get()];
    accumulate(s.buffer, roots[i].input_nr, check_grad(roots[i].node.get(), roots[i].input_nr, root_grads[i]));
  }
  for (auto& [n, s] : state)
    if (s.dependencies == 0) ready.push(n);

  GradModeGuard mode(opt.create_graph);
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    NodeState& s = state[n];
    std::vector<Tensor> grads = std::move(s.buffer);
    grads.resize(n->outputs.size());
    // Tensor hooks on this node's outputs may replace the gradient.
    for (auto& [nr, hooks] : n->pre_hooks) {
      if (nr >= grads.size() || !grads[nr].defined()) continue;
      for (auto& [handle, hook] : hooks) {
        Tensor r = hook(grads[nr]);
        if (r.defined()) grads[nr] = r;
      }
    }
    if (auto* acc = dynamic_cast<AccumulateGrad*>(n); acc && acc->leaf.impl()->autograd && grads[0].defined()) {
      for (auto& [handle, hook] : acc->leaf.impl()->autograd->leaf_hooks) {
        Tensor r = hook(grads[0]);
        if (r.defined()) grads[0] = r;
      }
    }
    if (auto it = capture_at.find(n); it != capture_at.end())
      for (auto [nr, slot] : it->second)
        if (nr < grads.size()) captured[slot] = grads[nr];
    bool execute = !capture_mode ? true : (s.needed && !dynamic_cast<AccumulateGrad*>(n));
    std::vector<Tensor> input_grads;
    if (execute) {
      bool any = std::any_of(grads.begin(), grads.end(), [](const Tensor& g) { return g.defined(); });
      if (any) {
        PendingScope scope{n, &state, t_pending};
        t_pending = &scope;
        input_grads = n->apply(std::move(grads));
      }
      if (!opt.keep_graph) n->release_saved();
    }
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const Edge& e = n->next_edges[i];
      if (!e.node) continue;
      NodeState& ns = state[e.node.get()];
      if (i < input_grads.size() && input_grads[i].defined())
        accumulate(ns.buffer, e.input_nr, check_grad(e.node.get(), e.input_nr, input_grads[i]));
      if (--ns.dependencies == 0) ready.push(e.node.get());
    }
  }
  return captured;
}

std::vector<Tensor> make_root_grads(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs) {
  FOUNDRY_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(),
                "backward: got {} grad_outputs for {} outputs", grad_outputs.size(), outputs.size());
  std::vector<Tensor> grads(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    FOUNDRY_CHECK(out.defined(), "backward: output {} is undefined", i);
    FOUNDRY_CHECK(out.requires_grad(),
                  "element {} of tensors does not require grad and does not have a grad_fn", i);
    if (i < grad_outputs.size() && grad_outputs[i].defined()) {
      const Tensor& g = grad_outputs[i];
      FOUNDRY_CHECK(Shape(g.sizes()) == Shape(out.sizes()),
                    "backward: grad_output {} has shape {} but the output has shape {}", i,
                    shape_str(g.sizes()), shape_str(out.sizes()));
      grads[i] = g;
    } else {
      FOUNDRY_CHECK(out.numel() == 1, "grad can be implicitly created only for scalar outputs (output {} has shape {})",
                    i, shape_str(out.sizes()));
      grads[i] = ones_like(out);
    }
  }
  return grads;
}

}  // namespace

Tensor take_pending_grad(const Node& node, size_t edge) {
  if (!t_pending || t_pending->node != &node || edge >= node.next_edges.size()) return {};
  const Edge& e = node.next_edges[edge];
  if (!e.node) return {};
  auto it = t_pending->state->find(e.node.get());
  if (it == t_pending->state->end() || e.input_nr >= it->second.buffer.size()) return {};
  Tensor& acc = it->second.buffer[e.input_nr];
  if (!acc.defined() || !exclusively_owned(acc)) return {};
  return std::exchange(acc, Tensor());
}

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs, bool retain_graph,
              bool create_graph) {
  std::vector<Tensor> root_grads = make_root_grads(outputs, grad_outputs);
  std::vector<Edge> roots;
  for (const Tensor& o : outputs) roots.push_back(gradient_edge(o));
  run(roots, std::move(root_grads), {retain_graph || create_graph, create_graph, {}});
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, std::optional<bool> retain_graph,
                         bool create_graph, bool allow_unused) {
  std::vector<Tensor> root_grads = make_root_grads(outputs, grad_outputs);
  std::vector<Edge> roots;
  for (const Tensor& o : outputs) roots.push_back(gradient_edge(o));
  RunOptions opt{retain_graph.value_or(create_graph), create_graph, {}};
  for (size_t i = 0; i < inputs.size(); ++i) {
    FOUNDRY_CHECK(inputs[i].defined() && inputs[i].requires_grad(),
                  "grad: input {} does not require grad", i);
    opt.captures.push_back(gradient_edge(inputs[i]));
  }
  std::vector<Tensor> result = run(roots, std::move(root_grads), opt);
  for (size_t i = 0; i < result.size(); ++i) {
    if (!result[i].defined() && !allow_unused)
      raise<Error>("grad: input {} was not used in the graph; pass allow_unused=true to get an undefined gradient", i);
  }
  return result;
}

}  // namespace foundry::autograd
