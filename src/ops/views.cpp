// View ops (results share storage with the input) and the copies/conversions that go with them.
#include <algorithm>
#include <numeric>

#include "foundry/autograd/node.h"
#include "ops/common.h"

namespace foundry {

using ops::BackwardContext;
using ops::OpDef;
using ops::Sample;

namespace {

Tensor view_of(const Tensor& x, IntList sizes, IntList strides, int64_t offset) {
  return make_tensor(x.storage(), sizes, strides, offset, x.dtype());
}

// Infers a single -1 in `shape` from numel; checks the product.
Shape infer_size(IntList shape, int64_t numel, const char* op) {
  Shape out(shape);
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      FOUNDRY_CHECK_AS(ValueError, infer < 0, "{}: only one dimension can be inferred", op);
      infer = int(i);
    } else {
      FOUNDRY_CHECK_AS(ValueError, out[i] >= 0, "{}: invalid shape dimension {}", op, out[i]);
      known *= out[i];
    }
  }
  if (infer >= 0) {
    FOUNDRY_CHECK_AS(ValueError, known != 0 && numel % known == 0, "{}: shape '{}' is invalid for input of size {}", op,
                     shape_str(shape), numel);
    out[size_t(infer)] = numel / known;
  } else {
    FOUNDRY_CHECK_AS(ValueError, known == numel, "{}: shape '{}' is invalid for input of size {}", op, shape_str(shape),
                     numel);
  }
  return out;
}

