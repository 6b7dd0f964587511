// The safetensors header, parsed and validated without the tensor core (so the libFuzzer target
// tests/fuzz/fuzz_safetensors.cpp can build this file alone). The rules are upstream's
// (huggingface/safetensors, safetensors/src/tensor.rs, SafeTensors::read_metadata and
// Metadata::validate); docs/formats.md lists them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "foundry/core/dtype.h"

namespace foundry::io::detail {

/// Upstream's limit on the JSON header (MAX_HEADER_SIZE).
inline constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

struct SafetensorsDType {
  const char* name;  // "F32"
  DType dtype;
  int64_t size;      // bytes per element
  int rank;          // upstream's Dtype enum order; the writer sorts by it, descending
};
/// The 15 dtypes Foundry reads and writes.
const std::vector<SafetensorsDType>& safetensors_dtypes();
/// nullptr when unknown.
const SafetensorsDType* safetensors_dtype(std::string_view name);
const SafetensorsDType& safetensors_dtype(DType dtype);

struct SafetensorsEntry {
  std::string name;
  const SafetensorsDType* dtype = nullptr;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets inside the data section
};

struct SafetensorsHeader {
  uint64_t header_len = 0;       // N, the JSON length (bytes 8 .. 8+N)
  uint64_t data_start = 0;       // 8 + N
  std::vector<SafetensorsEntry> entries;  // ordered by data offsets (file order)
  std::map<std::string, std::string> metadata;
  bool has_metadata = false;
};

/// Parses and validates the header of a whole file image `data[0, size)`. Every violation throws
/// IOError "<what>: <rule>" naming the tensor where there is one. Reads only the header bytes.
SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, const std::string& what);

/// Strict UTF-8 check (no overlongs, surrogates or code points above U+10FFFF), as Rust's
/// str::from_utf8. Returns the offset of the first bad byte, or npos.
size_t find_invalid_utf8(std::string_view s);

/// JSON string literal with serde_json's escaping (", \, \b \f \n \r \t, other controls \u00XX).
std::string json_quote(std::string_view s);

/// The JSON header text (unpadded), in upstream's layout: `__metadata__` first (keys sorted),
/// then the entries in the given order, each {"dtype","shape","data_offsets"}, compact.
std::string safetensors_header_json(const std::vector<SafetensorsEntry>& entries,
                                    const std::map<std::string, std::string>& metadata, bool with_metadata);

/// A sharded checkpoint's index (model.safetensors.index.json): weight_map name -> shard file
/// name, plus the raw "metadata" object. Shard names must be plain file names (no folders, no
/// ".."), so an index cannot point outside its folder.
struct SafetensorsIndex {
  std::map<std::string, std::string> weight_map;
  std::string metadata_json = "{}";
  int64_t total_size = -1;  // metadata.total_size when present
};
SafetensorsIndex parse_safetensors_index(std::string_view text, const std::string& what);

}  // namespace foundry::io::detail
