// GGUF (llama.cpp's model file, versions 2 and 3): little-endian header "GGUF", version, tensor
// count, metadata count; metadata key/value pairs of 13 value types (arrays included); tensor infos
// (name, dims innermost first, ggml type, offset into the data section); the data section starts at
// the next multiple of general.alignment (default 32) and every tensor offset is aligned too.
// The reader maps the file and validates everything against its size before trusting it; the
// writer lays files out the way llama.cpp's gguf writer does and writes atomically.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "foundry/core/tensor.h"

namespace foundry::io {

/// A metadata value: scalars widen to int64/uint64/double, arrays keep their element type code.
struct GGUFValue {
  enum Type : uint32_t {
    UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
    STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
  };
  Type type = UINT32;
  Type array_type = UINT32;  ///< element type when type == ARRAY
  std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<GGUFValue>> value;

  int64_t as_int() const;     ///< integer types (throws ValueError naming the type otherwise)
  double as_double() const;   ///< integer and float types
  const std::string& as_string() const;
  const std::vector<GGUFValue>& as_array() const;
};

struct GGUFTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  ///< as stored: innermost (row length) first
  uint32_t ggml_type = 0;
  uint64_t offset = 0;        ///< from the start of the data section
  uint64_t nbytes = 0;
  /// Shape in row-major order (dims reversed), as a Tensor would have it.
  std::vector<int64_t> shape() const { return {dims.rbegin(), dims.rend()}; }
};

/// Name, bytes per block and values per block of a ggml type; throws ValueError for unknown ids.
struct GGMLTypeInfo {
  const char* name;
  int64_t block_size, block_bytes;
};
const GGMLTypeInfo& ggml_type_info(uint32_t type);

class GGUFFile {
 public:
  /// Maps and validates `path`. Throws IOError/ValueError naming the file and the problem (bad
  /// magic, unsupported version, truncation, absurd counts or dims, unknown types, offsets outside
  /// the file or not aligned, overlapping tensors, duplicate names).
  static GGUFFile open(const std::string& path);
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::map<std::string, GGUFValue>& metadata() const { return metadata_; }
  /// Keys in file order.
  const std::vector<std::string>& keys() const { return keys_; }
  const std::vector<GGUFTensorInfo>& tensors() const { return tensors_; }
  const GGUFTensorInfo& info(const std::string& name) const;
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  /// The tensor's bytes inside the mapping.
  const uint8_t* data(const GGUFTensorInfo& t) const;
  /// F32/F16/BF16 tensors as zero-copy views; block-quantized ones dequantized to float32 when
  /// Foundry knows the format (foundry/quant/block_formats.h), else NotImplementedError.
  Tensor tensor(const std::string& name) const;
  /// The tensor's bytes as a zero-copy uint8 view [rows, bytes per row] of the mapping (rows: the
  /// product of every dimension but the innermost).
  Tensor raw(const std::string& name) const;
  uint64_t data_offset() const { return data_offset_; }

 private:
  Storage storage_;
  std::string path_;
  uint32_t version_ = 3;
  uint64_t alignment_ = 32, data_offset_ = 0;
  std::map<std::string, GGUFValue> metadata_;
  std::vector<std::string> keys_;
  std::vector<GGUFTensorInfo> tensors_;
  std::map<std::string, size_t> index_;  ///< tensor name -> position in tensors_
};

/// A tensor to write: raw bytes in `ggml_type` with row-major `shape` (written innermost first).
struct GGUFTensorData {
  std::string name;
  std::vector<int64_t> shape;
  uint32_t ggml_type = 0;
  std::string bytes;
};

/// Writes a GGUF v3 file (metadata in the given order, then tensor infos, data aligned to
/// `alignment`, which is also recorded as general.alignment when not 32). Atomic.
void write_gguf(const std::string& path, const std::vector<std::pair<std::string, GGUFValue>>& metadata,
                const std::vector<GGUFTensorData>& tensors, uint64_t alignment = 32);

}  // namespace foundry::io