// PyTorch's computeStride: strides for viewing (sizes, strides) as new_sizes without copying,
// or nullopt when some new dimension would span non-contiguous chunks.
std::optional<Shape> compute_view_strides(IntList sizes, IntList strides, IntList new_sizes) {
  Shape new_strides(new_sizes.size());
  int64_t numel = numel_of(sizes);
  if (numel == 0 || sizes.empty()) {
    return contiguous_strides(new_sizes);
  }
  int64_t view_d = int64_t(new_sizes.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[size_t(d)];
    if (d == 0 || (sizes[size_t(d - 1)] != 1 && strides[size_t(d - 1)] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[size_t(view_d)] == 1)) {
        new_strides[size_t(view_d)] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[size_t(view_d)];
        view_d--;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[size_t(d - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

Tensor view_impl(const Tensor& x, IntList size) {
  Shape shape = infer_size(size, x.numel(), "view");
  auto strides = compute_view_strides(x.sizes(), x.strides(), shape);
  if (!strides)
    raise<Error>("view: size {} is not compatible with input tensor's size {} and stride {} (at least one dimension "
                 "spans across two contiguous subspaces); use reshape() instead",
                 shape_str(shape), shape_str(x.sizes()), shape_str(x.strides()));
  return view_of(x, shape, *strides, x.storage_offset());
}

Tensor expand_impl(const Tensor& x, IntList size) {
  FOUNDRY_CHECK_AS(ValueError, int64_t(size.size()) >= x.dim(),
                   "expand: the number of sizes provided ({}) must be greater or equal to the number of dimensions in "
                   "the tensor ({})",
                   size.size(), x.dim());
  size_t nd = size.size(), off = nd - size_t(x.dim());
  Shape sizes(nd), strides(nd);
  for (size_t i = 0; i < nd; ++i) {
    int64_t target = size[i];
    if (i < off) {
      FOUNDRY_CHECK_AS(ValueError, target >= 0, "expand: -1 is not allowed in a leading, non-existing dimension");
      sizes[i] = target;
      strides[i] = 0;
      continue;
    }
    int64_t cur = x.size(int64_t(i - off));
    if (target == -1) target = cur;
    if (cur == target) {
      sizes[i] = cur;
      strides[i] = x.stride(int64_t(i - off));
    } else {
      FOUNDRY_CHECK_AS(ValueError, cur == 1,
                       "expand: the expanded size of the tensor ({}) must match the existing size ({}) at non-singleton "
                       "dimension {}; target sizes: {}, tensor sizes: {}",
                       target, cur, i, shape_str(size), shape_str(x.sizes()));
      sizes[i] = target;
      strides[i] = 0;
    }
  }
  return view_of(x, sizes, strides, x.storage_offset());
}

// Normalises a NumPy slice (start, stop, step) for a dim of size n: returns (start, length).
std::pair<int64_t, int64_t> normalize_slice(OptInt start_opt, OptInt stop_opt, int64_t step, int64_t n) {
  FOUNDRY_CHECK_AS(ValueError, step != 0, "slice step cannot be zero");
  int64_t start, stop;
  if (step > 0) {
    start = start_opt.value_or(0);
    stop = stop_opt.value_or(n);
    if (start < 0) start = std::max<int64_t>(start + n, 0);
    if (stop < 0) stop = std::max<int64_t>(stop + n, 0);
    start = std::min(start, n);
    stop = std::min(stop, n);
    int64_t len = stop > start ? (stop - start + step - 1) / step : 0;
    return {start, len};
  }
  // Python's slice.indices for negative steps: stop -1 means "before index 0".
  start = start_opt.value_or(n - 1);
  if (start < 0) start += n;
  start = std::min(start, n - 1);
  if (start < 0) return {0, 0};
  if (stop_opt.has_value()) {
    stop = *stop_opt;
    if (stop < 0) stop += n;
    stop = std::clamp<int64_t>(stop, -1, n - 1);
  } else {
    stop = -1;
  }
  int64_t len = start > stop ? (start - stop + (-step) - 1) / (-step) : 0;
  return {start, len};
}

Tensor slice_impl(const Tensor& x, int64_t dim, OptInt start, OptInt stop, int64_t step) {
  FOUNDRY_CHECK_AS(IndexError, x.dim() > 0, "slice() cannot be applied to a 0-dim tensor");
  dim = wrap_dim(dim, x.dim(), "slice");
  auto [s, len] = normalize_slice(start, stop, step, x.size(dim));
  Shape sizes(x.sizes()), strides(x.strides());
  int64_t offset = x.storage_offset() + (len > 0 ? s * x.stride(dim) : 0);
  sizes[size_t(dim)] = len;
  strides[size_t(dim)] = x.stride(dim) * step;
  return view_of(x, sizes, strides, offset);
}

Tensor select_impl(const Tensor& x, int64_t dim, int64_t index) {
  FOUNDRY_CHECK_AS(IndexError, x.dim() > 0, "select() cannot be applied to a 0-dim tensor");
  dim = wrap_dim(dim, x.dim(), "select");
  int64_t n = x.size(dim);
  FOUNDRY_CHECK_AS(IndexError, index >= -n && index < n,
                   "select(): index {} out of range for tensor of size {} at dimension {}", index, shape_str(x.sizes()),
                   dim);
  if (index < 0) index += n;
  Shape sizes(x.sizes()), strides(x.strides());
  int64_t offset = x.storage_offset() + index * x.stride(dim);
  sizes.erase(size_t(dim));
  strides.erase(size_t(dim));
  return view_of(x, sizes, strides, offset);
}

Tensor transpose_impl(const Tensor& x, int64_t dim0, int64_t dim1) {
  if (x.dim() == 0) return view_of(x, {}, {}, x.storage_offset());
  const int64_t d0 = wrap_dim(dim0, x.dim(), "transpose"), d1 = wrap_dim(dim1, x.dim(), "transpose");
  Shape sizes(x.sizes()), strides(x.strides());
  std::swap(sizes[size_t(d0)], sizes[size_t(d1)]);
  std::swap(strides[size_t(d0)], strides[size_t(d1)]);
  return view_of(x, sizes, strides, x.storage_offset());
}

Tensor unsqueeze_impl(const Tensor& x, int64_t dim) {
  const int64_t d = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape sizes(x.sizes()), strides(x.strides());
  const int64_t st = d < x.dim() ? x.size(d) * x.stride(d) : 1;
  sizes.insert(size_t(d), 1);
  strides.insert(size_t(d), st);
  return view_of(x, sizes, strides, x.storage_offset());
}

// narrow's dim, start (a negative one from the end) and length, checked.
std::tuple<int64_t, int64_t, int64_t> narrow_range(const Tensor& x, int64_t dim, int64_t start, int64_t len) {
  const int64_t d = wrap_dim(dim, x.dim(), "narrow"), n = x.size(d), given = start;
  if (start < 0) start += n;
  FOUNDRY_CHECK_AS(IndexError, start >= 0 && len >= 0 && start + len <= n,
                   "narrow: start ({}) + length ({}) exceeds dimension size ({})", given, len, n);
  return {d, start, len};
}

Tensor diagonal_impl(const Tensor& x, int64_t offset, int64_t dim1, int64_t dim2) {
  FOUNDRY_CHECK_AS(ValueError, x.dim() >= 2, "diagonal: expected a tensor with at least 2 dims, got {}", x.dim());
  dim1 = wrap_dim(dim1, x.dim(), "diagonal");
  dim2 = wrap_dim(dim2, x.dim(), "diagonal");
  FOUNDRY_CHECK_AS(ValueError, dim1 != dim2, "diagonal dimensions cannot be identical {}, {}", dim1, dim2);
  int64_t diag_size, storage_offset = x.storage_offset();
  if (offset >= 0) {
    diag_size = std::max<int64_t>(std::min(x.size(dim1), x.size(dim2) - offset), 0);
    if (diag_size > 0) storage_offset += offset * x.stride(dim2);
  } else {
    diag_size = std::max<int64_t>(std::min(x.size(dim1) + offset, x.size(dim2)), 0);
    if (diag_size > 0) storage_offset -= offset * x.stride(dim1);
  }
  Shape sizes, strides;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d == dim1 || d == dim2) continue;
    sizes.push_back(x.size(d));
    strides.push_back(x.stride(d));
  }
  sizes.push_back(diag_size);
  strides.push_back(x.stride(dim1) + x.stride(dim2));
  return view_of(x, sizes, strides, storage_offset);
}

Tensor permute_impl(const Tensor& x, IntList dims) {
  FOUNDRY_CHECK_AS(ValueError, int64_t(dims.size()) == x.dim(),
                   "permute: number of dims don't match (input has {} dims, permutation {})", x.dim(),
                   shape_str(dims));
  Shape sizes(dims.size()), strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], x.dim(), "permute");
    FOUNDRY_CHECK_AS(ValueError, !seen[size_t(d)], "permute: repeated dim {} in {}", d, shape_str(dims));
    seen[size_t(d)] = true;
    sizes[i] = x.size(d);
    strides[i] = x.stride(d);
  }
  return view_of(x, sizes, strides, x.storage_offset());
}

