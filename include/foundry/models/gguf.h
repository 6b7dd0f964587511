// Llama-architecture GGUF files (llama.cpp's tensor names and hyper-parameter keys): convert an HF
// Llama/Mistral folder to GGUF (f32, f16, q8_0 or q4_0 matrices), and load such a file as a model.
#pragma once

#include <memory>
#include <string>

#include "foundry/models/pretrained.h"

namespace foundry::text {
class Tokenizer;
}

namespace foundry::models {

/// Writes `out` from the HF folder `dir`; `type` is f32, f16, q8_0 or q4_0 for the matrices
/// (norms stay float32). Q and K rows are permuted to llama.cpp's interleaved rotary layout.
void convert_to_gguf(const std::string& dir, const std::string& out, const std::string& type);

/// Whether `path` is a file starting with the GGUF magic.
bool is_gguf_file(const std::string& path);

/// Loads a llama GGUF file (quantized tensors dequantized to the compute dtype).
std::unique_ptr<CausalLM> load_gguf(const std::string& path, const LoadOptions& options = {});

/// The tokenizer stored in a GGUF file: tokenizer.huggingface.json when present, else llama.cpp's
/// "gpt2" keys (byte-level BPE); nullptr when the file has none.
std::unique_ptr<text::Tokenizer> load_gguf_tokenizer(const std::string& path);

}  // namespace foundry::models
