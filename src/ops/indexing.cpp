// Indexing ops: advanced indexing (index / index_put with NumPy's placement rule), gather and
// scatter, index_select/index_add, masks. Element moves are byte copies of `itemsize`, so one
// kernel serves every dtype; only accumulation dispatches on the dtype.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/dtype_dispatch.h"
#include "kernels/cpu/loops.h"
#include "ops/common.h"

namespace foundry {

using ops::Args;
using ops::BackwardContext;
using ops::OpDef;
using ops::Sample;
using ops::Value;
using kernels::opmath_t;

namespace {

Tensor W(double v) { return wrap_scalar(v); }

int64_t checked_index(int64_t i, int64_t size, int64_t dim, const char* op) {
  if (i < -size || i >= size)
    raise<IndexError>("{}: index {} is out of bounds for dimension {} with size {}", op, i, dim, size);
  return i < 0 ? i + size : i;
}

// The geometry of an advanced-indexing operation on x with index tensors at some dims.
struct AdvancedPlan {
  std::vector<int64_t> adv_dims;   // dims of x that are indexed (ascending)
  std::vector<Tensor> idx;         // int64, broadcast to `bshape`, contiguous
  Shape bshape;                    // broadcast index shape
  std::vector<int64_t> rest_dims;  // the other dims of x
  bool adjacent = true;            // adv dims consecutive: result keeps them in place
  Shape result_shape;              // NumPy placement
  Shape canonical_shape;           // bshape + rest sizes
};

// Converts bool masks to integer indices (a k-dim mask fills k dims) and checks dtypes.
std::vector<Tensor> expand_masks(const Tensor& x, const std::vector<Tensor>& indices, const char* op) {
  std::vector<Tensor> out;
  for (const Tensor& t : indices) {
    if (!t.defined()) {
      out.push_back(t);
      continue;
    }
    if (t.dtype() == DType::Bool || t.dtype() == DType::UInt8) {
      size_t d0 = out.size();
      for (int64_t k = 0; k < t.dim(); ++k) {
        FOUNDRY_CHECK_AS(IndexError, int64_t(d0) + k < x.dim() && t.size(k) == x.size(int64_t(d0) + k),
                         "{}: the shape of the mask {} at index {} does not match the shape of the indexed tensor {}",
                         op, shape_str(t.sizes()), k, shape_str(x.sizes()));
      }
      Tensor nz = nonzero(t);  // [n, k]
      for (int64_t k = 0; k < t.dim(); ++k) out.push_back(nz.select(1, k));
      if (t.dim() == 0) {
        // A 0-d mask behaves as a new size-1 dim selected (True) or emptied (False); the caller
        // inserts the dim, here it becomes an index into it.
        out.push_back(t.item<bool>() ? zeros({1}, DType::Int64) : zeros({0}, DType::Int64));
      }
      continue;
    }
    FOUNDRY_CHECK_AS(IndexError, is_integral(t.dtype()),
                     "{}: tensors used as indices must be long, int, byte or bool tensors, got {}", op,
                     dtype_name(t.dtype()));
    out.push_back(t);
  }
  FOUNDRY_CHECK_AS(IndexError, int64_t(out.size()) <= x.dim(), "{}: too many indices for tensor of dimension {} (got {})",
                   op, x.dim(), out.size());
  return out;
}

AdvancedPlan plan_advanced(const Tensor& x, const std::vector<Tensor>& raw, const char* op) {
  std::vector<Tensor> indices = expand_masks(x, raw, op);
  AdvancedPlan p;
  for (size_t d = 0; d < indices.size(); ++d)
    if (indices[d].defined()) p.adv_dims.push_back(int64_t(d));
  FOUNDRY_CHECK_AS(IndexError, !p.adv_dims.empty(), "{}: at least one index must be a tensor", op);
  for (int64_t d : p.adv_dims) p.bshape = broadcast_shapes(p.bshape, indices[size_t(d)].sizes(), op);
  for (int64_t d : p.adv_dims) p.idx.push_back(indices[size_t(d)].to(DType::Int64).expand(p.bshape).contiguous());
  for (int64_t d = 0; d < x.dim(); ++d)
    if (std::find(p.adv_dims.begin(), p.adv_dims.end(), d) == p.adv_dims.end()) p.rest_dims.push_back(d);
  for (size_t i = 1; i < p.adv_dims.size(); ++i) p.adjacent &= p.adv_dims[i] == p.adv_dims[i - 1] + 1;
  p.canonical_shape = p.bshape;
  for (int64_t d : p.rest_dims) p.canonical_shape.push_back(x.size(d));
  if (p.adjacent) {
    for (int64_t d = 0; d < p.adv_dims.front(); ++d) p.result_shape.push_back(x.size(d));
    for (int64_t s : p.bshape) p.result_shape.push_back(s);
    for (int64_t d = p.adv_dims.back() + 1; d < x.dim(); ++d) p.result_shape.push_back(x.size(d));
  } else {
    p.result_shape = p.canonical_shape;
  }
  return p;
}

// Storage offsets (in elements, relative to x's offset) of each index combination; checks bounds.
std::vector<int64_t> element_offsets(const Tensor& x, const AdvancedPlan& p, const char* op) {
  int64_t nb = numel_of(p.bshape);
  std::vector<int64_t> off(size_t(nb), 0);
  for (size_t k = 0; k < p.adv_dims.size(); ++k) {
    int64_t d = p.adv_dims[k];
    const int64_t* ip = p.idx[k].data<int64_t>();
    int64_t size = x.size(d), stride = x.stride(d);
    for (int64_t b = 0; b < nb; ++b) off[size_t(b)] += checked_index(ip[b], size, d, op) * stride;
  }
  return off;
}

// A view of x's non-indexed dims starting at element offset `extra`.
Tensor rest_view(const Tensor& x, const AdvancedPlan& p, int64_t extra) {
  Shape sizes, strides;
  for (int64_t d : p.rest_dims) {
    sizes.push_back(x.size(d));
    strides.push_back(x.stride(d));
  }
  return make_tensor(x.storage(), sizes, strides, x.storage_offset() + extra, x.dtype());
}

// canonical (B first) <-> result (NumPy placement) dim orders.
Tensor canonical_to_result(const Tensor& t, const AdvancedPlan& p) {
  if (!p.adjacent || p.adv_dims.front() == 0) return t;
  int64_t nb = int64_t(p.bshape.size()), first = p.adv_dims.front();
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < first; ++i) perm.push_back(nb + i);
  for (int64_t i = 0; i < nb; ++i) perm.push_back(i);
  for (int64_t i = nb + first; i < t.dim(); ++i) perm.push_back(i);
  return t.permute(perm);
}
Tensor result_to_canonical(const Tensor& t, const AdvancedPlan& p) {
  if (!p.adjacent || p.adv_dims.front() == 0) return t;
  int64_t nb = int64_t(p.bshape.size()), first = p.adv_dims.front();
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < nb; ++i) perm.push_back(first + i);
  for (int64_t i = 0; i < first; ++i) perm.push_back(i);
  for (int64_t i = first + nb; i < t.dim(); ++i) perm.push_back(i);
  return t.permute(perm);
}