std::vector<Sample> view_samples(DType dt, Generator& g,
                                 const std::function<void(std::vector<Sample>&, const Tensor&)>& make) {
  std::vector<Sample> out;
  make(out, ops::sample_uniform({2, 3, 4}, dt, g));
  return out;
}

}  // namespace

Shape broadcast_shapes(IntList a, IntList b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      raise<ValueError>("{}{}the size of tensor a ({}) must match the size of tensor b ({}) at non-singleton dimension "
                        "{} (shapes {} and {})",
                        op, *op ? ": " : "", da, db, i, shape_str(a), shape_str(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Without a backward to record, the common views are built here by the ops' own shape rules,
// skipping the registry's argument checking and dispatch: a decode step makes ~100 of them a token
// (split heads, merge heads), and their dispatch was ~1% of it. The same tensors either way.
namespace {
bool records_view(const Tensor& x) { return !x.defined() || (autograd::is_grad_enabled() && x.requires_grad()); }
}  // namespace

Tensor view(const Tensor& x, IntList size) {
  if (!records_view(x)) return view_impl(x, size);
  return ops::call1(FOUNDRY_OP("view"), {x, size});
}
Tensor reshape(const Tensor& x, IntList shape) {
  if (!records_view(x)) {
    const Shape s = infer_size(shape, x.numel(), "reshape");
    if (compute_view_strides(x.sizes(), x.strides(), s)) return view_impl(x, s);
  }
  return ops::call1(FOUNDRY_OP("reshape"), {x, shape});
}
Tensor permute(const Tensor& x, IntList dims) { return ops::call1(FOUNDRY_OP("permute"), {x, dims}); }
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  if (!records_view(x)) return transpose_impl(x, d0, d1);
  return ops::call1(FOUNDRY_OP("transpose"), {x, d0, d1});
}
Tensor t(const Tensor& x) { return ops::call1(FOUNDRY_OP("t"), {x}); }
Tensor movedim(const Tensor& x, IntList source, IntList destination) {
  return ops::call1(FOUNDRY_OP("movedim"), {x, source, destination});
}
Tensor expand(const Tensor& x, IntList size) { return ops::call1(FOUNDRY_OP("expand"), {x, size}); }
Tensor broadcast_to(const Tensor& x, IntList size) { return ops::call1(FOUNDRY_OP("broadcast_to"), {x, size}); }
Tensor squeeze(const Tensor& x, OptInt dim) { return ops::call1(FOUNDRY_OP("squeeze"), {x, dim}); }
Tensor unsqueeze(const Tensor& x, int64_t dim) {
  if (!records_view(x)) return unsqueeze_impl(x, dim);
  return ops::call1(FOUNDRY_OP("unsqueeze"), {x, dim});
}
Tensor flatten(const Tensor& x, int64_t s, int64_t e) { return ops::call1(FOUNDRY_OP("flatten"), {x, s, e}); }
Tensor unflatten(const Tensor& x, int64_t dim, IntList sizes) {
  return ops::call1(FOUNDRY_OP("unflatten"), {x, dim, sizes});
}
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  if (!records_view(x) && x.dim() > 0) {
    const auto [d, s, len] = narrow_range(x, dim, start, length);
    return slice_impl(x, d, s, s + len, 1);
  }
  return ops::call1(FOUNDRY_OP("narrow"), {x, dim, start, length});
}
Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  if (!records_view(x)) return select_impl(x, dim, index);
  return ops::call1(FOUNDRY_OP("select"), {x, dim, index});
}
Tensor slice(const Tensor& x, int64_t dim, OptInt start, OptInt end, int64_t step) {
  return ops::call1(FOUNDRY_OP("slice"), {x, dim, start, end, step});
}
Tensor diagonal(const Tensor& x, int64_t offset, int64_t d1, int64_t d2) {
  return ops::call1(FOUNDRY_OP("diagonal"), {x, offset, d1, d2});
}
Tensor as_strided(const Tensor& x, IntList size, IntList stride, OptInt storage_offset) {
  return ops::call1(FOUNDRY_OP("as_strided"), {x, size, stride, storage_offset});
}
Tensor to(const Tensor& x, DType dtype) {
  // As PyTorch: the tensor itself when the dtype matches (the op would return it too, after its dispatch).
  if (x.defined() && x.dtype() == dtype) return x;
  return ops::call1(FOUNDRY_OP("to"), {x, dtype});
}
Tensor clone(const Tensor& x) { return ops::call1(FOUNDRY_OP("clone"), {x}); }
Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  return ops::call1(FOUNDRY_OP("contiguous"), {x});
}

