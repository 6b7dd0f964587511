#include "foundry/core/tensor.h"

#include <cmath>
#include <sstream>

#include "foundry/autograd/node.h"
#include "foundry/core/leak_report.h"
#include "kernels/cpu/dtype_dispatch.h"

namespace foundry {

TensorImpl::TensorImpl(Storage storage_, Shape sizes_, Shape strides_, int64_t offset_, DType dtype_)
    : storage(std::move(storage_)), sizes(std::move(sizes_)), strides(std::move(strides_)), offset(offset_),
      dtype(dtype_), numel(numel_of(sizes)) {
  if (debug::tensor_tracking_enabled()) debug::detail::on_tensor_created(this);
}

TensorImpl::~TensorImpl() { debug::detail::on_tensor_destroyed(this); }

autograd::AutogradMeta& TensorImpl::autograd_meta() {
  if (!autograd) autograd = std::make_unique<autograd::AutogradMeta>();
  return *autograd;
}

int64_t numel_of(IntList sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

Shape contiguous_strides(IntList sizes) {
  Shape strides(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t n = std::max<int64_t>(ndim, 1);  // 0-d tensors accept dim 0 and -1
  if (dim < -n || dim >= n)
    raise<IndexError>("{}{}dimension out of range (expected to be in range of [{}, {}], but got {})", op,
                      *op ? ": " : "", -n, n - 1, dim);
  return dim < 0 ? dim + n : dim;
}

std::string shape_str(IntList sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

Tensor empty(IntList sizes, TensorOptions options) {
  for (int64_t s : sizes)
    FOUNDRY_CHECK_AS(ValueError, s >= 0, "empty: negative dimension {} in size {}", s, shape_str(sizes));
  DType dt = options.dtype_or(default_float_dtype());
  int64_t n = numel_of(sizes);
  auto storage = make_ref<StorageImpl>(size_t(n * itemsize(dt)));
  Tensor t(make_ref<TensorImpl>(std::move(storage), Shape(sizes), contiguous_strides(sizes), 0, dt));
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}

Tensor make_tensor(Storage storage, IntList sizes, IntList strides, int64_t offset, DType dtype) {
  FOUNDRY_CHECK(sizes.size() == strides.size(), "make_tensor: {} sizes but {} strides", sizes.size(), strides.size());
  FOUNDRY_CHECK(offset >= 0, "make_tensor: negative storage offset {}", offset);
  int64_t n = numel_of(sizes);
  if (n > 0) {
    // The lowest and highest element addresses must lie inside the storage.
    int64_t lo = offset, hi = offset;
    for (size_t i = 0; i < sizes.size(); ++i) {
      FOUNDRY_CHECK(sizes[i] >= 0, "make_tensor: negative size in {}", shape_str(sizes));
      int64_t span = (sizes[i] - 1) * strides[i];
      if (span < 0) lo += span;
      else hi += span;
    }
    int64_t capacity = int64_t(storage->nbytes()) / itemsize(dtype);
    FOUNDRY_CHECK(lo >= 0 && hi < capacity,
                  "setStorage: sizes {}, strides {}, storage offset {} and itemsize {} require elements [{}, {}] but "
                  "the storage holds {}",
                  shape_str(sizes), shape_str(strides), offset, itemsize(dtype), lo, hi, capacity);
  }
  return Tensor(make_ref<TensorImpl>(std::move(storage), Shape(sizes), Shape(strides), offset, dtype));
}

int64_t Tensor::size(int64_t d) const { return impl_->sizes[size_t(wrap_dim(d, dim(), "size"))]; }
int64_t Tensor::stride(int64_t d) const { return impl_->strides[size_t(wrap_dim(d, dim(), "stride"))]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = impl_->sizes.size(); i-- > 0;) {
    int64_t s = impl_->sizes[i];
    if (s == 1) continue;
    if (s == 0) return true;
    if (impl_->strides[i] != expected) return false;
    expected *= s;
  }
  return true;
}

void Tensor::check_dtype(DType expected, const char* what) const {
  if (dtype() != expected)
    raise<TypeError>("{}: tensor has dtype {} but {} was requested", what, dtype_name(dtype()), dtype_name(expected));
}

Scalar Tensor::item() const {
  FOUNDRY_CHECK_AS(ValueError, numel() == 1, "item(): a Tensor with {} elements cannot be converted to Scalar",
                   numel());
  return kernels::visit_all(dtype(), "item", [&](auto tag) -> Scalar {
    using T = typename decltype(tag)::type;
    T v = *static_cast<const T*>(data_ptr());
    if constexpr (std::is_same_v<T, bool>) return Scalar(v);
    else if constexpr (std::is_integral_v<T>) return Scalar(int64_t(v));
    else if constexpr (std::is_same_v<T, double>) return Scalar(v);
    else return Scalar(double(float(v)));
  });
}

std::string Scalar::str() const {
  if (is_bool()) return to_bool() ? "True" : "False";
  if (is_int()) return std::to_string(i_);
  return fmt::format("{}", d_);
}

namespace {

std::string format_element(const Tensor& t, int64_t offset_elems) {
  return kernels::visit_all(t.dtype(), "str", [&](auto tag) -> std::string {
    using T = typename decltype(tag)::type;
    T v = static_cast<const T*>(t.storage()->data())[offset_elems];
    if constexpr (std::is_same_v<T, bool>) return v ? "True" : "False";
    else if constexpr (std::is_integral_v<T>) return std::to_string(int64_t(v));
    else {
      double d = double(float(v));
      if constexpr (std::is_same_v<T, double>) d = double(v);
      if (std::isnan(d)) return "nan";
      if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
      return fmt::format("{:.4f}", d);
    }
  });
}

void format_rec(const Tensor& t, int64_t dim, int64_t offset, std::string& out, int indent) {
  if (dim == t.dim()) {
    out += format_element(t, offset);
    return;
  }
  out += "[";
  int64_t n = t.size(dim);
  const int64_t edge = 3;
  for (int64_t i = 0; i < n; ++i) {
    if (n > 2 * edge + 1 && i == edge) {
      out += "...";
      i = n - edge - 1;
      out += dim + 1 == t.dim() ? ", " : ",\n" + std::string(size_t(indent + 1), ' ');
      continue;
    }
    format_rec(t, dim + 1, offset + i * t.stride(dim), out, indent + 1);
    if (i + 1 < n) out += dim + 1 == t.dim() ? ", " : ",\n" + std::string(size_t(indent + 1), ' ');
  }
  out += "]";
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::string out = "tensor(";
  format_rec(*this, 0, storage_offset(), out, 7);
  if (dtype() != DType::Float32 && dtype() != DType::Int64 && dtype() != DType::Bool)
    out += fmt::format(", dtype={}", dtype_name(dtype()));
  if (requires_grad()) out += grad_fn() ? fmt::format(", grad_fn=<{}>", grad_fn()->name()) : ", requires_grad=True";
  return out + ")";
}

}  // namespace foundry