Tensor index_forward(const Tensor& x, const std::vector<Tensor>& indices) {
  AdvancedPlan p = plan_advanced(x, indices, "index");
  std::vector<int64_t> off = element_offsets(x, p, "index");
  Tensor out = empty(p.canonical_shape, x.dtype());
  int64_t nb = int64_t(off.size());
  Tensor probe = rest_view(x, p, 0);
  int64_t rest_n = probe.numel();
  Tensor out_rows = out.view({nb, rest_n});
  const int64_t isz = x.element_size();
  if (rest_n == 1) {
    const char* base = static_cast<const char*>(x.storage()->data()) + x.storage_offset() * isz;
    char* o = static_cast<char*>(out.data_ptr());
    parallel_for(0, nb, kGrainSize, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) std::memcpy(o + i * isz, base + off[size_t(i)] * isz, size_t(isz));
    });
  } else if (rest_n > 0) {
    parallel_for(0, nb, std::max<int64_t>(1, kGrainSize / rest_n), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        Tensor dst = out_rows.select(0, i).view(probe.sizes());
        copy_into(dst, rest_view(x, p, off[size_t(i)]));
      }
    });
  }
  return canonical_to_result(out, p).contiguous();
}

// Writes (or adds) values into x (in place) at the indexed positions.
void index_put_impl(Tensor& x, const std::vector<Tensor>& indices, const Tensor& values, bool accumulate) {
  AdvancedPlan p = plan_advanced(x, indices, "index_put");
  std::vector<int64_t> off = element_offsets(x, p, "index_put");
  FOUNDRY_CHECK_AS(ValueError, values.dim() <= int64_t(p.result_shape.size()) ||
                                   numel_of(values.sizes()) == numel_of(p.result_shape),
                   "index_put: shape mismatch: value tensor of shape {} cannot be broadcast to indexing result of shape {}",
                   shape_str(values.sizes()), shape_str(p.result_shape));
  Shape b = broadcast_shapes(values.sizes(), p.result_shape, "index_put");
  FOUNDRY_CHECK_AS(ValueError, b == p.result_shape,
                   "index_put: shape mismatch: value tensor of shape {} cannot be broadcast to indexing result of shape {}",
                   shape_str(values.sizes()), shape_str(p.result_shape));
  Tensor v = result_to_canonical(values.to(x.dtype()).expand(p.result_shape), p).contiguous();
  int64_t nb = int64_t(off.size());
  Tensor probe = rest_view(x, p, 0);
  Tensor vrows = v.view({nb, probe.numel()});
  x.impl()->storage->bump_version();
  if (!accumulate) {
    // Sequential so that, for repeated indices, the last write wins (as NumPy).
    for (int64_t i = 0; i < nb; ++i) {
      Tensor dst = rest_view(x, p, off[size_t(i)]);
      copy_into(dst, vrows.select(0, i).view(probe.sizes()));
    }
    return;
  }
  kernels::visit_numeric(x.dtype(), "index_put", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < nb; ++i) {
      Tensor dst = rest_view(x, p, off[size_t(i)]);
      Tensor src = vrows.select(0, i).view(probe.sizes());
      kernels::StridedLoop loop({&dst, &src});
      kernels::for_each_run(loop, int64_t(1) << 40, [&](char** d, const int64_t* s, int64_t n) {
        for (int64_t k = 0; k < n; ++k) {
          T* o = reinterpret_cast<T*>(d[0] + k * s[0]);
          const T* in = reinterpret_cast<const T*>(d[1] + k * s[1]);
          if constexpr (std::is_same_v<T, bool>) *o = *o || *in;
          else *o = T(opmath_t<T>(*o) + opmath_t<T>(*in));
        }
      });
    }
  });
}

// gather/scatter share one walk: for each element position of `index`, the element of `self`
// along `dim` given by the index and the same position elsewhere.
template <typename F>
void walk_index(const Tensor& index, int64_t dim, int64_t dim_size, const char* op, F fn) {
  Tensor idx = index.contiguous();
  const int64_t* ip = idx.data<int64_t>();
  int64_t n = idx.numel();
  Shape sizes(idx.sizes());
  std::vector<int64_t> pos(sizes.size(), 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t i = ip[e];
    if (i < -dim_size || i >= dim_size)
      raise<IndexError>("{}: index {} is out of bounds for dimension {} with size {}", op, i, dim, dim_size);
    if (i < 0) i += dim_size;
    fn(pos, i);
    for (int64_t d = int64_t(sizes.size()) - 1; d >= 0; --d) {
      if (++pos[size_t(d)] < sizes[size_t(d)]) break;
      pos[size_t(d)] = 0;
    }
  }
}