Tensor& copy_(Tensor& dst, const Tensor& src) {
  bool grad_mode = autograd::is_grad_enabled();
  bool record = grad_mode && (src.requires_grad() || dst.requires_grad());
  if (!record) {
    copy_into(dst, src);
    return dst;
  }
  if (dst.requires_grad() && dst.is_leaf())
    raise<Error>("copy_: a leaf tensor that requires grad is being used in an in-place operation");
  if (dst.impl()->autograd && dst.impl()->autograd->is_differentiable_view)
    raise<NotImplementedError>(
        "copy_: in-place copy into a view of a tensor that requires grad is not supported; build the result "
        "out of place (e.g. with cat or index_put)");
  Tensor r = src.dtype() == dst.dtype() ? src : src.to(dst.dtype());
  if (!(Shape(r.sizes()) == Shape(dst.sizes()))) r = r.expand(dst.sizes());
  {
    autograd::NoGradGuard ng;
    copy_into(dst, r);
  }
  auto& m = dst.impl()->autograd_meta();
  if (r.requires_grad()) {
    // The copy's history is r's: an alias op (clone) gives dst a node of its own.
    Tensor c = clone(r);
    m.grad_fn = c.grad_fn();
    m.output_nr = c.output_nr();
    m.requires_grad = true;
  } else {
    m.grad_fn.reset();
    m.requires_grad = false;
  }
  return dst;
}

Tensor& fill_(Tensor& self, const Scalar& value) {
  Tensor v = full({}, value, self.dtype());
  autograd::NoGradGuard ng;
  if (autograd::is_grad_enabled() && self.requires_grad() && self.is_leaf())
    raise<Error>("fill_: a leaf tensor that requires grad is being used in an in-place operation");
  copy_into(self, v);
  return self;
}

Tensor& zero_(Tensor& self) { return fill_(self, 0); }

Tensor ops_sum_to_impl(const Tensor& grad, IntList shape);

namespace ops {

Tensor sum_to(const Tensor& grad, IntList shape) {
  if (Shape(grad.sizes()) == Shape(shape)) return grad;
  int64_t lead = grad.dim() - int64_t(shape.size());
  FOUNDRY_CHECK(lead >= 0, "sum_to: cannot sum shape {} to {}", shape_str(grad.sizes()), shape_str(shape));
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < lead; ++i) dims.push_back(i);
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] == 1 && grad.size(lead + int64_t(i)) != 1) dims.push_back(lead + int64_t(i));
  Tensor r = dims.empty() ? grad : sum(grad, dims, /*keepdim=*/true);
  return r.reshape(shape);
}

