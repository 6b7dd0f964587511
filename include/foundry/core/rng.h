// Counter-based random numbers (Philox 4x32-10, Salmon et al. 2011). Element i of a draw uses
// counter (offset + i / 4) and lane i % 4, so the numbers depend only on the seed and the
// position, never on how many threads filled the tensor.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

namespace foundry {

/// Philox4x32-10 block: four 32-bit outputs for a 128-bit counter and 64-bit key.
std::array<uint32_t, 4> philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t key);

/// A generator: a seed and an offset (counters consumed so far). Draws reserve a counter range
/// up front, so concurrent kernels each get disjoint streams.
class Generator {
 public:
  explicit Generator(uint64_t seed = 67280421310721ull) : seed_(seed) {}

  void manual_seed(uint64_t seed) {
    std::lock_guard<std::mutex> lock(mu_);
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    std::lock_guard<std::mutex> lock(mu_);
    seed_ = seed;
    offset_ = offset;
  }
  /// Reserves `n` counters (each gives 4 x 32 random bits) and returns the first one.
  uint64_t reserve(uint64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t first = offset_;
    offset_ += n;
    return first;
  }

 private:
  std::mutex mu_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

/// The process-wide default generator used when an op is given none.
Generator& default_generator();
/// Seeds the default generator (torch.manual_seed).
void manual_seed(uint64_t seed);

/// Helpers for kernels: uniform floats in [0, 1) from random bits.
inline float uniform_float(uint32_t bits) { return float(bits >> 8) * (1.0f / 16777216.0f); }
inline double uniform_double(uint32_t hi, uint32_t lo) {
  uint64_t v = (uint64_t(hi) << 21) ^ (uint64_t(lo) >> 11);
  return double(v & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

}  // namespace foundry
