// Pretrained causal language models from Hugging Face folders (config.json + safetensors), run
// for inference: an architecture registry keyed by HF's `architectures` names, weights used in
// place over the memory-mapped files where dtype allows, a preallocated KV cache, and batched
// forward with left padding (position ids derived from the attention mask, as HF's generate).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "foundry/core/tensor.h"

namespace foundry::models {

/// What the architectures read from config.json, normalised across their different key names.
struct ModelConfig {
  std::string architecture;  ///< e.g. "LlamaForCausalLM"
  std::string model_type;    ///< e.g. "llama"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;
  int64_t max_positions = 0;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  /// rope_scaling: type "" (none), "linear", "dynamic" or "llama3", with its parameters.
  std::string rope_type;
  double rope_factor = 1.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_original_max_positions = 0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  ///< q/k/v/o projections carry biases
  bool mlp_bias = false;
  int64_t sliding_window = 0;   ///< 0: none; else position i sees keys i-W..i (HF's convention)
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id, pad_token_id;
  std::string json;  ///< config.json as read
};

/// Per-layer key/value buffers [batch, kv_heads, capacity, head_dim], allocated once; decoding
/// writes into them without reallocating. `length` positions are filled (same for every row).
class KVCache {
 public:
  KVCache() = default;
  /// `format`: "" keeps keys and values in `dtype`; a format of foundry/quant/block_formats.h
  /// ("f16", "bf16", "q8_0", ...; head_dim must be whole blocks of it) stores each head's row in it,
  /// and append() returns them dequantized to `dtype`.
  KVCache(int64_t layers, int64_t batch, int64_t kv_heads, int64_t capacity, int64_t head_dim, DType dtype,
          const std::string& format = "");
  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  int64_t batch() const { return batch_; }
  /// Writes k, v [B, Hkv, T, D] after the filled part of `layer` and returns views of the filled
  /// part including them. Throws when the cache would overflow.
  std::pair<Tensor, Tensor> append(int64_t layer, const Tensor& k, const Tensor& v);
  /// Marks T more positions filled (after every layer appended them).
  void advance(int64_t T);
  /// Forgets positions from `length` on (keeps a shared prompt prefix for reuse).
  void truncate(int64_t length);
  /// Grows the buffers to at least `capacity` positions, keeping what is cached.
  void reserve(int64_t capacity);
  /// Row i of the cache becomes old row rows[i] (beam search keeps its surviving beams).
  void reorder(const std::vector<int64_t>& rows);
  /// Bytes the cache holds.
  int64_t nbytes() const;
  /// Stores k, v [B, Hkv, 1, D] after the filled part of `layer` (as append, without returning
  /// the cached keys and values) and returns the attention of q [B, H, 1, D] (float32, H a
  /// multiple of Hkv) over the cached positions including them: [B, 1, H * D]. bias [B, 1 or H,
  /// 1, length + 1] is added to the scaled scores. Streams over the cache in tiles with a running
  /// softmax, reading quantized rows in place (no dequantized copy of the cache), each kv head's
  /// query group together (no K/V duplication). Float32 caches and block formats only.
  Tensor append_and_attend(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias);
  /// Whether append_and_attend() serves this cache (its values are float32 or a block format).
  bool streams_attention() const { return !format_.empty() || dtype_ == DType::Float32; }