void register_view_ops(Registry& r) {
  auto shape_samples = [](std::function<void(std::vector<Sample>&, const Tensor&)> make) {
    return [make](DType dt, Generator& g) { return view_samples(dt, g, make); };
  };

  r.add({.schema_text = "view(Tensor input, int[] size) -> Tensor",
         .family = "view",
         .doc = "A view with a new shape (one size may be -1); fails when strides do not allow it.",
         .kind = OpDef::Kind::View,
         .forward = [](const Args& a) { return std::vector<Tensor>{view_impl(a.tensor(0), a[1].int_list())}; },
         .backward = [](BackwardContext& c) { return std::vector<Tensor>{c.grad().reshape(c.input_sizes("input"))}; },
         .dtypes = kAllTypes,
         .samples = shape_samples([](auto& out, const Tensor& x) {
           out.push_back({{x, std::vector<int64_t>{6, 4}}});
           out.push_back({{x, std::vector<int64_t>{-1}}});
           out.push_back({{x, std::vector<int64_t>{2, -1, 2}}});
         }),
         .ref = "lambda input, size: input.view(size)",
         .notes = "Fails (as PyTorch) when the input's strides do not allow the view, so layout variants are skipped.",
         .layout_sensitive = true});

  r.add({.schema_text = "reshape(Tensor input, int[] shape) -> Tensor",
         .family = "view",
         .doc = "view() when the strides allow it, else a contiguous copy reshaped.",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               Shape shape = infer_size(a[1].int_list(), x.numel(), "reshape");
               if (compute_view_strides(x.sizes(), x.strides(), shape)) return std::vector<Tensor>{view(x, shape)};
               return std::vector<Tensor>{view(clone(x), shape)};
             },
         .dtypes = kAllTypes,
         .samples = shape_samples([](auto& out, const Tensor& x) {
           out.push_back({{x, std::vector<int64_t>{4, 6}}});
           out.push_back({{x.transpose(0, 2), std::vector<int64_t>{-1, 2}}, "non-viewable"});
           out.push_back({{x, std::vector<int64_t>{24}}});
         })});

  r.add({.schema_text = "permute(Tensor input, int[] dims) -> Tensor",
         .family = "view",
         .doc = "Reorders dimensions.",
         .kind = OpDef::Kind::View,
         .forward = [](const Args& a) { return std::vector<Tensor>{permute_impl(a.tensor(0), a[1].int_list())}; },
         .backward =
             [](BackwardContext& c) {
               auto dims = c.arg("dims").int_list();
               int64_t n = int64_t(dims.size());
               std::vector<int64_t> inv(dims.size());
               for (int64_t i = 0; i < n; ++i) inv[size_t(wrap_dim(dims[size_t(i)], n))] = i;
               return std::vector<Tensor>{c.grad().permute(inv)};
             },
         .dtypes = kAllTypes,
         .samples = shape_samples([](auto& out, const Tensor& x) {
           out.push_back({{x, std::vector<int64_t>{2, 0, 1}}});
           out.push_back({{x, std::vector<int64_t>{-1, 0, 1}}});
         })});

  r.add({.schema_text = "transpose(Tensor input, int dim0, int dim1) -> Tensor",
         .family = "view",
         .doc = "Swaps two dimensions.",
         .kind = OpDef::Kind::View,
         .forward =
             [](const Args& a) { return std::vector<Tensor>{transpose_impl(a.tensor(0), a[1].to_int(), a[2].to_int())}; },
         .backward =
             [](BackwardContext& c) {
               return std::vector<Tensor>{c.grad().transpose(c.int_arg("dim0"), c.int_arg("dim1"))};
             },
         .dtypes = kAllTypes,
         .samples = shape_samples([](auto& out, const Tensor& x) {
           out.push_back({{x, 0, 2}});
           out.push_back({{x, -1, 1}});
         })});

  r.add({.schema_text = "t(Tensor input) -> Tensor",
         .family = "view",
         .doc = "Transposes a matrix (0-d and 1-d tensors are returned as is).",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               FOUNDRY_CHECK_AS(ValueError, x.dim() <= 2, "t() expects a tensor with <= 2 dimensions, but got {}", x.dim());
               return std::vector<Tensor>{x.dim() < 2 ? transpose(x, 0, 0) : transpose(x, 0, 1)};
             },
         .dtypes = kAllTypes,
         .samples = [](DType dt, Generator& g) {
           return std::vector<Sample>{{{ops::sample_uniform({3, 4}, dt, g)}}, {{ops::sample_uniform({5}, dt, g)}}};
         }});

  r.add({.schema_text = "movedim(Tensor input, int[] source, int[] destination) -> Tensor",
         .family = "view",
         .doc = "Moves dims from source positions to destination positions.",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               auto src = a[1].int_list(), dst = a[2].int_list();
               FOUNDRY_CHECK_AS(ValueError, src.size() == dst.size(),
                                "movedim: source and destination must have the same number of dims");
               int64_t n = x.dim();
               std::vector<int64_t> perm(size_t(n), -1);
               std::vector<bool> used_src(size_t(n), false), used_dst(size_t(n), false);
               for (size_t i = 0; i < src.size(); ++i) {
                 int64_t s = wrap_dim(src[i], n, "movedim"), d = wrap_dim(dst[i], n, "movedim");
                 FOUNDRY_CHECK_AS(ValueError, !used_src[size_t(s)] && !used_dst[size_t(d)], "movedim: repeated dim");
                 perm[size_t(d)] = s;
                 used_src[size_t(s)] = used_dst[size_t(d)] = true;
               }
               int64_t next = 0;
               for (int64_t d = 0; d < n; ++d) {
                 if (perm[size_t(d)] >= 0) continue;
                 while (used_src[size_t(next)]) ++next;
                 perm[size_t(d)] = next++;
               }
               return std::vector<Tensor>{permute(x, perm)};
             },
         .dtypes = kAllTypes,
         .samples = shape_samples([](auto& out, const Tensor& x) {
           out.push_back({{x, std::vector<int64_t>{0}, std::vector<int64_t>{2}}});
           out.push_back({{x, std::vector<int64_t>{0, 1}, std::vector<int64_t>{-1, 0}}});
         })});

  r.add({.schema_text = "expand(Tensor input, int[] size) -> Tensor",
         .family = "view",
         .doc = "Broadcasts size-1 dims to larger sizes without copying (stride 0).",
         .kind = OpDef::Kind::View,
         .forward = [](const Args& a) { return std::vector<Tensor>{expand_impl(a.tensor(0), a[1].int_list())}; },
         .backward = [](BackwardContext& c) { return std::vector<Tensor>{sum_to(c.grad(), c.input_sizes("input"))}; },
         .dtypes = kAllTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{
                   {{ops::sample_uniform({3, 1}, dt, g), std::vector<int64_t>{3, 4}}},
                   {{ops::sample_uniform({1, 4}, dt, g), std::vector<int64_t>{2, -1, 4}}},
                   {{ops::sample_uniform({}, dt, g), std::vector<int64_t>{2, 3}}, "0-d"},
               };
             },
         .ref = "lambda input, size: input.expand(size)"});

  r.add({.schema_text = "broadcast_to(Tensor input, int[] size) -> Tensor",
         .family = "view",
         .doc = "Same as expand.",
         .kind = OpDef::Kind::Composite,
         .forward = [](const Args& a) { return std::vector<Tensor>{expand(a.tensor(0), a[1].int_list())}; },
         .dtypes = kAllTypes,
         .samples = [](DType dt, Generator& g) {
           return std::vector<Sample>{{{ops::sample_uniform({3, 1}, dt, g), std::vector<int64_t>{2, 3, 4}}}};
         }});

  r.add({.schema_text = "squeeze(Tensor input, int? dim=None) -> Tensor",
         .family = "view",
         .doc = "Removes size-1 dims (all, or the given one if it has size 1).",
         .kind = OpDef::Kind::View,
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               Shape sizes, strides;
               std::optional<int64_t> dim;
               if (!a[1].is_none()) dim = wrap_dim(a[1].to_int(), x.dim(), "squeeze");
               for (int64_t d = 0; d < x.dim(); ++d) {
                 bool drop = x.size(d) == 1 && (!dim || *dim == d);
                 if (!drop) {
                   sizes.push_back(x.size(d));
                   strides.push_back(x.stride(d));
                 }
               }
               return std::vector<Tensor>{view_of(x, sizes, strides, x.storage_offset())};
             },
         .backward = [](BackwardContext& c) { return std::vector<Tensor>{c.grad().reshape(c.input_sizes("input"))}; },
         .dtypes = kAllTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor x = ops::sample_uniform({2, 1, 3, 1}, dt, g);
               return std::vector<Sample>{{{x, Value()}}, {{x, int64_t(1)}}, {{x, int64_t(0)}}, {{x, int64_t(-1)}}};
             }});

  r.add({.schema_text = "unsqueeze(Tensor input, int dim) -> Tensor",
         .family = "view",
         .doc = "Inserts a size-1 dim.",
         .kind = OpDef::Kind::View,
         .forward =
             [](const Args& a) { return std::vector<Tensor>{unsqueeze_impl(a.tensor(0), a[1].to_int())}; },
         .backward = [](BackwardContext& c) { return std::vector<Tensor>{c.grad().reshape(c.input_sizes("input"))}; },
         .dtypes = kAllTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor x = ops::sample_uniform({2, 3}, dt, g);
               return std::vector<Sample>{{{x, int64_t(0)}}, {{x, int64_t(2)}}, {{x, int64_t(-1)}},
                                          {{ops::sample_uniform({}, dt, g), int64_t(0)}, "0-d"}};
             }});

  r.add({.schema_text = "flatten(Tensor input, int start_dim=0, int end_dim=-1) -> Tensor",
         .family = "view",
         .doc = "Merges dims start_dim..end_dim into one.",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               if (x.dim() == 0) return std::vector<Tensor>{reshape(x, {1})};
               int64_t s = wrap_dim(a[1].to_int(), x.dim(), "flatten"), e = wrap_dim(a[2].to_int(), x.dim(), "flatten");
               FOUNDRY_CHECK_AS(ValueError, s <= e, "flatten() has invalid args: start_dim cannot come after end_dim");
               Shape shape;
               for (int64_t d = 0; d < s; ++d) shape.push_back(x.size(d));
               int64_t m = 1;
               for (int64_t d = s; d <= e; ++d) m *= x.size(d);
               shape.push_back(m);
               for (int64_t d = e + 1; d < x.dim(); ++d) shape.push_back(x.size(d));
               return std::vector<Tensor>{reshape(x, shape)};
             },
         .dtypes = kAllTypes,
         .samples = shape_samples([](auto& out, const Tensor& x) {
           out.push_back({{x, 0, -1}});
           out.push_back({{x, 1, 2}});
           out.push_back({{x.transpose(0, 1), 0, 1}, "non-viewable"});
         })});

  r.add({.schema_text = "unflatten(Tensor input, int dim, int[] sizes) -> Tensor",
         .family = "view",
         .doc = "Splits one dim into several (one size may be -1).",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               int64_t d = wrap_dim(a[1].to_int(), x.dim(), "unflatten");
               Shape inner = infer_size(a[2].int_list(), x.size(d), "unflatten");
               Shape shape;
               for (int64_t i = 0; i < d; ++i) shape.push_back(x.size(i));
               for (int64_t s : inner) shape.push_back(s);
               for (int64_t i = d + 1; i < x.dim(); ++i) shape.push_back(x.size(i));
               return std::vector<Tensor>{reshape(x, shape)};
             },
         .dtypes = kAllTypes,
         .samples = shape_samples([](auto& out, const Tensor& x) {
           out.push_back({{x, 2, std::vector<int64_t>{2, 2}}});
           out.push_back({{x, 1, std::vector<int64_t>{-1, 1}}});
         })});

  r.add({.schema_text = "narrow(Tensor input, int dim, int start, int length) -> Tensor",
         .family = "view",
         .doc = "The slice [start, start + length) of one dim.",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               const auto [d, start, len] = narrow_range(x, a[1].to_int(), a[2].to_int(), a[3].to_int());
               return std::vector<Tensor>{slice(x, d, start, start + len, 1)};
             },
         .dtypes = kAllTypes,
         .samples = shape_samples([](auto& out, const Tensor& x) {
           out.push_back({{x, 1, 1, 2}});
           out.push_back({{x, -1, -3, 2}});
         })});

  r.add({.schema_text = "select(Tensor input, int dim, int index) -> Tensor",
         .family = "view",
         .doc = "The sub-tensor at one index of one dim (the dim is removed).",
         .kind = OpDef::Kind::View,
         .forward =
             [](const Args& a) { return std::vector<Tensor>{select_impl(a.tensor(0), a[1].to_int(), a[2].to_int())}; },
         .backward =
             [](BackwardContext& c) {
               return std::vector<Tensor>{ops::call1(FOUNDRY_OP("select_backward"),
                                                     {c.grad(), c.input_sizes("input").vec(), c.int_arg("dim"),
                                                      c.int_arg("index")})};
             },
         .dtypes = kAllTypes,
         .samples = shape_samples([](auto& out, const Tensor& x) {
           out.push_back({{x, 0, 1}});
           out.push_back({{x, -1, -2}});
         })});

  r.add({.schema_text = "select_backward(Tensor grad_output, int[] input_sizes, int dim, int index) -> Tensor",
         .family = "view",
         .doc = "Gradient of select: zeros with grad_output written at the index.",
         .forward =
             [](const Args& a) {
               Tensor out = zeros(a[1].int_list(), a.tensor(0).dtype());
               Tensor v = select_impl(out, a[2].to_int(), a[3].to_int());
               copy_into(v, a.tensor(0));
               return std::vector<Tensor>{out};
             },
         .backward =
             [](BackwardContext& c) {
               return std::vector<Tensor>{select(c.grad(), c.int_arg("dim"), c.int_arg("index"))};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{
                   {{ops::sample_uniform({2, 4}, dt, g), std::vector<int64_t>{2, 3, 4}, 1, 2}},
                   {{ops::sample_uniform({2, 3}, dt, g), std::vector<int64_t>{2, 3, 4}, -1, -1}}};
             },
         .ref = "torch.ops.aten.select_backward"});

  r.add({.schema_text = "slice(Tensor input, int dim=0, int? start=None, int? end=None, int step=1) -> Tensor",
         .family = "view",
         .doc = "NumPy slicing start:end:step along one dim; negative steps give negative strides.",
         .kind = OpDef::Kind::View,
         .forward =
             [](const Args& a) {
               auto opt = [](const Value& v) { return v.is_none() ? OptInt() : OptInt(v.to_int()); };
               return std::vector<Tensor>{slice_impl(a.tensor(0), a[1].to_int(), opt(a[2]), opt(a[3]), a[4].to_int())};
             },
         .backward =
             [](BackwardContext& c) {
               return std::vector<Tensor>{ops::call1(FOUNDRY_OP("slice_backward"),
                                                     {c.grad(), c.input_sizes("input").vec(), c.int_arg("dim"),
                                                      c.arg("start"), c.arg("end"), c.int_arg("step")})};
             },
         .dtypes = kAllTypes,
         .samples = shape_samples([](auto& out, const Tensor& x) {
           out.push_back({{x, 1, 0, 2, 1}});
           out.push_back({{x, 2, Value(), Value(), -1}, "negative step"});
           out.push_back({{x, 2, 3, 0, -2}, "negative step with bounds"});
           out.push_back({{x, 0, -1, Value(), 1}});
           out.push_back({{x, 1, 5, 9, 1}, "empty"});
         }),
         .ref = "numpy_slice",
         .notes = "Negative steps follow NumPy (PyTorch rejects them); the reference is computed with flips."});

  r.add({.schema_text =
             "slice_backward(Tensor grad_output, int[] input_sizes, int dim, int? start, int? end, int step) -> Tensor",
         .family = "view",
         .doc = "Gradient of slice: zeros with grad_output written into the slice.",
         .forward =
             [](const Args& a) {
               auto opt = [](const Value& v) { return v.is_none() ? OptInt() : OptInt(v.to_int()); };
               Tensor out = zeros(a[1].int_list(), a.tensor(0).dtype());
               Tensor v = slice_impl(out, a[2].to_int(), opt(a[3]), opt(a[4]), a[5].to_int());
               copy_into(v, a.tensor(0));
               return std::vector<Tensor>{out};
             },
         .backward =
             [](BackwardContext& c) {
               auto opt = [](const Value& v) { return v.is_none() ? OptInt() : OptInt(v.to_int()); };
               return std::vector<Tensor>{
                   slice(c.grad(), c.int_arg("dim"), opt(c.arg("start")), opt(c.arg("end")), c.int_arg("step"))};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{
                   {{ops::sample_uniform({2, 2, 4}, dt, g), std::vector<int64_t>{2, 3, 4}, 1, 0, 2, 1}},
                   {{ops::sample_uniform({2, 3, 2}, dt, g), std::vector<int64_t>{2, 3, 4}, 2, 0, 4, 2}}};
             },
         .ref = "torch.ops.aten.slice_backward"});

  r.add({.schema_text = "diagonal(Tensor input, int offset=0, int dim1=0, int dim2=1) -> Tensor",
         .family = "view",
         .doc = "The diagonal over two dims as a view (appended as the last dim).",
         .kind = OpDef::Kind::View,
         .forward =
             [](const Args& a) {
               return std::vector<Tensor>{diagonal_impl(a.tensor(0), a[1].to_int(), a[2].to_int(), a[3].to_int())};
             },
         .backward =
             [](BackwardContext& c) {
               return std::vector<Tensor>{ops::call1(FOUNDRY_OP("diagonal_backward"),
                                                     {c.grad(), c.input_sizes("input").vec(), c.int_arg("offset"),
                                                      c.int_arg("dim1"), c.int_arg("dim2")})};
             },
         .dtypes = kAllTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor x = ops::sample_uniform({3, 4}, dt, g);
               Tensor y = ops::sample_uniform({2, 3, 3}, dt, g);
               return std::vector<Sample>{{{x, 0, 0, 1}}, {{x, 1, 0, 1}}, {{x, -1, 1, 0}}, {{y, 0, 1, 2}},
                                          {{y, 2, -1, 0}}};
             }});

  r.add({.schema_text = "diagonal_backward(Tensor grad_output, int[] input_sizes, int offset, int dim1, int dim2) -> Tensor",
         .family = "view",
         .doc = "Gradient of diagonal: zeros with grad_output on the diagonal.",
         .forward =
             [](const Args& a) {
               Tensor out = zeros(a[1].int_list(), a.tensor(0).dtype());
               Tensor v = diagonal_impl(out, a[2].to_int(), a[3].to_int(), a[4].to_int());
               copy_into(v, a.tensor(0));
               return std::vector<Tensor>{out};
             },
         .backward =
             [](BackwardContext& c) {
               return std::vector<Tensor>{
                   diagonal(c.grad(), c.int_arg("offset"), c.int_arg("dim1"), c.int_arg("dim2"))};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{{{ops::sample_uniform({3}, dt, g), std::vector<int64_t>{3, 4}, 1, 0, 1}}};
             },
         .ref = "torch.ops.aten.diagonal_backward"});

  r.add({.schema_text = "as_strided(Tensor input, int[] size, int[] stride, int? storage_offset=None) -> Tensor",
         .family = "view",
         .doc = "A view with explicit sizes, strides and offset into the input's storage.",
         .kind = OpDef::Kind::View,
         .saves = {"input"},  // its geometry (storage offset and strides) maps storage back to elements
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               int64_t off = a[3].is_none() ? x.storage_offset() : a[3].to_int();
               return std::vector<Tensor>{view_of(x, a[1].int_list(), a[2].int_list(), off)};
             },
         .backward =
             [](BackwardContext& c) {
               // PyTorch's approach: scatter-add the gradient into a buffer over storage positions
               // (so overlapping views accumulate), then read it back at the input's positions.
               const Tensor& x = c.input("input");
               auto size = c.arg("size").int_list(), stride = c.arg("stride").int_list();
               int64_t off = c.arg("storage_offset").is_none() ? x.storage_offset() : c.int_arg("storage_offset");
               auto positions = [](IntList sz, IntList st, int64_t offset) {
                 Tensor pos = full({}, offset, DType::Int64);
                 for (size_t d = 0; d < sz.size(); ++d) {
                   Shape shp(sz.size(), 1);
                   shp[d] = sz[d];
                   pos = pos + (arange(sz[d]) * st[d]).reshape(shp);
                 }
                 return pos.expand(sz).reshape({-1});
               };
               Tensor view_pos = positions(size, stride, off);
               Tensor in_pos = positions(x.sizes(), x.strides(), x.storage_offset());
               int64_t extent = 1;
               if (view_pos.numel()) extent = std::max(extent, amax(view_pos).item<int64_t>() + 1);
               if (in_pos.numel()) extent = std::max(extent, amax(in_pos).item<int64_t>() + 1);
               Tensor flat = zeros({extent}, c.grad().dtype());
               flat = index_add(flat, 0, view_pos, c.grad().reshape({-1}));
               return std::vector<Tensor>{index_select(flat, 0, in_pos).reshape(x.sizes())};
             },
         .dtypes = kAllTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor x = ops::sample_uniform({12}, dt, g);
               return std::vector<Sample>{
                   {{x, std::vector<int64_t>{3, 2}, std::vector<int64_t>{4, 1}, int64_t(1)}},
                   {{x, std::vector<int64_t>{2, 3}, std::vector<int64_t>{1, 2}, int64_t(0)}, "overlapping"},
               };
             },
         .notes = "Depends on the input's storage layout, so the tests use contiguous inputs only.",
         .layout_sensitive = true});

  r.add({.schema_text = "to(Tensor input, ScalarType dtype) -> Tensor",
         .family = "conversion",
         .doc = "Converts to another dtype (returns the input itself when the dtype matches).",
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               DType dt = a[1].dtype();
               if (x.dtype() == dt) return std::vector<Tensor>{x};
               Tensor out = empty_as(x, dt);
               copy_into(out, x);
               return std::vector<Tensor>{out};
             },
         .backward =
             [](BackwardContext& c) {
               DType in = c.input_dtype("input");
               return std::vector<Tensor>{is_floating(in) ? c.grad().to(in) : Tensor()};
             },
         .dtypes = kAllTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor x = ops::sample_uniform({3, 4}, dt, g, -4, 4);
               return std::vector<Sample>{{{x, DType::Float64}}, {{x, DType::Float32}}, {{x, DType::Int64}, "", false},
                                          {{x, DType::BFloat16}, "", false}, {{x, DType::Float16}, "", false},
                                          {{x, DType::Bool}, "", false}};
             },
         .ref = "lambda input, dtype: input.to(dtype)"});

  r.add({.schema_text = "clone(Tensor input) -> Tensor",
         .family = "conversion",
         .doc = "A contiguous copy.",
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               Tensor out = empty_as(x, x.dtype());
               copy_into(out, x);
               return std::vector<Tensor>{out};
             },
         .backward = [](BackwardContext& c) { return std::vector<Tensor>{c.grad()}; },
         .dtypes = kAllTypes,
         .samples = [](DType dt, Generator& g) {
           std::vector<Sample> out;
           for (const Shape& s : standard_shapes()) out.push_back({{ops::sample_uniform(s, dt, g)}});
           return out;
         }});

  r.add({.schema_text = "contiguous(Tensor input) -> Tensor",
         .family = "conversion",
         .doc = "The input if it is contiguous, else a contiguous copy.",
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               if (x.is_contiguous()) return std::vector<Tensor>{x};
               Tensor out = empty_as(x, x.dtype());
               copy_into(out, x);
               return std::vector<Tensor>{out};
             },
         .backward = [](BackwardContext& c) { return std::vector<Tensor>{c.grad()}; },
         .dtypes = kAllTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{{{ops::sample_uniform({3, 4}, dt, g).t()}}};
             },
         .ref = "lambda input: input.contiguous()"});
}

}  // namespace ops
}  // namespace foundry
