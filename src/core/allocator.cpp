#include "foundry/core/allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "foundry/core/error.h"

namespace foundry::allocator {

namespace {

constexpr size_t kAlign = 64;
// Blocks this large are mapped and unmapped directly, so handing one back really returns its
// pages to the OS (glibc's heap may keep them); their size classes are whole pages.
constexpr size_t kMapThreshold = size_t(1) << 20;
// The first miss of a size class this large evicts as many cached bytes: otherwise memory freed
// by one phase (activations) stays resident while the next (optimizer state) allocates fresh,
// and the footprint is the sum of both. Only the first: a class that recurs (a training loop's
// step) would otherwise evict blocks the next step needs again, refaulting them every step.
constexpr size_t kEvictingMiss = size_t(64) << 20;

constexpr size_t kHugePage = size_t(2) << 20;
// Blocks this large start on a 2 MiB boundary and ask for transparent huge pages (fewer TLB
// misses for streaming kernels) over the part every request of their class uses, so unused tails
// don't fault in whole 2 MiB pages.
constexpr size_t kHugePageThreshold = size_t(4) << 20;

bool huge_pages_wanted() {
  static const bool wanted = std::getenv("FOUNDRY_NO_HUGE_PAGES") == nullptr;
  return wanted;
}

void* map_block(size_t cls) {
  if (cls < kHugePageThreshold) {
    void* p = mmap(nullptr, cls, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
  }
  const size_t len = cls + kHugePage;
  void* raw = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  char* start = static_cast<char*>(raw);
  char* aligned = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(start) + kHugePage - 1) & ~(kHugePage - 1));
  const size_t head = size_t(aligned - start), tail = len - head - cls;
  if (head) munmap(start, head);
  if (tail) munmap(aligned + cls, tail);
  // Every request of this class is larger than the class below it (four classes per power of two).
  const size_t floor_pow2 = std::bit_floor(cls);
  const size_t class_below = cls == floor_pow2 ? cls - cls / 8 : cls - floor_pow2 / 4;
  const size_t always_used = class_below / kHugePage * kHugePage;
  if (huge_pages_wanted() && always_used) madvise(aligned, always_used, MADV_HUGEPAGE);  // advisory: failure only costs speed
  return aligned;
}

void* system_alloc(size_t cls) {
  if (cls < kMapThreshold) return std::aligned_alloc(kAlign, cls);
  return map_block(cls);
}

void system_free(void* p, size_t cls) {
  if (cls < kMapThreshold) std::free(p);
  else munmap(p, cls);
}

using Block = std::pair<void*, size_t>;

struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_lists;
  std::unordered_set<size_t> evicted_for;  // huge classes whose first miss has evicted
  AllocatorStats stats;
  int64_t limit = [] {
    if (const char* env = std::getenv("FOUNDRY_CACHE_LIMIT_MB")) return int64_t(std::atoll(env)) << 20;
    return int64_t(4) << 30;
  }();
};

Cache& cache() {
  // Leaked on purpose: tensors held by static objects may be freed after this would be destroyed.
  // The debug leak report runs from an atexit handler instead.
  static Cache* c = [] {
    auto* c = new Cache;
#ifndef NDEBUG
    std::atexit([] {
      auto& st = cache().stats;
      if (st.live_blocks > 0)
        std::fprintf(stderr, "[foundry] allocator: %lld blocks (%lld bytes) still live at exit\n",
                     (long long)st.live_blocks, (long long)st.current_bytes);
    });
#endif
    return c;
  }();
  return *c;
}

// Removes cached blocks, largest classes first, until `want` bytes are taken or none are left.
// The caller frees them outside the lock.
std::vector<Block> take_cached(Cache& c, size_t want) {
  std::vector<size_t> classes;
  for (const auto& [cls, list] : c.free_lists)
    if (!list.empty()) classes.push_back(cls);
  std::sort(classes.rbegin(), classes.rend());
  std::vector<Block> taken;
  size_t got = 0;
  for (size_t cls : classes) {
    auto& list = c.free_lists[cls];
    while (!list.empty() && got < want) {
      taken.emplace_back(list.back(), cls);
      list.pop_back();
      got += cls;
      c.stats.cached_bytes -= int64_t(cls);
      c.stats.cached_blocks--;
    }
    if (got >= want) break;
  }
  return taken;
}

}  // namespace