 private:
  /// Writes k, v [B, Hkv, T, D] at positions length()..length()+T of `layer` (bounds checked).
  void store(int64_t layer, const Tensor& k, const Tensor& v);
  Tensor read(const Tensor& stored, int64_t length) const;
  std::vector<Tensor> k_, v_;  // [B, Hkv, capacity, head_dim] in dtype_, or [.., row bytes] uint8 in format_
  int64_t length_ = 0, capacity_ = 0, batch_ = 0, head_dim_ = 0;
  DType dtype_ = DType::Float32;
  std::string format_;
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  const ModelConfig& config() const { return config_; }
  /// input_ids int64 [B, T] -> float32 logits [B, T, vocab]. attention_mask [B, past + T] (1 keep,
  /// 0 padding; undefined: all ones) covers the cached positions too; with a cache the new keys
  /// and values are appended to it.
  /// With last_positions > 0 only the logits of the last that many positions are computed
  /// ([B, last_positions, vocab]; generation needs one, and the LM head is the largest product).
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask = {}, KVCache* cache = nullptr,
                 int64_t last_positions = 0) {
    return run(input_ids, attention_mask, cache, last_positions);
  }
  KVCache make_cache(int64_t batch, int64_t capacity) const;
  /// Weights by their HF names (as used: tied tensors once).
  const std::map<std::string, Tensor>& weights() const { return weights_; }
  int64_t num_parameters() const;
  DType dtype() const { return dtype_; }
  /// Weight products use `format` ("q8_0", "q4_K", ...) copies of the weights, quantized on first
  /// use: up to kQuantizedMaxRows activation rows (decode) with the quantized matrix-vector kernels,
  /// more rows (prefill) through a float GEMM on the dequantized weight. "" turns it off (adopted
  /// weights stay quantized).
  void set_weight_quantization(const std::string& format);
  /// Makes products with `weight` ([out, in], a tensor of this model) use `bytes`: its rows already
  /// quantized in `format`, used in place (a GGUF file's tensor). The dense tensor is then read only
  /// by non-product uses (an embedding lookup), so a loader may pass a placeholder for it.
  void adopt_quantized(const Tensor& weight, const std::string& format, const Tensor& bytes);
  const std::string& weight_quantization() const { return qformat_; }
  static constexpr int64_t kQuantizedMaxRows = 16;
  /// Prefill products with quantized weights: "bfloat16" (a bf16 GEMM on the dequantized weights),
  /// "float32", or "auto" (the default: bfloat16 where the CPU has native bf16 dot products).
  void set_quantized_prefill(const std::string& mode);
  /// Format of the KV caches make_cache() creates ("" = the compute dtype; "f16", "bf16", "q8_0").
  void set_kv_cache_format(const std::string& format);
  const std::string& kv_cache_format() const { return kv_format_; }

 protected:
  /// x @ w^T + b (w [out, in], as nn.Linear), through the quantized copy of w when enabled.
  Tensor proj(const Tensor& x, const Tensor& w, const Tensor& b = {}) const;
  /// x @ w + b (w [in, out], as HF's Conv1D).
  Tensor proj_t(const Tensor& x, const Tensor& w, const Tensor& b = {}) const;
  virtual Tensor run(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache, int64_t last_positions) = 0;
  ModelConfig config_;
  std::map<std::string, Tensor> weights_;
  DType dtype_ = DType::Float32;

 private:
  struct QuantizedWeight;
  const QuantizedWeight* quantized(const Tensor& w, bool transposed) const;
  std::string qformat_, kv_format_;
  bool prefill_bf16_ = false;
  mutable std::map<const void*, std::shared_ptr<QuantizedWeight>> quantized_;
};

struct LoadOptions {
  /// Compute dtype: float32 (default; f16/bf16 checkpoints are converted) or the checkpoint's own.
  std::optional<DType> dtype = DType::Float32;
  /// Weight format of the products ("" dense, "q8_0", ...); see CausalLM::set_weight_quantization.
  std::string quantize;
  /// KV cache format ("" the compute dtype, "f16", "bf16", "q8_0"); see CausalLM::set_kv_cache_format.
  std::string kv_cache;
  /// Prefill with quantized weights: "auto", "float32", "bfloat16"; see CausalLM::set_quantized_prefill.
  std::string quantized_prefill = "auto";
};

/// Loads an HF model folder. Throws with a message naming the problem for a missing or malformed
/// config.json, an unknown architecture, config values that change the math in ways not
/// implemented, missing or mis-shaped weights, and malformed safetensors files.
std::unique_ptr<CausalLM> load_pretrained(const std::string& dir, const LoadOptions& options = {});

/// Reads and normalises config.json (no weights).
ModelConfig read_config(const std::string& dir);

/// Architecture names the registry knows.
std::vector<std::string> supported_architectures();

}  // namespace foundry::models
