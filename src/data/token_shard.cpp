#include "foundry/data/token_shard.h"

#include <algorithm>
#include <cstring>

#include "foundry/core/error.h"
#include "foundry/io/npy.h"

namespace foundry::data {

TokenShard TokenShard::open(const std::string& path) {
  TokenShard s;
  s.path_ = path;
  s.storage_ = map_file_storage(path);
  size_t bytes = s.storage_->nbytes();
  if (bytes < 256 * 4) raise<IOError>("token shard '{}': {} bytes is smaller than the 1024-byte header", path, bytes);
  const auto* header = static_cast<const int32_t*>(s.storage_->data());
  if (header[0] != kShardMagic)
    raise<IOError>("token shard '{}': bad magic {} (expected {}); not a token shard", path, header[0], kShardMagic);
  if (header[1] != 1 && header[1] != 2)
    raise<IOError>("token shard '{}': unsupported version {} (1: uint16 tokens, 2: uint32)", path, header[1]);
  s.wide_ = header[1] == 2;
  s.count_ = int64_t(uint32_t(header[2]));
  size_t expected = 1024 + size_t(s.count_) * (s.wide_ ? 4 : 2);
  if (bytes != expected)
    raise<IOError>("token shard '{}': header says {} tokens ({} bytes) but the file has {} bytes (truncated?)", path,
                   s.count_, expected, bytes);
  s.tokens_ = static_cast<const char*>(s.storage_->data()) + 1024;
  return s;
}

void TokenShard::copy(int64_t begin, int64_t n, uint32_t* out) const {
  FOUNDRY_CHECK_AS(IndexError, begin >= 0 && n >= 0 && begin + n <= count_,
                   "token shard '{}': range [{}, {}) outside its {} tokens", path_, begin, begin + n, count_);
  if (wide_) {
    std::memcpy(out, static_cast<const uint32_t*>(tokens_) + begin, size_t(n) * 4);
  } else {
    const auto* p = static_cast<const uint16_t*>(tokens_) + begin;
    for (int64_t i = 0; i < n; ++i) out[i] = p[i];
  }
}

void write_token_shard(const std::string& path, const std::vector<uint32_t>& tokens) {
  FOUNDRY_CHECK_AS(ValueError, tokens.size() <= 0xffffffffull, "token shard '{}': too many tokens ({})", path,
                   tokens.size());
  bool wide = std::any_of(tokens.begin(), tokens.end(), [](uint32_t t) { return t > 0xffff; });
  std::string bytes(1024, '\0');
  int32_t header[3] = {kShardMagic, wide ? 2 : 1, int32_t(uint32_t(tokens.size()))};
  std::memcpy(bytes.data(), header, sizeof(header));
  if (wide) {
    bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4);
  } else {
    std::vector<uint16_t> narrow(tokens.begin(), tokens.end());
    bytes.append(reinterpret_cast<const char*>(narrow.data()), narrow.size() * 2);
  }
  io::write_file_atomic(path, bytes);
}

}  // namespace foundry::data
