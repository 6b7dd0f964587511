#include "kernels/cpu/loops.h"

namespace foundry::kernels {

StridedLoop::StridedLoop(std::initializer_list<const Tensor*> operands) {
  ntensors = int(operands.size());
  FOUNDRY_CHECK(ntensors <= kMaxOperands, "elementwise loop: too many operands ({})", ntensors);
  const Tensor* first = *operands.begin();
  const int ndim = int(first->dim());
  Shape in_sizes(first->sizes());
  numel = first->numel();
  int k = 0;
  std::array<Shape, kMaxOperands> in_strides;
  for (const Tensor* t : operands) {
    FOUNDRY_CHECK(Shape(t->sizes()) == in_sizes, "elementwise loop: operand shapes differ ({} vs {})",
                  shape_str(t->sizes()), shape_str(in_sizes));
    data[size_t(k)] = static_cast<char*>(t->data_ptr());
    Shape s(t->strides());
    for (auto& v : s) v *= t->element_size();
    in_strides[size_t(k)] = std::move(s);
    ++k;
  }
  // Drop size-1 dims, then order dims by operand 0's |stride| descending (ties: keep order), so
  // the innermost dim moves fastest in memory for the output.
  std::vector<int> dims;
  for (int d = 0; d < ndim; ++d)
    if (in_sizes[size_t(d)] != 1) dims.push_back(d);
  std::stable_sort(dims.begin(), dims.end(), [&](int a, int b) {
    for (int t = 0; t < ntensors; ++t) {
      int64_t sa = std::abs(in_strides[size_t(t)][size_t(a)]), sb = std::abs(in_strides[size_t(t)][size_t(b)]);
      if (sa != sb) return sa > sb;
    }
    return false;
  });
  // Coalesce: merge dim pairs (outer o, inner i) when stride[o] == stride[i] * size[i] for all.
  Shape sz;
  std::array<Shape, kMaxOperands> st;
  for (int d : dims) {
    bool merge = !sz.empty();
    if (merge) {
      for (int t = 0; t < ntensors; ++t) {
        // The previous (outer) dim merges into this (inner) one.
        if (st[size_t(t)].back() != in_strides[size_t(t)][size_t(d)] * in_sizes[size_t(d)]) {
          merge = false;
          break;
        }
      }
    }
    if (merge) {
      sz.back() *= in_sizes[size_t(d)];
      for (int t = 0; t < ntensors; ++t) st[size_t(t)].back() = in_strides[size_t(t)][size_t(d)];
    } else {
      sz.push_back(in_sizes[size_t(d)]);
      for (int t = 0; t < ntensors; ++t) st[size_t(t)].push_back(in_strides[size_t(t)][size_t(d)]);
    }
  }
  if (sz.empty() && numel == 1 && ndim > 0) {
    sz.push_back(1);
    for (int t = 0; t < ntensors; ++t) st[size_t(t)].push_back(0);
  }
  sizes = std::move(sz);
  for (int t = 0; t < ntensors; ++t) strides[size_t(t)] = std::move(st[size_t(t)]);
  FOUNDRY_CHECK(sizes.size() <= 16, "elementwise loop: more than 16 non-trivial dims");
}

}  // namespace foundry::kernels
