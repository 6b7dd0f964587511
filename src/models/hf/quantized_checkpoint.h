// Reading the weights of a `foundry quantize` folder (foundry/models/quantized_folder.h) back:
// every quantized weight is dequantized to float32 exactly as its format defines; NF4 weights whose
// rows are whole 64-value blocks can instead stay NF4 in memory (the format table's "nf4" rows).
#pragma once

#include <optional>
#include <string>

#include "foundry/core/tensor.h"
#include "foundry/io/safetensors.h"

namespace foundry::models::hf {

class QuantizedCheckpoint {
 public:
  /// `config_json`: the folder's config.json text; inactive without a quantization_config.
  QuantizedCheckpoint(const std::string& dir, const std::string& config_json, const io::ShardedSafetensors& st);
  bool active() const { return !method_.empty(); }
  /// True when `name` ("...weight") is stored quantized.
  bool quantized(const std::string& name) const;
  /// Its float32 values, checked against `shape`.
  Tensor dequantize(const std::string& name, const Shape& shape) const;
  /// NF4 weights with rows of whole 64-value blocks: the in-memory "nf4" rows (uint8 bytes,
  /// 36 per block) equal to dequantize()'s values; nullopt otherwise.
  std::optional<Tensor> nf4_rows(const std::string& name, const Shape& shape) const;

 private:
  std::string dir_, method_;
  int64_t bits_ = 0, group_ = 0;
  bool symmetric_ = true;
  const io::ShardedSafetensors* st_;
};

}  // namespace foundry::models::hf
