// Storage: the bytes behind one or more tensors. Owned blocks come from the caching allocator;
// mapped storage is a read-only view of a file (weights used in place, zero copy); external
// storage wraps memory owned by someone else (a NumPy array) and calls a release hook.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "foundry/core/refcount.h"

namespace foundry {

class StorageImpl : public RefCounted {
 public:
  enum class Kind { Owned, Mapped, External };

  /// Allocates `nbytes` from the caching allocator (uninitialised).
  explicit StorageImpl(size_t nbytes);
  /// Wraps memory owned elsewhere; `release` runs when the last tensor lets go.
  StorageImpl(void* data, size_t nbytes, Kind kind, std::function<void()> release, bool read_only);
  ~StorageImpl() override;
  // Recycled per thread, as TensorImpl.
  static void* operator new(size_t bytes) { return detail::object_allocate(bytes); }
  static void operator delete(void* p, size_t bytes) noexcept { detail::object_free(p, bytes); }

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Kind kind() const { return kind_; }
  bool read_only() const { return read_only_; }

  /// Version counter shared by every tensor viewing this storage; bumped by in-place writes so
  /// autograd can detect a saved tensor that was modified.
  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_;
  size_t nbytes_;
  Kind kind_;
  std::function<void()> release_;
  bool read_only_ = false;
  std::atomic<uint32_t> version_{0};
};

using Storage = Ref<StorageImpl>;

/// Maps `path` read-only. Throws IOError naming the file when it cannot be opened or mapped.
/// The mapping stays alive while any tensor uses the storage.
/// copy_on_write: the pages are writable and private (writes never reach the file); else writes
/// are refused (read_only).
Storage map_file_storage(const std::string& path, bool copy_on_write = false);

}  // namespace foundry
