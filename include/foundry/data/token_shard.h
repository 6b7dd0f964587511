// Token shards: llm.c's binary format, memory-mapped. A 256 x int32 header (magic 20240520,
// version, token count; version 1 stores uint16 tokens, version 2 uint32), then the tokens.
// Files larger than memory are fine: only touched pages are read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "foundry/core/storage.h"

namespace foundry::data {

inline constexpr int32_t kShardMagic = 20240520;

class TokenShard {
 public:
  /// Maps and validates a shard; throws IOError naming the file and the problem (bad magic,
  /// unknown version, size not matching the header).
  static TokenShard open(const std::string& path);

  int64_t size() const { return count_; }
  uint32_t operator[](int64_t i) const {
    return wide_ ? static_cast<const uint32_t*>(tokens_)[i] : static_cast<const uint16_t*>(tokens_)[i];
  }
  /// Copies tokens [begin, begin + n) into out.
  void copy(int64_t begin, int64_t n, uint32_t* out) const;
  const std::string& path() const { return path_; }
  bool wide() const { return wide_; }

 private:
  std::string path_;
  Storage storage_;
  const void* tokens_ = nullptr;
  int64_t count_ = 0;
  bool wide_ = false;
};

/// Writes tokens atomically; uint16 (version 1) when every token fits, else uint32 (version 2).
void write_token_shard(const std::string& path, const std::vector<uint32_t>& tokens);

}  // namespace foundry::data
