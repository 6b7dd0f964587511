// A kernel's temporary buffer from the caching allocator (foundry/core/allocator.h).
#pragma once

#include <cstddef>

#include "foundry/core/allocator.h"

namespace foundry::kernels {

// Uninitialised, 64-byte aligned, handed back to the allocator's cache on destruction. A training
// step asks for the same sizes at every step: attention's transposed keys as fresh std::vectors
// were page-faulted in and zero-filled whole at every call (glibc handed the pages back between
// calls), 10% of the main job's time at 1 thread.
template <typename T>
class ScratchArray {
 public:
  explicit ScratchArray(size_t n = 0) : n_(n), p_(n ? static_cast<T*>(allocator::allocate(n * sizeof(T))) : nullptr) {}
  ~ScratchArray() { release(); }
  ScratchArray(const ScratchArray&) = delete;
  ScratchArray& operator=(const ScratchArray&) = delete;
  ScratchArray(ScratchArray&& o) noexcept : n_(o.n_), p_(o.p_) { o.n_ = 0, o.p_ = nullptr; }
  ScratchArray& operator=(ScratchArray&& o) noexcept {
    if (this != &o) {
      release();
      n_ = o.n_, p_ = o.p_;
      o.n_ = 0, o.p_ = nullptr;
    }
    return *this;
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }

 private:
  void release() {
    if (p_) allocator::deallocate(p_, n_ * sizeof(T));
    p_ = nullptr;
  }
  size_t n_;
  T* p_;
};

}  // namespace foundry::kernels
