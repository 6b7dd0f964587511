// `foundry quantize`: an HF model folder with its linear weights stored quantized in safetensors.
// Layouts (docs/quantization.md):
// - nf4 / int8: bitsandbytes' serialization, as transformers saves a bitsandbytes-quantized model
//   ("X.weight" packed NF4 codes + "X.weight.absmax" / ".quant_map" / ".nested_absmax" /
//   ".nested_quant_map" / ".quant_state.bitsandbytes__nf4"; LLM.int8: "X.weight" int8 + "X.SCB"
//   + "X.weight_format"), config.json quantization_config {"quant_method": "bitsandbytes", ...};
// - int4: "X.weight.qweight" (uint8, two values a byte, the first in the low nibble),
//   "X.weight.scales" (fp16 per group), "X.weight.zeros" (uint8, asymmetric only),
//   quantization_config {"quant_method": "foundry", "bits": 4, "group_size": G, "symmetric": B}.
// Embeddings, the LM head, norms and biases stay as they were.
#pragma once

#include <cstdint>
#include <string>

namespace foundry::models {

struct QuantizeFolderOptions {
  std::string type;         ///< "nf4", "int8" or "int4"
  int64_t group_size = 128;  ///< int4: 32, 64 or 128
  bool symmetric = true;     ///< int4
  bool double_quant = true;  ///< nf4: quantize the block maxima too (bitsandbytes' compress_statistics)
};

/// Reads the folder `dir` and writes `out` (created if missing): model.safetensors (atomic), the
/// config with its quantization_config, and the folder's other files (tokenizer, generation config).
/// Returns the number of weights quantized.
int64_t quantize_folder(const std::string& dir, const std::string& out, const QuantizeFolderOptions& options);

}  // namespace foundry::models