void check_gather_shapes(const Tensor& self, int64_t dim, const Tensor& index, const Tensor* src, const char* op) {
  FOUNDRY_CHECK_AS(TypeError, index.dtype() == DType::Int64, "{}(): expected dtype int64 for index, got {}", op,
                   dtype_name(index.dtype()));
  FOUNDRY_CHECK_AS(ValueError, index.dim() == self.dim() || (index.dim() <= 1 && self.dim() <= 1),
                   "{}(): index tensor must have the same number of dimensions as input tensor ({} vs {})", op,
                   index.dim(), self.dim());
  for (int64_t d = 0; d < index.dim(); ++d) {
    if (d != dim)
      FOUNDRY_CHECK_AS(ValueError, index.size(d) <= self.size(d),
                       "{}(): size of index {} does not fit input {} at dimension {}", op, shape_str(index.sizes()),
                       shape_str(self.sizes()), d);
    if (src)
      FOUNDRY_CHECK_AS(ValueError, index.size(d) <= src->size(d),
                       "{}(): size of index {} does not fit src {} at dimension {}", op, shape_str(index.sizes()),
                       shape_str(src->sizes()), d);
  }
}

int64_t element_offset(const Tensor& t, const std::vector<int64_t>& pos, int64_t dim, int64_t i) {
  int64_t o = t.storage_offset();
  for (size_t d = 0; d < pos.size(); ++d) o += (int64_t(d) == dim ? i : pos[d]) * t.stride(int64_t(d));
  return o;
}

Tensor gather_impl(const Tensor& self, int64_t dim, const Tensor& index) {
  dim = wrap_dim(dim, std::max<int64_t>(self.dim(), 1), "gather");
  check_gather_shapes(self, dim, index, nullptr, "gather");
  Tensor out = empty(index.sizes(), self.dtype());
  const int64_t isz = self.element_size();
  const char* base = static_cast<const char*>(self.storage()->data());
  char* o = static_cast<char*>(out.data_ptr());
  int64_t k = 0;
  int64_t dsize = self.dim() == 0 ? 1 : self.size(dim);
  walk_index(index, dim, dsize, "gather", [&](const std::vector<int64_t>& pos, int64_t i) {
    std::memcpy(o + (k++) * isz, base + element_offset(self, pos, dim, i) * isz, size_t(isz));
  });
  return out;
}

// reduce: 0 = assign, 1 = sum, 2 = prod, 3 = amax, 4 = amin. Accumulates into out (a copy of self).
void scatter_impl(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, int reduce, const char* op) {
  check_gather_shapes(out, dim, index, &src, op);
  Tensor s = src.to(out.dtype());
  kernels::visit_numeric(out.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* base = static_cast<T*>(out.storage()->data());
    const T* sbase = static_cast<const T*>(s.storage()->data());
    int64_t dsize = out.dim() == 0 ? 1 : out.size(dim);
    walk_index(index, dim, dsize, op, [&](const std::vector<int64_t>& pos, int64_t i) {
      T& dst = base[element_offset(out, pos, dim, i)];
      int64_t so = s.storage_offset();
      for (size_t d = 0; d < pos.size(); ++d) so += pos[d] * s.stride(int64_t(d));
      T v = sbase[so];
      using C = opmath_t<T>;
      switch (reduce) {
        case 0: dst = v; break;
        case 1:
          if constexpr (std::is_same_v<T, bool>) dst = dst || v;
          else dst = T(C(dst) + C(v));
          break;
        case 2:
          if constexpr (std::is_same_v<T, bool>) dst = dst && v;
          else dst = T(C(dst) * C(v));
          break;
        case 3: if (C(v) > C(dst) || v != v) dst = v; break;
        case 4: if (C(v) < C(dst) || v != v) dst = v; break;
      }
    });
  });
}

std::vector<Sample> gather_samples(DType dt, Generator& g) {
  Tensor x = ops::sample_uniform({3, 4}, dt, g);
  return std::vector<Sample>{{{x, int64_t(0), ops::sample_index({2, 4}, 3, g)}},
                             {{x, int64_t(1), ops::sample_index({3, 6}, 4, g)}},
                             {{x, int64_t(-1), ops::sample_index({2, 2}, 4, g)}}};
}

}  // namespace

Tensor nonzero_impl(const Tensor& x);

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  return ops::call1(FOUNDRY_OP("gather"), {x, dim, index});
}
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return ops::call1(FOUNDRY_OP("scatter"), {x, dim, index, src});
}
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return ops::call1(FOUNDRY_OP("scatter_add"), {x, dim, index, src});
}
Tensor scatter_reduce(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce,
                      bool include_self) {
  return ops::call1(FOUNDRY_OP("scatter_reduce"), {x, dim, index, src, reduce, include_self});
}
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  return ops::call1(FOUNDRY_OP("index_select"), {x, dim, index});
}
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, const Scalar& alpha) {
  return ops::call1(FOUNDRY_OP("index_add"), {x, dim, index, source, alpha});
}
Tensor index(const Tensor& x, const std::vector<Tensor>& indices) {
  return ops::call1(FOUNDRY_OP("index"), {x, indices});
}
Tensor index_put(const Tensor& x, const std::vector<Tensor>& indices, const Tensor& values, bool accumulate) {
  return ops::call1(FOUNDRY_OP("index_put"), {x, indices, values, accumulate});
}
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value) {
  return ops::call1(FOUNDRY_OP("masked_fill"), {x, mask, value});
}
Tensor masked_select(const Tensor& x, const Tensor& mask) { return ops::call1(FOUNDRY_OP("masked_select"), {x, mask}); }
Tensor take_along_dim(const Tensor& x, const Tensor& indices, OptInt dim) {
  return ops::call1(FOUNDRY_OP("take_along_dim"), {x, indices, dim});
}
Tensor nonzero(const Tensor& x) { return ops::call1(FOUNDRY_OP("nonzero"), {x}); }
Tensor one_hot(const Tensor& x, int64_t num_classes) { return ops::call1(FOUNDRY_OP("one_hot"), {x, num_classes}); }

// ---- NumPy-style indexing on Tensor ---------------------------------------------------------

