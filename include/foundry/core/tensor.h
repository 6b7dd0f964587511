// Tensor: a cheap, reference-counted handle to sizes, strides, an offset and a dtype over a
// Storage. Views (reshape, permute, slicing, ...) share storage; strides are in elements and may
// be zero (broadcast) or negative (reversed slices). Operations are free functions in
// foundry/ops/ops.h; the common ones are also methods here, as in PyTorch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "foundry/core/device.h"
#include "foundry/core/dtype.h"
#include "foundry/core/error.h"
#include "foundry/core/scalar.h"
#include "foundry/core/small_vector.h"
#include "foundry/core/storage.h"

namespace foundry {

namespace autograd {
class Node;
struct AutogradMeta;
}  // namespace autograd

class Tensor;
struct TensorIndex;

/// dtype, device and requires_grad for creation functions; converts from a DType.
struct TensorOptions {
  std::optional<DType> dtype;
  Device device{};
  bool requires_grad = false;

  TensorOptions() = default;
  TensorOptions(DType d) : dtype(d) {}  // NOLINT
  TensorOptions& with_requires_grad(bool r = true) {
    requires_grad = r;
    return *this;
  }
  DType dtype_or(DType fallback) const { return dtype.value_or(fallback); }
};

class TensorImpl : public RefCounted {
 public:
  TensorImpl(Storage storage, Shape sizes, Shape strides, int64_t offset, DType dtype);
  ~TensorImpl() override;
  // Recycled per thread (detail::object_allocate): an eager step makes and drops hundreds.
  static void* operator new(size_t bytes) { return detail::object_allocate(bytes); }
  static void operator delete(void* p, size_t bytes) noexcept { detail::object_free(p, bytes); }

  Storage storage;
  Shape sizes;
  Shape strides;
  int64_t offset = 0;  ///< in elements
  DType dtype;
  Device device{};
  int64_t numel = 1;
  /// Set on 0-dim tensors made from Python numbers; they rank lowest in type promotion.
  bool wrapped_number = false;
  /// Null until the tensor takes part in autograd (requires_grad, grad_fn, hooks...).
  std::unique_ptr<autograd::AutogradMeta> autograd;

