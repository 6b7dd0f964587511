// The caching CPU allocator. Blocks are 64-byte aligned and rounded up to size classes
// (multiples of 64 bytes up to 1 KiB, then four classes per power of two, so at most 25% slack).
// Freed blocks go to a per-class free list and are reused; empty_cache() returns them to the OS.
// Blocks of 1 MiB and more are mapped directly; the first cache miss of a class of 64 MiB or more returns as
// many cached bytes of other classes to the OS, so phases with different block sizes (activations,
// then optimizer state) don't keep both resident. Blocks of 4 MiB and more are 2 MiB aligned and
// advised to use transparent huge pages (env FOUNDRY_NO_HUGE_PAGES=1 turns that off).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace foundry {

struct AllocatorStats {
  int64_t current_bytes = 0;   ///< bytes in live blocks (size-class bytes)
  int64_t peak_bytes = 0;      ///< high-water mark of current_bytes since start or reset_peak
  int64_t cached_bytes = 0;    ///< bytes held in free lists, ready for reuse
  int64_t live_blocks = 0;     ///< blocks handed out and not yet freed
  int64_t num_allocs = 0;      ///< allocate() calls since start
  int64_t num_cache_hits = 0;  ///< allocate() calls served from a free list
  int64_t num_frees = 0;       ///< deallocate() calls since start
  int64_t peak_live_blocks = 0;
  int64_t cached_blocks = 0;   ///< blocks in the free lists
  int64_t peak_reserved_bytes = 0;  ///< high-water mark of current_bytes + cached_bytes
  int64_t allocated_bytes_total = 0, freed_bytes_total = 0;  ///< cumulative size-class bytes
};

namespace allocator {
/// Returns a 64-byte aligned block of at least `nbytes` (nbytes may be 0). Throws on OOM.
void* allocate(size_t nbytes);
/// Returns a block from allocate(); `nbytes` must be the size that was asked for.
void deallocate(void* p, size_t nbytes);
AllocatorStats stats();
/// Resets the peaks (bytes, reserved bytes, blocks) to the current values.
void reset_peak();
/// The statistics under PyTorch's torch.cuda.memory_stats() key names where they apply
/// ("allocated_bytes.all.current" / ".peak" / ".allocated" / ".freed", "reserved_bytes.all.current"
/// / ".peak", "allocation.all.current" / ".peak" / ".allocated" / ".freed",
/// "inactive_split.all.current" / "inactive_split_bytes.all.current" for the cached blocks,
/// "num_cache_hits"), sorted by name.
std::vector<std::pair<std::string, int64_t>> memory_stats();
/// Frees every cached block.
void empty_cache();
/// Blocks are not cached beyond this many bytes (default 4 GiB, env FOUNDRY_CACHE_LIMIT_MB).
void set_cache_limit(int64_t bytes);
/// The size class a request of `nbytes` is rounded to.
size_t size_class(size_t nbytes);
/// Makes the pages of [p, p + nbytes) resident and writable now (one madvise(MADV_POPULATE_WRITE)
/// where the kernel has it, else writing zeros over the range), for buffers that are written a
/// little at a time later, such as a KV cache: otherwise every first touch of a page during decoding
/// is a page fault inside the timed step. The contents become unspecified (zeros where written).
void populate(void* p, size_t nbytes);
/// Asks for transparent huge pages over the whole 2 MiB pages inside [p, p + nbytes), before they
/// are first written (advisory; none with FOUNDRY_NO_HUGE_PAGES set). For buffers used whole
/// that the allocator's own advice (the part every request of a size class uses) leaves partly
/// in 4 KiB pages, such as the chunks quantized weights are carved from.
void advise_huge_pages(void* p, size_t nbytes);
}  // namespace allocator

/// allocator::memory_stats(): torch.cuda.memory_stats()'s names for Foundry's CPU allocator.
inline std::vector<std::pair<std::string, int64_t>> memory_stats() { return allocator::memory_stats(); }
/// torch.cuda.reset_peak_memory_stats(): every peak back to the current value.
inline void reset_peak_memory_stats() { allocator::reset_peak(); }

}  // namespace foundry