namespace {

struct Basic {
  Tensor view;                  // after ints, slices, new axes
  std::vector<Tensor> advanced; // per dim of `view`: index tensor or undefined
  bool has_advanced = false;
};

Basic apply_basic(const Tensor& self, const std::vector<TensorIndex>& raw) {
  auto is_mask = [](const Tensor& t) { return t.dtype() == DType::Bool || t.dtype() == DType::UInt8; };
  // Dims consumed, to expand the Ellipsis into full slices.
  int64_t consumed = 0, ellipses = 0;
  bool any_tensor = false;
  for (const TensorIndex& t : raw) {
    switch (t.kind) {
      case TensorIndex::Kind::Integer:
      case TensorIndex::Kind::Slice: consumed += 1; break;
      case TensorIndex::Kind::Tensor:
        any_tensor = true;
        consumed += is_mask(t.tensor) ? t.tensor.dim() : 1;
        break;
      case TensorIndex::Kind::Ellipsis: ellipses++; break;
      default: break;
    }
  }
  FOUNDRY_CHECK_AS(IndexError, ellipses <= 1, "an index can only have a single ellipsis ('...')");
  FOUNDRY_CHECK_AS(IndexError, consumed <= self.dim(), "too many indices for tensor of dimension {} (got {})",
                   self.dim(), consumed);
  std::vector<TensorIndex> indices;
  for (const TensorIndex& t : raw) {
    if (t.kind == TensorIndex::Kind::Ellipsis) {
      for (int64_t k = 0; k < self.dim() - consumed; ++k) indices.push_back(Slice());
    } else {
      indices.push_back(t);
    }
  }
  // Walk the entries. `advanced` gets one entry per consumed dim of `view` (a k-dim mask is one
  // entry covering k dims, as `index` expects); NumPy makes integers advanced when any array
  // index is present, which decides where the result dims go.
  Basic b;
  Tensor v = self;
  int64_t dim = 0;
  for (const TensorIndex& t : indices) {
    switch (t.kind) {
      case TensorIndex::Kind::Integer:
        if (any_tensor) {
          checked_index(t.integer, v.size(dim), dim, "index");
          b.advanced.push_back(scalar_tensor(t.integer, DType::Int64));
          b.has_advanced = true;
          dim++;
        } else {
          v = v.select(dim, t.integer);
        }
        break;
      case TensorIndex::Kind::Slice:
        v = v.slice(dim, t.slice.start, t.slice.stop, t.slice.step.value_or(1));
        b.advanced.push_back(Tensor());
        dim++;
        break;
      case TensorIndex::Kind::NewAxis:
        v = v.unsqueeze(dim);
        b.advanced.push_back(Tensor());
        dim++;
        break;
      case TensorIndex::Kind::Boolean:
        v = v.unsqueeze(dim);
        b.advanced.push_back(t.boolean ? zeros({1}, DType::Int64) : zeros({0}, DType::Int64));
        b.has_advanced = true;
        dim++;
        break;
      case TensorIndex::Kind::Tensor:
        b.has_advanced = true;
        if (is_mask(t.tensor) && t.tensor.dim() == 0) {
          v = v.unsqueeze(dim);
          b.advanced.push_back(t.tensor.item<bool>() ? zeros({1}, DType::Int64) : zeros({0}, DType::Int64));
          dim++;
        } else {
          b.advanced.push_back(t.tensor);
          dim += is_mask(t.tensor) ? t.tensor.dim() : 1;
        }
        break;
      case TensorIndex::Kind::Ellipsis: break;
    }
  }
  b.view = v;
  return b;
}

}  // namespace

Tensor Tensor::index(const std::vector<TensorIndex>& indices) const {
  Basic b = apply_basic(*this, indices);
  if (!b.has_advanced) return b.view;
  return foundry::index(b.view, b.advanced);
}

Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, const Tensor& value) {
  Basic b = apply_basic(*this, indices);
  bool record = autograd::is_grad_enabled() && (requires_grad() || value.requires_grad());
  if (!b.has_advanced && !record) {
    copy_into(b.view, value);
    return *this;
  }
  if (!b.has_advanced) {
    // Autograd: express the basic selection as index tensors on this tensor itself, so the
    // write is one recorded index_put on the base instead of a copy into a view.
    Tensor pos = arange(numel(), DType::Int64).reshape(sizes());
    Basic pb = apply_basic(pos, indices);
    Tensor flat_idx = pb.view.reshape({-1});
    Tensor flat = foundry::reshape(*this, {-1});
    Tensor v = value.to(dtype()).expand(pb.view.sizes()).reshape({-1});
    Tensor r = foundry::index_put(flat, {flat_idx}, v, false).reshape(sizes());
    return foundry::copy_(*this, r);
  }
  if (record) {
    // Advanced on a view of self: map the view's elements back to positions in self.
    Tensor pos = arange(numel(), DType::Int64).reshape(sizes());
    Basic pb = apply_basic(pos, indices);
    Tensor sel = foundry::index(pb.view, pb.advanced).reshape({-1});
    Tensor flat = foundry::reshape(*this, {-1});
    Tensor target_shape = foundry::index(pb.view, pb.advanced);
    Tensor v = value.to(dtype()).expand(target_shape.sizes()).reshape({-1});
    Tensor r = foundry::index_put(flat, {sel}, v, false).reshape(sizes());
    return foundry::copy_(*this, r);
  }
  index_put_impl(b.view, b.advanced, value, false);
  return *this;
}

Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, const Scalar& value) {
  return index_put_(indices, scalar_tensor(value, dtype()));
}

