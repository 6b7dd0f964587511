// A vector that keeps up to N elements inline (no heap allocation), for sizes and strides.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <type_traits>
#include <vector>

namespace foundry {

template <typename T, size_t N>
class SmallVec {
  static_assert(std::is_trivially_copyable_v<T>, "SmallVec holds trivially copyable types");

 public:
  using value_type = T;
  using iterator = T*;
  using const_iterator = const T*;

  SmallVec() = default;
  explicit SmallVec(size_t n, T value = T()) { assign(n, value); }
  SmallVec(std::initializer_list<T> init) { assign(init.begin(), init.end()); }
  SmallVec(std::span<const T> s) { assign(s.begin(), s.end()); }  // NOLINT
  SmallVec(const std::vector<T>& v) { assign(v.begin(), v.end()); }  // NOLINT
  template <typename It>
  SmallVec(It first, It last) { assign(first, last); }
  SmallVec(const SmallVec& o) { assign(o.begin(), o.end()); }
  SmallVec(SmallVec&& o) noexcept { move_from(std::move(o)); }
  SmallVec& operator=(const SmallVec& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  SmallVec& operator=(SmallVec&& o) noexcept {
    if (this != &o) {
      release();
      move_from(std::move(o));
    }
    return *this;
  }
  ~SmallVec() { release(); }

  template <typename It>
  void assign(It first, It last) {
    size_t n = size_t(std::distance(first, last));
    reserve(n);
    std::copy(first, last, data_);
    size_ = n;
  }
  void assign(size_t n, T value) {
    reserve(n);
    std::fill(data_, data_ + n, value);
    size_ = n;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T& back() { return data_[size_ - 1]; }
  const T& back() const { return data_[size_ - 1]; }
  T& front() { return data_[0]; }
  const T& front() const { return data_[0]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

  void reserve(size_t n) {
    if (n <= capacity_) return;
    size_t cap = std::max(n, capacity_ * 2);
    T* p = new T[cap];
    std::copy(data_, data_ + size_, p);
    release();
    data_ = p;
    capacity_ = cap;
  }
  void resize(size_t n, T value = T()) {
    reserve(n);
    if (n > size_) std::fill(data_ + size_, data_ + n, value);
    size_ = n;
  }
  void push_back(T v) {
    reserve(size_ + 1);
    data_[size_++] = v;
  }
  void pop_back() { --size_; }
  void clear() { size_ = 0; }
  void insert(size_t pos, T v) {
    reserve(size_ + 1);
    std::copy_backward(data_ + pos, data_ + size_, data_ + size_ + 1);
    data_[pos] = v;
    ++size_;
  }
  void erase(size_t pos) {
    std::copy(data_ + pos + 1, data_ + size_, data_ + pos);
    --size_;
  }

  operator std::span<const T>() const { return {data_, size_}; }  // NOLINT
  std::vector<T> vec() const { return std::vector<T>(begin(), end()); }

  friend bool operator==(const SmallVec& a, const SmallVec& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  void release() {
    if (data_ != inline_) delete[] data_;
    data_ = inline_;
    capacity_ = N;
  }
  void move_from(SmallVec&& o) {
    if (o.data_ == o.inline_) {
      std::copy(o.inline_, o.inline_ + o.size_, inline_);
      data_ = inline_;
      capacity_ = N;
    } else {
      data_ = o.data_;
      capacity_ = o.capacity_;
      o.data_ = o.inline_;
      o.capacity_ = N;
    }
    size_ = o.size_;
    o.size_ = 0;
  }

  T inline_[N];
  T* data_ = inline_;
  size_t size_ = 0;
  size_t capacity_ = N;
};

/// Sizes or strides of a tensor: up to 8 dims without heap allocation.
using Shape = SmallVec<int64_t, 8>;
/// A read-only view of integers (sizes, strides, dims) accepted by functions, constructible from
/// a braced list, a vector, a Shape or a single integer, like c10::IntArrayRef.
class IntList {
 public:
  IntList() = default;
  // A view, like std::span: a braced list lives until the end of the full expression, which is
  // all a parameter needs. GCC warns on the pattern itself.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
#endif
  IntList(std::initializer_list<int64_t> l) : data_(l.begin()), size_(l.size()) {}  // NOLINT
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  IntList(const std::vector<int64_t>& v) : data_(v.data()), size_(v.size()) {}  // NOLINT
  template <size_t N>
  IntList(const SmallVec<int64_t, N>& v) : data_(v.data()), size_(v.size()) {}  // NOLINT
  IntList(std::span<const int64_t> s) : data_(s.data()), size_(s.size()) {}  // NOLINT
  IntList(const int64_t& one) : data_(&one), size_(1) {}  // NOLINT
  IntList(const int64_t* data, size_t size) : data_(data), size_(size) {}

  const int64_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const int64_t* begin() const { return data_; }
  const int64_t* end() const { return data_ + size_; }
  int64_t operator[](size_t i) const { return data_[i]; }
  int64_t back() const { return data_[size_ - 1]; }
  std::vector<int64_t> vec() const { return {begin(), end()}; }
  operator Shape() const { return Shape(begin(), end()); }  // NOLINT

  friend bool operator==(IntList a, IntList b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  const int64_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace foundry
