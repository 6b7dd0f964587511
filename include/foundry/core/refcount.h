// Intrusive reference counting for the cheap handles Tensor and Storage.
#pragma once

#include <atomic>
#include <cstddef>
#include <utility>

namespace foundry {

namespace detail {
// Memory for the small objects behind every tensor (TensorImpl, StorageImpl), recycled per thread
// (src/core/object_cache.cpp). An eager step makes and drops hundreds of them at once (a Llama-110M
// decode token: ~215 tensors, ~570 mallocs), more than glibc's per-thread cache keeps (7 of a
// size), so most went through malloc's slower bins.
void* object_allocate(size_t bytes);
/// Gives back memory from object_allocate(bytes): to this thread's cache, or to the heap when the
/// cache is full or the thread is exiting.
void object_free(void* p, size_t bytes) noexcept;
/// False in AddressSanitizer builds, where every object goes back to the heap.
bool objects_recycled();
}  // namespace detail

/// Base of objects owned through Ref<T>; the count lives in the object, so a handle is one pointer.
class RefCounted {
 public:
  RefCounted() = default;
  RefCounted(const RefCounted&) = delete;
  RefCounted& operator=(const RefCounted&) = delete;
  virtual ~RefCounted() = default;

  void retain() const { count_.fetch_add(1, std::memory_order_relaxed); }
  void release() const {
    if (count_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  int use_count() const { return count_.load(std::memory_order_relaxed); }

 private:
  mutable std::atomic<int> count_{0};
};

template <typename T>
class Ref {
 public:
  Ref() = default;
  Ref(std::nullptr_t) {}  // NOLINT
  explicit Ref(T* p) : p_(p) {
    if (p_) p_->retain();
  }
  Ref(const Ref& o) : p_(o.p_) {
    if (p_) p_->retain();
  }
  Ref(Ref&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  template <typename U>
  Ref(const Ref<U>& o) : Ref(static_cast<T*>(o.get())) {}  // NOLINT
  Ref& operator=(Ref o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  ~Ref() {
    if (p_) p_->release();
  }

  T* get() const { return p_; }
  T* operator->() const { return p_; }
  T& operator*() const { return *p_; }
  explicit operator bool() const { return p_ != nullptr; }
  friend bool operator==(const Ref& a, const Ref& b) { return a.p_ == b.p_; }

 private:
  T* p_ = nullptr;
};

template <typename T, typename... Args>
Ref<T> make_ref(Args&&... args) {
  return Ref<T>(new T(std::forward<Args>(args)...));
}

}  // namespace foundry