namespace ops {

void register_indexing_ops(Registry& r) {
  r.add({.schema_text = "index(Tensor input, Tensor?[] indices) -> Tensor",
         .family = "indexing",
         .doc = "Advanced indexing x[i0, i1, ...] with index tensors (None = full slice) and bool masks; "
                "NumPy places the broadcast index dims where the (adjacent) indexed dims were, else first.",
         .saves = {"indices"},
         .forward = [](const Args& a) { return std::vector<Tensor>{index_forward(a.tensor(0), a[1].tensor_list())}; },
         .backward =
             [](BackwardContext& c) {
               Tensor z = zeros(c.input_sizes("input"), c.grad().dtype());
               std::vector<Tensor> out = {index_put(z, c.arg("indices").tensor_list(), c.grad(), true)};
               out.resize(1 + c.arg("indices").tensor_list().size());
               return out;
             },
         .dtypes = kAllTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor x = sample_uniform({4, 5, 3}, dt, g);
               Tensor mask = sample_uniform({4, 5}, DType::Bool, g);
               return std::vector<Sample>{
                   {{x, std::vector<Tensor>{sample_index({2, 3}, 4, g)}}},
                   {{x, std::vector<Tensor>{Tensor(), sample_index({3}, 5, g)}}, "middle dim"},
                   {{x, std::vector<Tensor>{sample_index({3}, 4, g), Tensor(), sample_index({3}, 3, g)}},
                    "non-adjacent: index dims first"},
                   {{x, std::vector<Tensor>{Tensor(), sample_index({2, 1}, 5, g), sample_index({2}, 3, g)}},
                    "adjacent broadcast"},
                   {{x, std::vector<Tensor>{mask}}, "bool mask"},
                   {{x, std::vector<Tensor>{sample_uniform({2}, DType::Int64, g, -4, -1)}}, "negative indices"},
               };
             },
         .ref = "lambda input, indices: input[tuple(slice(None) if i is None else i for i in indices)]"});

