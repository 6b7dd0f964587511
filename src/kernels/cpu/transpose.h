// The one tiled transpose: copy_into's x.t().contiguous() (a loaded Conv1D weight laid out as the
// rows of its transpose) and the attention kernels' K / V transposes.
#pragma once

#include <algorithm>
#include <cstdint>

namespace foundry::kernels {

/// Which side a tile's innermost loop runs along: contiguous reads of src, or contiguous writes of
/// dst. Each caller takes the one it measured faster (below).
enum class TileWalk { AlongSource, AlongDestination };

/// dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols; other dst entries untouched, in 16 x
/// 16 tiles. 768 x 3072 float32 x.t().contiguous(), 2 threads: 3.3-3.6 ms with a strided loop,
/// 0.8-1.0 with these tiles (64 x 64: 3.6, 32 x 32: 1.49). AlongSource walks a band of dst's rows
/// at a time, AlongDestination a band of src's rows. Medians of 200 copies of that matrix,
/// alternating processes: float32 along the source 0.87-0.92 ms, along the destination 1.33-1.39
/// (in bands of 85 rows); f16 along the source 0.63-0.64, along the destination 0.53. SDPA's K
/// transposes (B1 H12 T512 D64, 2 threads) along the destination 2.04-2.29 ms, along the source
/// 2.46-2.48.
template <TileWalk kWalk, typename T>
void transpose_tiles(const T* src, int64_t lds, T* dst, int64_t ldd, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 16;
  const auto tile = [&](int64_t r0, int64_t c0) {
    const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
    if constexpr (kWalk == TileWalk::AlongSource) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) dst[c * ldd + r] = src[r * lds + c];
    } else {
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) dst[c * ldd + r] = src[r * lds + c];
    }
  };
  if constexpr (kWalk == TileWalk::AlongSource) {
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t r0 = 0; r0 < rows; r0 += kTile) tile(r0, c0);
  } else {
    for (int64_t r0 = 0; r0 < rows; r0 += kTile)
      for (int64_t c0 = 0; c0 < cols; c0 += kTile) tile(r0, c0);
  }
}

}  // namespace foundry::kernels