  autograd::AutogradMeta& autograd_meta();  ///< creates it on first use
};

/// One entry of an index expression with NumPy semantics: an integer, a slice, `Ellipsis`,
/// `NewAxis` (None), a bool, or a tensor (bool mask or integer array).
struct Slice {
  std::optional<int64_t> start, stop, step;
  Slice(std::optional<int64_t> start = std::nullopt, std::optional<int64_t> stop = std::nullopt,
        std::optional<int64_t> step = std::nullopt)
      : start(start), stop(stop), step(step) {}
};
struct EllipsisType {};
struct NewAxisType {};
inline constexpr EllipsisType Ellipsis{};
inline constexpr NewAxisType NewAxis{};
inline constexpr std::nullopt_t None = std::nullopt;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Ref<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return bool(impl_); }
  TensorImpl* impl() const { return impl_.get(); }
  const Ref<TensorImpl>& impl_ref() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_.get() == o.impl_.get(); }

  // ---- metadata ----
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->device; }
  int64_t dim() const { return int64_t(impl_->sizes.size()); }
  IntList sizes() const { return impl_->sizes; }
  IntList strides() const { return impl_->strides; }
  IntList shape() const { return impl_->sizes; }
  /// Size of dim `d`; negative d counts from the end.
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const { return impl_->numel; }
  int64_t storage_offset() const { return impl_->offset; }
  int64_t element_size() const { return itemsize(impl_->dtype); }
  int64_t nbytes() const { return numel() * element_size(); }
  bool is_contiguous() const;
  bool is_floating_point() const { return is_floating(dtype()); }
  const Storage& storage() const { return impl_->storage; }

  /// Pointer to the first element (storage + offset).
  void* data_ptr() const {
    return static_cast<char*>(impl_->storage->data()) + impl_->offset * element_size();
  }
  /// Typed pointer; throws TypeError when T does not match the dtype.
  template <typename T>
  T* data() const {
    check_dtype(dtype_of<T>, "data<T>()");
    return static_cast<T*>(data_ptr());
  }
  /// The single element of a one-element tensor.
  Scalar item() const;
  template <typename T>
  T item() const {
    return item().to<T>();
  }
  /// Elements as a flat vector in logical (row-major) order, converted to T.
  template <typename T>
  std::vector<T> to_vector() const;

  // ---- autograd ----
  bool requires_grad() const;
  /// Marks a leaf as needing gradients (only floating dtypes can).
  Tensor& requires_grad_(bool required = true);
  /// Accumulated gradient of a leaf (or of a non-leaf after retain_grad()); undefined if none.
  Tensor grad() const;
  void set_grad(const Tensor& g) const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  /// A tensor is a leaf when it has no grad_fn (created by the user or detached).
  bool is_leaf() const;
  uint32_t output_nr() const;
  /// Computes gradients of this tensor with respect to the leaves of its graph.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false,
                bool create_graph = false) const;
  /// Shares storage, drops the graph.
  Tensor detach() const;
  Tensor& detach_();
  void retain_grad() const;
  bool retains_grad() const;
  /// A hook sees (and may replace, by returning a defined tensor) the gradient of this tensor.
  /// Returns a handle for remove_hook().
  int register_hook(std::function<Tensor(const Tensor&)> hook) const;
  void remove_hook(int handle) const;
  /// The storage's version counter (bumped by in-place writes).
  uint32_t version() const { return impl_->storage->version(); }

  // ---- common operations (same as the free functions in foundry/ops/ops.h) ----
  Tensor view(IntList shape) const;
  Tensor reshape(IntList shape) const;
  Tensor permute(IntList dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;
  Tensor expand(IntList shape) const;
  Tensor squeeze(std::optional<int64_t> dim = std::nullopt) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> stop,
               int64_t step = 1) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(const Scalar& value);
  Tensor& zero_();
  /// NumPy-style indexing: t.index({Slice(None, None, -2), Ellipsis, NewAxis, 3}).
  Tensor index(const std::vector<TensorIndex>& indices) const;
  /// t[indices] = value (value broadcasts to the indexed shape).
  Tensor& index_put_(const std::vector<TensorIndex>& indices, const Tensor& value);
  Tensor& index_put_(const std::vector<TensorIndex>& indices, const Scalar& value);

  Tensor sum() const;
  Tensor mean() const;
  Tensor matmul(const Tensor& other) const;
  Tensor& add_(const Tensor& other, const Scalar& alpha = 1);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(const Scalar& other);

  /// A printable form like PyTorch's repr.
  std::string str() const;

  void check_dtype(DType expected, const char* what) const;

 private:
  Ref<TensorImpl> impl_;
};

/// Index entry; see Slice/Ellipsis/NewAxis above.
struct TensorIndex {
  enum class Kind { Integer, Slice, Ellipsis, NewAxis, Boolean, Tensor };
  Kind kind;
  int64_t integer = 0;
  bool boolean = false;
  foundry::Slice slice;
  foundry::Tensor tensor;

  TensorIndex(int64_t i) : kind(Kind::Integer), integer(i) {}  // NOLINT
  TensorIndex(int i) : kind(Kind::Integer), integer(i) {}  // NOLINT
  TensorIndex(bool b) : kind(Kind::Boolean), boolean(b) {}  // NOLINT
  TensorIndex(foundry::Slice s) : kind(Kind::Slice), slice(s) {}  // NOLINT
  TensorIndex(EllipsisType) : kind(Kind::Ellipsis) {}  // NOLINT
  TensorIndex(NewAxisType) : kind(Kind::NewAxis) {}  // NOLINT
  TensorIndex(std::nullopt_t) : kind(Kind::NewAxis) {}  // NOLINT
  TensorIndex(foundry::Tensor t) : kind(Kind::Tensor), tensor(std::move(t)) {}  // NOLINT
};

/// Makes an uninitialised contiguous tensor (no autograd).
Tensor empty(IntList sizes, TensorOptions options = {});
/// A view over `storage` with explicit geometry; checks that it fits.
Tensor make_tensor(Storage storage, IntList sizes, IntList strides, int64_t offset, DType dtype);
/// Contiguous (row-major) strides for `sizes`.
Shape contiguous_strides(IntList sizes);
/// Product of sizes (1 for 0-dim).
int64_t numel_of(IntList sizes);
/// Wraps a possibly negative dim into [0, ndim); throws IndexError naming `op` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op = "");
/// "[2, 3]" for error messages.
std::string shape_str(IntList sizes);

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = to(dtype_of<T>).contiguous();
  const T* p = c.data<T>();
  return std::vector<T>(p, p + c.numel());
}

}  // namespace foundry