void populate(void* p, size_t nbytes) {
  if (nbytes == 0) return;
#ifdef MADV_POPULATE_WRITE
  constexpr int kPopulateWrite = MADV_POPULATE_WRITE;
#else
  constexpr int kPopulateWrite = 23;  // Linux 5.14+; older kernels answer EINVAL and we write zeros
#endif
  const auto page = uintptr_t(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = begin / page * page, last = (begin + nbytes + page - 1) / page * page;
  if (madvise(reinterpret_cast<void*>(first), last - first, kPopulateWrite) == 0) return;
  std::memset(p, 0, nbytes);
}

void advise_huge_pages(void* p, size_t nbytes) {
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (begin + kHugePage - 1) / kHugePage * kHugePage, last = (begin + nbytes) / kHugePage * kHugePage;
  if (huge_pages_wanted() && last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
}

size_t size_class(size_t n) {
  if (n <= 1024) return n == 0 ? kAlign : (n + kAlign - 1) / kAlign * kAlign;
  // Four classes per power of two: 1.0, 1.25, 1.5, 1.75 x 2^k.
  size_t p = std::bit_floor(n);
  size_t step = p / 4;
  return (n + step - 1) / step * step;
}

void* allocate(size_t nbytes) {
  size_t cls = size_class(nbytes);
  Cache& c = cache();
  std::vector<Block> evicted;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.stats.num_allocs++;
    c.stats.live_blocks++;
    c.stats.allocated_bytes_total += int64_t(cls);
    c.stats.current_bytes += int64_t(cls);
    c.stats.peak_bytes = std::max(c.stats.peak_bytes, c.stats.current_bytes);
    c.stats.peak_live_blocks = std::max(c.stats.peak_live_blocks, c.stats.live_blocks);
    auto it = c.free_lists.find(cls);
    if (it != c.free_lists.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.stats.cached_bytes -= int64_t(cls);
      c.stats.cached_blocks--;
      c.stats.num_cache_hits++;
      return p;
    }
    c.stats.peak_reserved_bytes = std::max(c.stats.peak_reserved_bytes, c.stats.current_bytes + c.stats.cached_bytes);
    if (cls >= kEvictingMiss && c.evicted_for.insert(cls).second) evicted = take_cached(c, cls);
  }
  for (auto [block, size] : evicted) system_free(block, size);
  void* p = system_alloc(cls);
  if (!p) {
    // Give the cache back and try once more before failing.
    empty_cache();
    p = system_alloc(cls);
  }
  if (!p) {
    std::lock_guard<std::mutex> lock(c.mu);
    c.stats.live_blocks--;
    c.stats.num_allocs--;
    c.stats.allocated_bytes_total -= int64_t(cls);
    c.stats.current_bytes -= int64_t(cls);
    raise<Error>("out of memory: could not allocate {} bytes", cls);
  }
  return p;
}

void deallocate(void* p, size_t nbytes) {
  if (!p) return;
  size_t cls = size_class(nbytes);
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.stats.live_blocks--;
  c.stats.num_frees++;
  c.stats.freed_bytes_total += int64_t(cls);
  c.stats.current_bytes -= int64_t(cls);
  if (c.stats.cached_bytes + int64_t(cls) <= c.limit) {
    c.free_lists[cls].push_back(p);
    c.stats.cached_bytes += int64_t(cls);
    c.stats.cached_blocks++;
  } else {
    system_free(p, cls);
  }
}

AllocatorStats stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

void reset_peak() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.stats.peak_bytes = c.stats.current_bytes;
  c.stats.peak_live_blocks = c.stats.live_blocks;
  c.stats.peak_reserved_bytes = c.stats.current_bytes + c.stats.cached_bytes;
}

std::vector<std::pair<std::string, int64_t>> memory_stats() {
  const AllocatorStats s = stats();
  std::vector<std::pair<std::string, int64_t>> out = {
      {"allocated_bytes.all.current", s.current_bytes},
      {"allocated_bytes.all.peak", s.peak_bytes},
      {"allocated_bytes.all.allocated", s.allocated_bytes_total},
      {"allocated_bytes.all.freed", s.freed_bytes_total},
      {"reserved_bytes.all.current", s.current_bytes + s.cached_bytes},
      {"reserved_bytes.all.peak", s.peak_reserved_bytes},
      {"allocation.all.current", s.live_blocks},
      {"allocation.all.peak", s.peak_live_blocks},
      {"allocation.all.allocated", s.num_allocs},
      {"allocation.all.freed", s.num_frees},
      {"inactive_split.all.current", s.cached_blocks},
      {"inactive_split_bytes.all.current", s.cached_bytes},
      {"num_cache_hits", s.num_cache_hits},
  };
  std::sort(out.begin(), out.end());
  return out;
}

void empty_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  for (auto& [size, list] : c.free_lists)
    for (void* p : list) system_free(p, size);
  c.free_lists.clear();
  c.stats.cached_bytes = 0;
  c.stats.cached_blocks = 0;
}

void set_cache_limit(int64_t bytes) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.limit = bytes;
}

}  // namespace foundry::allocator
