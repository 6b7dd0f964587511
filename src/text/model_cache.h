// Hash maps keyed by strings with string_view lookups, and the per-thread cache of tokenized
// pre-tokens that the models use (HF keeps one shared cache behind a lock; a per-thread cache
// avoids the lock and gives the same results, since a cache never changes what is computed).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace foundry::text {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept {
    // 8 bytes at a time, multiply-mix (keys are short tokens and pre-tokens).
    const unsigned char* p = reinterpret_cast<const unsigned char*>(s.data());
    size_t n = s.size();
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (n * 0xC2B2AE3D27D4EB4FULL);
    while (n >= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
      h ^= h >> 32;
      p += 8;
      n -= 8;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < n; ++i) w |= static_cast<uint64_t>(p[i]) << (8 * i);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ULL;
    h ^= h >> 29;
    return static_cast<size_t>(h);
  }
};

template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

/// Open-addressing hash map from 64-bit keys (never ~0) to small values; used for BPE merges,
/// the hottest lookup of the merge loop.
template <typename V>
class FlatMap64 {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots_.assign(cap, Slot{kEmpty, V{}});
    mask_ = cap - 1;
    size_ = 0;
  }
  void insert_or_assign(uint64_t key, V value) {
    if (slots_.empty() || (size_ + 1) * 2 > slots_.size()) grow();
    size_t i = slot(key);
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
    if (slots_[i].key == kEmpty) ++size_;
    slots_[i] = Slot{key, value};
  }
  const V* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    size_t i = slot(key);
    while (true) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.value;
      if (s.key == kEmpty) return nullptr;
      i = (i + 1) & mask_;
    }
  }
  size_t size() const { return size_; }
  void prefetch(uint64_t key) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[slot(key)]);
  }

 private:
  struct Slot {
    uint64_t key;
    V value;  // key and value share a cache line: one miss per lookup
  };
  static constexpr uint64_t kEmpty = ~0ULL;
  size_t slot(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ULL) >> 20) & mask_; }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    reserve(std::max<size_t>(16, old.size()));
    for (auto& s : old)
      if (s.key != kEmpty) insert_or_assign(s.key, s.value);
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

inline uint64_t next_model_serial() {
  static std::atomic<uint64_t> counter{1};
  return counter.fetch_add(1);
}

/// Pre-token -> flat token data ([id, len, id, len, ...] for BPE). Open addressing over two
/// arenas (keys, values): a lookup is one hash, one probe sequence and one memcmp, with no
/// allocation. Bounded; stops growing when full, like HF's cache.
class ModelCache {
 public:
  static constexpr size_t kCapacity = 200000;
  struct View {
    const uint32_t* data;
    size_t size;
    uint32_t operator[](size_t i) const { return data[i]; }
  };
  bool find(std::string_view key, View& out) const {
    if (slots_.empty()) return false;
    uint64_t h = StringHash{}(key) | 1;
    size_t i = h & mask_;
    while (true) {
      const Slot& s = slots_[i];
      if (s.hash == 0) return false;
      if (s.hash == h && s.key_len == key.size() && std::memcmp(keys_.data() + s.key_off, key.data(), key.size()) == 0) {
        out = View{vals_.data() + s.val_off, s.val_len};
        return true;
      }
      i = (i + 1) & mask_;
    }
  }
  void insert(std::string_view key, const std::vector<uint32_t>& value) {
    if (size_ >= kCapacity) return;
    if (slots_.empty() || (size_ + 1) * 2 > slots_.size()) grow();
    uint64_t h = StringHash{}(key) | 1;
    size_t i = h & mask_;
    while (slots_[i].hash != 0) {
      const Slot& s = slots_[i];
      if (s.hash == h && s.key_len == key.size() && std::memcmp(keys_.data() + s.key_off, key.data(), key.size()) == 0)
        return;  // already there
      i = (i + 1) & mask_;
    }
    slots_[i] = Slot{h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(key.size()),
                     static_cast<uint32_t>(vals_.size()), static_cast<uint32_t>(value.size())};
    keys_.append(key);
    vals_.insert(vals_.end(), value.begin(), value.end());
    ++size_;
  }
  void clear() {
    slots_.clear();
    keys_.clear();
    vals_.clear();
    size_ = 0;
    mask_ = 0;
  }

 private:
  struct Slot {
    uint64_t hash;  // 0 = empty
    uint32_t key_off, key_len, val_off, val_len;
  };
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    size_t cap = old.empty() ? 1024 : old.size() * 2;
    slots_.assign(cap, Slot{0, 0, 0, 0, 0});
    mask_ = cap - 1;
    for (const Slot& s : old) {
      if (s.hash == 0) continue;
      size_t i = s.hash & mask_;
      while (slots_[i].hash != 0) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<uint32_t> vals_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

/// The calling thread's cache for the model with this serial (a few models per thread).
inline ModelCache& thread_cache(uint64_t serial) {
  struct Slot {
    uint64_t serial = 0;
    uint64_t last_use = 0;
    ModelCache cache;
  };
  thread_local Slot slots[4];
  thread_local uint64_t clock = 0;
  ++clock;
  Slot* victim = &slots[0];
  for (auto& s : slots) {
    if (s.serial == serial) {
      s.last_use = clock;
      return s.cache;
    }
    if (s.last_use < victim->last_use) victim = &s;
  }
  victim->serial = serial;
  victim->last_use = clock;
  victim->cache.clear();
  return victim->cache;
}

}  // namespace foundry::text