  r.add({.schema_text = "index_put(Tensor input, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor",
         .family = "indexing",
         .doc = "A copy of input with x[indices] = values (or += with accumulate; repeated indices add up).",
         .saves = {"indices"},
         .forward =
             [](const Args& a) {
               Tensor out = clone(a.tensor(0));
               index_put_impl(out, a[1].tensor_list(), a.tensor(2), a[3].to_bool());
               return std::vector<Tensor>{out};
             },
         .backward =
             [](BackwardContext& c) {
               const auto& idx = c.arg("indices").tensor_list();
               Tensor gi;
               if (c.needs_grad("input"))
                 gi = c.bool_arg("accumulate") ? c.grad() : index_put(c.grad(), idx, zeros({}, c.grad().dtype()), false);
               Tensor gv;
               if (c.needs_grad("values")) gv = sum_to(index(c.grad(), idx), c.input_sizes("values"));
               std::vector<Tensor> out(2 + idx.size());
               out[0] = gi;
               out.back() = gv;
               return out;
             },
         .dtypes = kNumericTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor x = sample_uniform({4, 5}, dt, g);
               Tensor uniq = tensor<int64_t>({3, 0, 2}, {3});
               return std::vector<Sample>{
                   {{x, std::vector<Tensor>{uniq}, sample_uniform({3, 5}, dt, g), false}},
                   {{x, std::vector<Tensor>{Tensor(), tensor<int64_t>({4, 1}, {2})}, sample_uniform({4, 2}, dt, g), false}},
                   {{x, std::vector<Tensor>{sample_index({6}, 4, g), sample_index({6}, 5, g)}, sample_uniform({6}, dt, g), true},
                    "accumulate with repeats"},
                   {{x, std::vector<Tensor>{uniq}, sample_uniform({5}, dt, g), false}, "broadcast values"},
               };
             },
         .ref = "torch.index_put"});

  r.add({.schema_text = "gather(Tensor input, int dim, Tensor index) -> Tensor",
         .family = "indexing",
         .doc = "out[i][j] = input[index[i][j]][j] (dim 0); index has input's rank.",
         .saves = {"index"},
         .forward =
             [](const Args& a) { return std::vector<Tensor>{gather_impl(a.tensor(0), a[1].to_int(), a.tensor(2))}; },
         .backward =
             [](BackwardContext& c) {
               Tensor z = zeros(c.input_sizes("input"), c.grad().dtype());
               return std::vector<Tensor>{scatter_add(z, c.int_arg("dim"), c.input("index"), c.grad()), Tensor()};
             },
         .dtypes = kAllTypes,
         .samples = gather_samples});

  auto scatter_forward = [](int reduce) {
    return [reduce](const Args& a) {
      Tensor out = clone(a.tensor(0));
      int64_t dim = wrap_dim(a[1].to_int(), std::max<int64_t>(out.dim(), 1), "scatter");
      scatter_impl(out, dim, a.tensor(2), a.tensor(3), reduce, reduce == 0 ? "scatter" : "scatter_add");
      return std::vector<Tensor>{out};
    };
  };
  auto scatter_samples = [](DType dt, Generator& g) {
    Tensor x = sample_uniform({3, 5}, dt, g);
    Tensor idx0 = tensor<int64_t>({0, 2, 1, 1, 2, 0, 0, 2}, {2, 4});  // distinct along dim 0 per column
    Tensor idx1 = tensor<int64_t>({4, 0, 2, 1, 3, 0}, {2, 3});        // distinct along dim 1 per row
    return std::vector<Sample>{{{x, int64_t(0), idx0, sample_uniform({2, 4}, dt, g)}},
                               {{x, int64_t(1), idx1, sample_uniform({3, 4}, dt, g)}}};
  };
  r.add({.schema_text = "scatter(Tensor input, int dim, Tensor index, Tensor src) -> Tensor",
         .family = "indexing",
         .doc = "A copy of input with out[index[i][j]][j] = src[i][j] (dim 0).",
         .saves = {"index"},
         .forward = scatter_forward(0),
         .backward =
             [](BackwardContext& c) {
               int64_t dim = c.int_arg("dim");
               const Tensor& idx = c.input("index");
               Tensor gi = c.needs_grad("input") ? scatter(c.grad(), dim, idx, zeros(idx.sizes(), c.grad().dtype())) : Tensor();
               Tensor gs = c.needs_grad("src") ? gather(c.grad(), dim, idx) : Tensor();
               if (gs.defined() && !(Shape(gs.sizes()) == c.input_sizes("src"))) {
                 gs = pad(gs, [&] {
                   std::vector<int64_t> p;
                   for (int64_t d = gs.dim() - 1; d >= 0; --d) {
                     p.push_back(0);
                     p.push_back(c.input_sizes("src")[size_t(d)] - gs.size(d));
                   }
                   return p;
                 }());
               }
               return std::vector<Tensor>{gi, Tensor(), gs};
             },
         .dtypes = kNumericTypes,
         .samples = scatter_samples});
  r.add({.schema_text = "scatter_add(Tensor input, int dim, Tensor index, Tensor src) -> Tensor",
         .family = "indexing",
         .doc = "A copy of input with out[index[i][j]][j] += src[i][j] (dim 0); repeated indices add up.",
         .saves = {"index"},
         .forward = scatter_forward(1),
         .backward =
             [](BackwardContext& c) {
               Tensor gs;
               if (c.needs_grad("src")) {
                 gs = gather(c.grad(), c.int_arg("dim"), c.input("index"));
                 if (!(Shape(gs.sizes()) == c.input_sizes("src"))) {
                   std::vector<int64_t> p;
                   for (int64_t d = gs.dim() - 1; d >= 0; --d) {
                     p.push_back(0);
                     p.push_back(c.input_sizes("src")[size_t(d)] - gs.size(d));
                   }
                   gs = pad(gs, p);
                 }
               }
               return std::vector<Tensor>{c.grad(), Tensor(), gs};
             },
         .dtypes = kNumericTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor x = sample_uniform({3, 5}, dt, g);
               return std::vector<Sample>{{{x, int64_t(0), sample_index({4, 5}, 3, g), sample_uniform({4, 5}, dt, g)}},
                                          {{x, int64_t(1), sample_index({3, 2}, 5, g), sample_uniform({3, 3}, dt, g)}}};
             }});

  r.add({.schema_text =
             "scatter_reduce(Tensor input, int dim, Tensor index, Tensor src, str reduce, *, bool include_self=True) -> Tensor",
         .family = "indexing",
         .doc = "Scatter with reduction 'sum', 'prod', 'mean', 'amax' or 'amin' over repeated indices.",
         .saves = {"input", "index", "src"},
         .saves_outputs = {0},
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               int64_t dim = wrap_dim(a[1].to_int(), std::max<int64_t>(x.dim(), 1), "scatter_reduce");
               const Tensor& idx = a.tensor(2);
               const Tensor& src = a.tensor(3);
               const std::string& red = a[4].str();
               bool include_self = a[5].to_bool();
               int code = red == "sum" ? 1 : red == "prod" ? 2 : red == "mean" ? 1 : red == "amax" ? 3 : red == "amin" ? 4 : -1;
               FOUNDRY_CHECK_AS(ValueError, code > 0,
                                "scatter_reduce: reduce argument must be either sum, prod, mean, amax or amin, got {}", red);
               Tensor out = clone(x);
               if (!include_self) {
                 // Positions that receive values start from the reduction's identity.
                 Tensor touched = zeros(x.sizes(), DType::Bool);
                 scatter_impl(touched, dim, idx, ones(idx.sizes(), DType::Bool), 0, "scatter_reduce");
                 double identity = code == 2 ? 1.0 : code == 3 ? -INFINITY : code == 4 ? INFINITY : 0.0;
                 if (!is_floating(x.dtype()) && code >= 3) identity = code == 3 ? -9.2e18 : 9.2e18;
                 Tensor idv = full({}, is_floating(x.dtype()) ? Scalar(identity) : Scalar(int64_t(identity)), x.dtype());
                 out = where(touched, idv, out);
               }
               scatter_impl(out, dim, idx, src, code, "scatter_reduce");
               if (red == "mean") {
                 Tensor count = include_self ? ones(x.sizes(), x.dtype()) : zeros(x.sizes(), x.dtype());
                 scatter_impl(count, dim, idx, ones(idx.sizes(), x.dtype()), 1, "scatter_reduce");
                 count = where(count == Scalar(0), ones({}, x.dtype()), count);
                 out = is_floating(x.dtype()) ? out / count : div(out, count, std::string("floor"));
               }
               return std::vector<Tensor>{out};
             },
         .backward =
             [](BackwardContext& c) {
               const Tensor& x = c.input("input");
               const Tensor& idx = c.input("index");
               const Tensor& src = c.input("src");
               int64_t dim = c.int_arg("dim");
               std::string red = c.arg("reduce").str();
               bool include_self = c.bool_arg("include_self");
               const Tensor& g = c.grad();
               Tensor out = c.output(0);
               Tensor gi, gs;
               if (red == "sum") {
                 gi = include_self ? g : scatter(g, dim, idx, zeros(idx.sizes(), g.dtype()));
                 gs = gather(g, dim, idx);
               } else if (red == "mean") {
                 Tensor count = include_self ? ones(x.sizes(), g.dtype()) : zeros(x.sizes(), g.dtype());
                 count = scatter_add(count, dim, idx, ones(idx.sizes(), g.dtype()));
                 count = where(count == Scalar(0), ones({}, g.dtype()), count);
                 Tensor gc = g / count;
                 gi = include_self ? gc : scatter(gc, dim, idx, zeros(idx.sizes(), g.dtype()));
                 gs = gather(gc, dim, idx);
               } else if (red == "amax" || red == "amin") {
                 // Ties share the gradient evenly (PyTorch's rule).
                 Tensor self_hit = include_self ? (x == out).to(g.dtype()) : zeros(x.sizes(), g.dtype());
                 Tensor src_hit = (src == gather(out, dim, idx)).to(g.dtype());
                 Tensor count = scatter_add(self_hit, dim, idx, src_hit);
                 Tensor gc = g / where(count == Scalar(0), ones({}, g.dtype()), count);
                 gi = self_hit * gc;
                 gs = src_hit * gather(gc, dim, idx);
               } else {
                 // prod: the product of the others = out / value, which needs nonzero values.
                 if (any(x == Scalar(0)).item<bool>() || any(src == Scalar(0)).item<bool>())
                   raise<NotImplementedError>(
                       "scatter_reduce(reduce='prod') backward with zeros in input or src is not supported");
                 Tensor go = g * out;
                 gi = include_self ? go / x : scatter(g, dim, idx, zeros(idx.sizes(), g.dtype()));
                 gs = gather(go, dim, idx) / src;
               }
               return std::vector<Tensor>{c.needs_grad("input") ? gi : Tensor(), Tensor(),
                                          c.needs_grad("src") ? gs : Tensor()};
             },
         .dtypes = {DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64, DType::Float16, DType::BFloat16, DType::Float32, DType::Float64},
         .samples =
             [](DType dt, Generator& g) {
               Tensor x = sample_uniform({3, 4}, dt, g, 0.5, 2.0);
               Tensor idx = tensor<int64_t>({0, 1, 0, 2, 2, 1, 0, 0, 1, 1, 2, 0, 2, 0, 1, 1, 0, 2, 2, 1}, {5, 4});
               Tensor src = sample_uniform({5, 4}, dt, g, 0.5, 2.0);
               std::vector<Sample> s;
               for (const char* red : {"sum", "prod", "mean", "amax", "amin"})
                 for (bool inc : {true, false}) s.push_back({{x, int64_t(0), idx, src, red, inc}});
               return s;
             }});

  r.add({.schema_text = "index_select(Tensor input, int dim, Tensor index) -> Tensor",
         .family = "indexing",
         .doc = "Entries of input along dim at the positions of a 1-D index.",
         .saves = {"index"},
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               const Tensor& idx = a.tensor(2);
               FOUNDRY_CHECK_AS(IndexError, idx.dim() <= 1, "index_select(): index must be 0-d or 1-d, got {} dims",
                                idx.dim());
               FOUNDRY_CHECK_AS(TypeError, is_integral(idx.dtype()), "index_select(): expected an integer index, got {}",
                                dtype_name(idx.dtype()));
               int64_t dim = wrap_dim(a[1].to_int(), std::max<int64_t>(x.dim(), 1), "index_select");
               if (x.dim() == 0) return std::vector<Tensor>{index_forward(x.reshape({1}), {idx.reshape({-1})}).reshape(idx.sizes())};
               std::vector<Tensor> ind(size_t(dim) + 1);
               ind[size_t(dim)] = idx.reshape({-1});
               return std::vector<Tensor>{index_forward(x, ind)};
             },
         .backward =
             [](BackwardContext& c) {
               Tensor z = zeros(c.input_sizes("input"), c.grad().dtype());
               if (z.dim() == 0) return std::vector<Tensor>{c.grad().sum().reshape({}), Tensor()};
               return std::vector<Tensor>{index_add(z, c.int_arg("dim"), c.input("index").reshape({-1}), c.grad()), Tensor()};
             },
         .dtypes = kAllTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor x = sample_uniform({4, 5}, dt, g);
               return std::vector<Sample>{{{x, int64_t(0), sample_index({6}, 4, g)}},
                                          {{x, int64_t(1), sample_index({3}, 5, g)}},
                                          {{x, int64_t(-1), sample_index({0}, 5, g)}, "empty index"}};
             }});

  r.add({.schema_text = "index_add(Tensor input, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor",
         .family = "indexing",
         .doc = "A copy of input with source added at the index positions along dim (repeats add up).",
         .saves = {"index"},
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               int64_t dim = wrap_dim(a[1].to_int(), std::max<int64_t>(x.dim(), 1), "index_add");
               Tensor idx = a.tensor(2).reshape({-1});
               Tensor src = a.tensor(3);
               FOUNDRY_CHECK_AS(ValueError, src.dim() == x.dim() || (x.dim() == 0 && src.dim() <= 1),
                                "index_add(): source must have the same number of dimensions as input");
               if (x.dim() > 0)
                 FOUNDRY_CHECK_AS(ValueError, src.size(dim) == idx.numel(),
                                  "index_add(): number of indices ({}) should be equal to source.size(dim) ({})",
                                  idx.numel(), src.size(dim));
               Scalar alpha = a[4].scalar();
               Tensor s = alpha.to_double() == 1.0 ? src : src * alpha;
               Tensor out = clone(x);
               if (x.dim() == 0) {
                 Tensor o1 = out.view({1});
                 index_put_impl(o1, {idx}, s.reshape({-1}), true);
                 return std::vector<Tensor>{out};
               }
               std::vector<Tensor> ind(size_t(dim) + 1);
               ind[size_t(dim)] = idx;
               // index_put places the index dim first when dim > 0 only if non-adjacent; a single
               // index tensor is adjacent, so the values keep source's layout.
               index_put_impl(out, ind, s, true);
               return std::vector<Tensor>{out};
             },
         .backward =
             [](BackwardContext& c) {
               Tensor gs;
               if (c.needs_grad("source")) {
                 Shape in = c.input_sizes("input");
                 gs = in.empty() ? c.grad().reshape({1}).expand(c.input_sizes("source"))
                                 : index_select(c.grad(), c.int_arg("dim"), c.input("index"));
                 Scalar alpha = c.arg("alpha").scalar();
                 if (alpha.to_double() != 1.0) gs = gs * alpha;
                 gs = gs.reshape(c.input_sizes("source"));
               }
               return std::vector<Tensor>{c.grad(), Tensor(), gs};
             },
         .dtypes = kNumericTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor x = sample_uniform({4, 3}, dt, g);
               return std::vector<Sample>{{{x, int64_t(0), sample_index({5}, 4, g), sample_uniform({5, 3}, dt, g), Scalar(1)}},
                                          {{x, int64_t(1), sample_index({2}, 3, g), sample_uniform({4, 2}, dt, g), Scalar(2)}}};
             }});

  r.add({.schema_text = "masked_fill(Tensor input, Tensor mask, Scalar value) -> Tensor",
         .family = "indexing",
         .doc = "input with value where mask is true (mask broadcasts).",
         .saves = {"mask"},
         .prepare =
             [](Args& a) {
               Tensor& m = a[1].tensor();
               FOUNDRY_CHECK_AS(TypeError, m.dtype() == DType::Bool, "masked_fill only supports boolean masks, got {}",
                                dtype_name(m.dtype()));
               Tensor& x = a[0].tensor();
               Shape s = broadcast_shapes(x.sizes(), m.sizes(), "masked_fill");
               if (!(Shape(x.sizes()) == s)) x = x.expand(s);
               if (!(Shape(m.sizes()) == s)) m = m.expand(s);
             },
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               return std::vector<Tensor>{where(a.tensor(1), full({}, a[2].scalar(), x.dtype()), x)};
             },
         .backward =
             [](BackwardContext& c) {
               return std::vector<Tensor>{where(c.input("mask"), W(0.0), c.grad()), Tensor()};
             },
         .dtypes = kNumericTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor x = sample_uniform({3, 4}, dt, g);
               return std::vector<Sample>{{{x, sample_uniform({3, 4}, DType::Bool, g), Scalar(-1)}},
                                          {{x, sample_uniform({4}, DType::Bool, g), Scalar(2)}, "broadcast mask"}};
             }});

  r.add({.schema_text = "masked_select(Tensor input, Tensor mask) -> Tensor",
         .family = "indexing",
         .doc = "1-D tensor of the elements where mask (broadcast) is true.",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               Tensor x = a.tensor(0), m = a.tensor(1);
               FOUNDRY_CHECK_AS(TypeError, m.dtype() == DType::Bool, "masked_select: expected a bool mask, got {}",
                                dtype_name(m.dtype()));
               Shape s = broadcast_shapes(x.sizes(), m.sizes(), "masked_select");
               x = x.expand(s);
               m = m.expand(s);
               if (x.dim() == 0) {
                 x = x.reshape({1});
                 m = m.reshape({1});
               }
               return std::vector<Tensor>{index(x, {m})};
             },
         .dtypes = kNumericTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor x = sample_uniform({3, 4}, dt, g);
               return std::vector<Sample>{{{x, sample_uniform({3, 4}, DType::Bool, g)}},
                                          {{x, sample_uniform({4}, DType::Bool, g)}, "broadcast mask"}};
             }});

  r.add({.schema_text = "take_along_dim(Tensor input, Tensor indices, int? dim=None) -> Tensor",
         .family = "indexing",
         .doc = "gather along dim after broadcasting (over the flattened input when dim is None).",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               const Tensor& idx = a.tensor(1);
               if (a[2].is_none()) return std::vector<Tensor>{gather(x.reshape({-1}), 0, idx.reshape({-1}))};
               int64_t dim = wrap_dim(a[2].to_int(), x.dim(), "take_along_dim");
               Shape xs(x.sizes()), is(idx.sizes());
               xs[size_t(dim)] = 1;
               is[size_t(dim)] = 1;
               Shape b = broadcast_shapes(xs, is, "take_along_dim");
               Shape xb = b, ib = b;
               xb[size_t(dim)] = x.size(dim);
               ib[size_t(dim)] = idx.size(dim);
               return std::vector<Tensor>{gather(x.expand(xb), dim, idx.expand(ib))};
             },
         .dtypes = kNumericTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor x = sample_uniform({3, 4}, dt, g);
               return std::vector<Sample>{{{x, sample_index({3, 2}, 4, g), int64_t(1)}},
                                          {{x, sample_index({5}, 12, g), Value()}},
                                          {{x, sample_index({2, 1}, 3, g), int64_t(0)}, "broadcast"}};
             }});

  r.add({.schema_text = "nonzero(Tensor input) -> Tensor",
         .family = "indexing",
         .doc = "Indices of nonzero elements as an [n, ndim] int64 tensor (row-major order).",
         .differentiable = false,
         .forward = [](const Args& a) { return std::vector<Tensor>{nonzero_impl(a.tensor(0))}; },
         .dtypes = kNumericTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{{{sample_uniform({3, 4}, dt, g, -1, 1).to(DType::Int64).to(dt)}},
                                          {{sample_uniform({5}, DType::Bool, g).to(dt)}},
                                          {{zeros({}, dt)}, "0-d"}};
             }});

  r.add({.schema_text = "one_hot(Tensor input, int num_classes=-1) -> Tensor",
         .family = "indexing",
         .doc = "int64 one-hot encoding with a new last dim (num_classes = max + 1 when -1).",
         .differentiable = false,
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               FOUNDRY_CHECK_AS(TypeError, x.dtype() == DType::Int64,
                                "one_hot is only applicable to index tensors (int64), got {}", dtype_name(x.dtype()));
               int64_t n = a[1].to_int();
               if (n == -1) {
                 FOUNDRY_CHECK_AS(ValueError, x.numel() > 0, "one_hot: can not infer the total number of classes from an empty tensor");
                 n = amax(x).item<int64_t>() + 1;
               }
               FOUNDRY_CHECK_AS(ValueError, x.numel() == 0 || (amin(x).item<int64_t>() >= 0), "one_hot: class values must be non-negative");
               FOUNDRY_CHECK_AS(ValueError, x.numel() == 0 || amax(x).item<int64_t>() < n, "one_hot: class values must be smaller than num_classes");
               Shape s(x.sizes());
               s.push_back(n);
               Tensor out = zeros(s, DType::Int64);
               Tensor xi = x.unsqueeze(-1);
               scatter_impl(out, x.dim(), xi, ones(xi.sizes(), DType::Int64), 0, "one_hot");
               return std::vector<Tensor>{out};
             },
         .dtypes = {DType::Int64},
         .samples =
             [](DType, Generator& g) {
               return std::vector<Sample>{{{sample_index({3, 4}, 5, g), int64_t(-1)}},
                                          {{sample_index({4}, 3, g), int64_t(6)}}};
             },
         .ref = "torch.nn.functional.one_hot"});
}

}  // namespace ops

Tensor nonzero_impl(const Tensor& x) {
  Tensor c = x.contiguous();
  std::vector<int64_t> hits;
  int64_t n = c.numel();
  kernels::visit_numeric(c.dtype(), "nonzero", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = static_cast<const T*>(c.data_ptr());
    for (int64_t i = 0; i < n; ++i) {
      bool nz;
      if constexpr (std::is_same_v<T, bool>) nz = p[i];
      else nz = kernels::opmath_t<T>(p[i]) != kernels::opmath_t<T>(0);
      if (nz) hits.push_back(i);
    }
  });
  int64_t nd = c.dim();
  Tensor out = empty({int64_t(hits.size()), nd}, DType::Int64);
  int64_t* o = out.data<int64_t>();
  for (size_t h = 0; h < hits.size(); ++h) {
    int64_t rem = hits[h];
    for (int64_t d = nd - 1; d >= 0; --d) {
      o[int64_t(h) * nd + d] = rem % c.size(d);
      rem /= c.size(d);
    }
  }
  return out;
}

}  // namespace foundry
