// Hugging Face causal language models, defined once for training and inference: an architecture
// registry keyed by HF's `architectures` names (and model_type), each a tree of nn::Modules with
// transformers' parameter names; loaded from HF folders (config.json + safetensors) with weights
// used in place over the memory-mapped files where dtype allows (copy-on-write: training writes
// private pages), or created fresh from a config to train from scratch; a preallocated KV cache and
// batched forward with left padding (position ids derived from the attention mask, as HF's generate).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <functional>

#include "foundry/core/tensor.h"
#include "foundry/nn/module.h"

namespace foundry::quant {
struct BlockFormatTraits;
}

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
  /// llama.cpp's per-frequency RoPE factors (a GGUF's rope_freqs.weight, rot_dim / 2 of them):
  /// inverse frequency i is divided by factor i, after any scaling above. Empty: none.
  std::vector<float> rope_freq_factors;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  ///< q/k/v/o projections carry biases
  bool mlp_bias = false;
  int64_t sliding_window = 0;   ///< 0: none; else position i sees keys i-W..i (HF's convention)
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id, pad_token_id;
  std::string json;  ///< config.json as read
};

struct KVCacheRows;

/// Per-layer key/value buffers [batch, kv_heads, capacity, head_dim], allocated once; decoding
/// writes into them without reallocating. `length` positions are filled (same for every row).
///
/// Or paged (KVCache::paged): per layer a pool of fixed-size blocks [num_blocks, kv_heads,
/// block_size, head_dim]; each sequence owns a block table, and full blocks may be shared by
/// several sequences (a common prompt prefix stored once). A forward runs over the sequences
/// bound with bind(), in that order, as its batch rows; length() is their longest cached length,
/// and the caller's attention mask [rows, length() + T] left-pads the shorter rows.
class KVCache {
 public:
  KVCache() = default;
  static KVCache paged(int64_t layers, int64_t kv_heads, int64_t head_dim, DType dtype, const std::string& format,
                       int64_t num_blocks, int64_t block_size);
  bool paged() const { return block_size_ > 0; }
  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return int64_t(refs_.size()); }
  int64_t free_blocks() const { return int64_t(free_.size()); }
  /// Starts sequence `id` on `prefix` (full blocks that already hold its first positions; each
  /// gains a reference).
  void add_sequence(int64_t id, const std::vector<int32_t>& prefix = {});
  /// Drops the sequence's references to its blocks (a block nobody references is free again).
  void remove_sequence(int64_t id);
  /// Allocates blocks for `n` more positions of `id`; false (nothing allocated) when the pool is short.
  bool reserve_sequence(int64_t id, int64_t n);
  int64_t sequence_length(int64_t id) const;
  const std::vector<int32_t>& block_table(int64_t id) const;
  /// Extra references (a prefix cache keeping blocks for later requests).
  void retain_block(int32_t block);
  void release_block(int32_t block);
  int64_t block_refs(int32_t block) const { return refs_.at(size_t(block)); }
  /// The sequences of the next forward, as its batch rows.
  void bind(const std::vector<int64_t>& ids);
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
  /// the cached keys and values) and returns the attention of q [B, H, 1, D] (float32, bfloat16
  /// or float16, H a multiple of Hkv) over the cached positions including them: [B, 1, H * D], in
  /// q's dtype. bias [B, 1 or H, 1, length + 1] is added to the scaled scores. Streams over the
  /// cache in tiles with a running softmax computed in float32, reading float32 / f16 / bf16 rows
  /// in place and other block formats a tile at a time (no dequantized copy of the cache), each kv
  /// head's query group together (no K/V duplication).
  Tensor append_and_attend(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias);
  /// Whether append_and_attend() serves this cache (its values are float32, bfloat16, float16 or
  /// a block format).
  bool streams_attention() const {
    return !format_.empty() || dtype_ == DType::Float32 || dtype_ == DType::BFloat16 || dtype_ == DType::Float16;
  }
  /// A cache of recurrent state only (RWKV, Mamba): `batch` rows, no key/value buffers, no capacity
  /// limit. Models with attention and recurrent layers (Jamba) use an ordinary cache for their
  /// attention layers and state() beside it.
  static KVCache recurrent(int64_t batch);
  /// The recurrent state `slot` of `layer` (RWKV's token shifts and WKV state, Mamba's convolution
  /// window and SSM state), batch first; undefined until the model stores it. A cache holding
  /// state reorders it with its rows and can be truncated only to empty: a state can't be rewound.
  Tensor& state(int64_t layer, int slot);
  bool has_state() const { return !states_.empty(); }

 private:
  /// Writes k, v [B, Hkv, T, D] at positions length()..length()+T of `layer` (bounds checked).
  void store(int64_t layer, const Tensor& k, const Tensor& v);
  /// store()'s checks of k, v for a contiguous cache: layer, shapes, batch and capacity.
  void check_new_rows(int64_t layer, const Tensor& k, const Tensor& v) const;
  /// How k and v's rows are written into a contiguous cache's `layer` row by row (KVCacheRows):
  /// false where only the copy op converts them (a plain cache and a dtype other than its own or
  /// float32 narrowed to it).
  bool new_rows(int64_t layer, const Tensor& k, const Tensor& v, KVCacheRows& rows) const;
  Tensor read(const Tensor& stored, int64_t length) const;
  std::vector<Tensor> k_, v_;  // [B, Hkv, capacity, head_dim] in dtype_, or [.., row bytes] uint8 in format_
  std::map<std::pair<int64_t, int>, Tensor> states_;
  int64_t length_ = 0, capacity_ = 0, batch_ = 0, head_dim_ = 0;
  DType dtype_ = DType::Float32;
  std::string format_;
  const quant::BlockFormatTraits* format_traits_ = nullptr;  // format_'s, looked up once (decode reads it every layer)
  // Paged layout (block_size_ > 0).
  struct Sequence {
    std::vector<int32_t> blocks;
    int64_t length = 0;
  };
  void store_paged(int64_t layer, const Tensor& k, const Tensor& v);
  std::pair<Tensor, Tensor> read_paged(int64_t layer, int64_t T) const;
  Sequence& sequence(int64_t id);
  const Sequence& sequence(int64_t id) const;
  int64_t block_size_ = 0, kv_heads_ = 0;
  std::map<int64_t, Sequence> seqs_;
  std::vector<int64_t> bound_;
  std::vector<int32_t> free_;
  std::vector<int64_t> refs_;
};

namespace hf {
class WeightProducts;
}

/// What a forward with labels returns (HF's CausalLMOutput): the loss, when labels were given, and
/// float32 logits [B, T, vocab].
struct CausalLMOutput {
  Tensor loss;
  Tensor logits;
};

/// A Hugging Face causal language model as one nn::Module tree with transformers' names: its
/// named_parameters() / state_dict() keys are the checkpoint's, it trains (autograd records through
/// every block when a parameter requires grad) and it infers through the fast no-grad kernels of
/// the same blocks (fused decode attention, quantized weight products) when nothing records.
/// load_pretrained() returns it in eval mode, as transformers' from_pretrained does.
class CausalLM : public nn::Module {
 public:
  std::string type_name() const override { return config_.architecture; }
  const ModelConfig& config() const { return config_; }
  /// input_ids int64 [B, T] -> float32 logits [B, T, vocab]. attention_mask [B, past + T] (1 keep,
  /// 0 padding; undefined: all ones) covers the cached positions too; with a cache the new keys
  /// and values are appended to it.
  /// With last_positions > 0 only the logits of the last that many positions are computed
  /// ([B, last_positions, vocab]; generation needs one, and the LM head is the largest product).
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache = nullptr,
                 int64_t last_positions = 0);
  Tensor forward(const Tensor& input_ids) override { return forward(input_ids, Tensor()); }
  /// HF's model(input_ids, attention_mask=..., labels=...): logits, and with labels [B, T] (int64,
  /// -100 ignored) the mean cross-entropy of each position's logits against the next label
  /// (labels shifted left by one, as transformers does).
  CausalLMOutput operator()(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& labels = {});
  /// HF's shifted next-token cross-entropy of logits [B, T, V] against labels [B, T].
  static Tensor causal_lm_loss(const Tensor& logits, const Tensor& labels);
  /// Each decoder block recomputes its activations in backward instead of keeping them
  /// (transformers' gradient_checkpointing_enable); only while training and recording.
  void set_gradient_checkpointing(bool on) { gradient_checkpointing_ = on; }
  bool gradient_checkpointing() const { return gradient_checkpointing_; }
  virtual KVCache make_cache(int64_t batch, int64_t capacity) const;
  /// Whether the model carries recurrent state between forwards (RWKV, Mamba, Jamba): its cache
  /// continues a sequence but can't be rewound to a shorter prefix.
  virtual bool recurrent() const { return false; }
  /// The final hidden states [B, T, hidden_size] in float32 — after the last norm, transformers'
  /// last_hidden_state — for embeddings. No gradient.
  Tensor hidden_states(const Tensor& input_ids, const Tensor& attention_mask = {});
  /// Parameters by their HF names (tied tensors once).
  std::map<std::string, Tensor> weights() const;
  /// How a parameter is held: its dtype's name, or the block format of adopted quantized bytes
  /// (a GGUF file's, an NF4 folder's), and the bytes it takes.
  struct StoredWeight {
    std::string kind;
    int64_t numel = 0, bytes = 0;
  };
  std::map<std::string, StoredWeight> stored_weights() const;
  DType dtype() const { return dtype_; }
  /// Weight products use `format` ("q8_0", "q4_K", ...) copies of the weights, quantized on first
  /// use: up to kQuantizedMaxRows activation rows (decode) with the quantized matrix-vector kernels,
  /// more rows (prefill) through a float GEMM on the dequantized weight. "" turns it off (adopted
  /// weights stay quantized). Products that autograd records use the float weights.
  void set_weight_quantization(const std::string& format);
  /// Makes products with the parameter `name` ([out, in]) use `bytes`: its rows already quantized in
  /// `format`, used in place (a GGUF file's tensor, an NF4 folder's weight). The dense parameter is
  /// then never read (products and an embedding's lookups read the bytes, state_dict dequantizes
  /// them), so a loader gives a placeholder; such a model refuses to train.
  void adopt_quantized(const std::string& name, const std::string& format, const Tensor& bytes);
  const std::string& weight_quantization() const;
  static constexpr int64_t kQuantizedMaxRows = 16;
  /// Prefill products with quantized weights: "integer" (the rows quantized as decode's, integer
  /// dot products: decode's numbers; where the CPU has a kernel for the format, else as "auto"),
  /// "bfloat16" (a bf16 GEMM on the dequantized weights), "float32", or "auto" (the default:
  /// integer where the CPU has AVX-512 VNNI (on AMX-INT8 tiles where it has them), else bfloat16
  /// where it has native bf16 dot products, else integer where there is a kernel (AVX2), else
  /// float32).
  void set_quantized_prefill(const std::string& mode);
  /// Format of the KV caches make_cache() creates ("" = the compute dtype; "f16", "bf16", "q8_0").
  void set_kv_cache_format(const std::string& format);
  const std::string& kv_cache_format() const { return kv_format_; }
  /// Whether some weight products read quantized bytes with no float weight behind them.
  bool has_adopted_quantized_weights() const;
  /// Module::state_dict with each adopted weight (whose parameter is a placeholder) dequantized:
  /// the values the model computes with.
  nn::NamedTensors state_dict() const;
  /// Module::load_state_dict, refusing (ValueError) a tensor for an adopted weight: products read
  /// the quantized bytes, so the copy would change nothing the model computes.
  nn::IncompatibleKeys load_state_dict(const nn::NamedTensors& state, bool strict = true);
  /// A model computing with quantized weights (set_weight_quantization, or adopted bytes) is for
  /// inference: its parameters stop requiring grad, so every forward takes the quantized products
  /// (as bitsandbytes' frozen weights). requires_grad_ on them turns training back on, in float.
  void freeze_if_quantized();

 protected:
  CausalLM(const ModelConfig& c, std::shared_ptr<hf::WeightProducts> products);
  /// The architecture's forward: logits (any float dtype) of the last `last_positions` positions.
  virtual Tensor run(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache, int64_t last_positions) = 0;
  /// How every run() ends: the LM head over the final hidden states, or the states themselves
  /// when hidden_states() asked for them.
  Tensor head(nn::Module& lm_head, const Tensor& final_hidden) { return return_hidden_ ? final_hidden : lm_head.forward(final_hidden); }
  ModelConfig config_;
  DType dtype_ = DType::Float32;
  std::shared_ptr<hf::WeightProducts> products_;

 private:
  std::string kv_format_;
  bool gradient_checkpointing_ = false;
  bool return_hidden_ = false;
};

struct LoadOptions {
  /// Compute dtype: float32 (default; f16/bf16 checkpoints are converted) or the checkpoint's own.
  std::optional<DType> dtype = DType::Float32;
  /// Weight format of the products ("" dense, "q8_0", ...); see CausalLM::set_weight_quantization.
  std::string quantize;
  /// KV cache format ("" the compute dtype, "f16", "bf16", "q8_0"); see CausalLM::set_kv_cache_format.
  std::string kv_cache;
  /// Prefill with quantized weights: "auto", "integer", "float32", "bfloat16"; see CausalLM::set_quantized_prefill.
  std::string quantized_prefill = "auto";
  /// For inference: a bfloat16 checkpoint computed in its own dtype (dtype nullopt or BFloat16), with
  /// no `quantize`, has its bf16 matrices packed without loss (~12.4 bits a weight where the CPU has
  /// the kernels: quant::WeightLayout::PackedBF16), as `quantize = "bf16"` does for a float32
  /// computation. Decode streams a quarter fewer bytes and computes the same numbers; the model is
  /// frozen as a quantized one is (freeze_if_quantized). The command line's inference commands set it.
  bool pack_bf16 = false;
};

/// Loads an HF model folder. Throws with a message naming the problem for a missing or malformed
/// config.json, an unknown architecture, config values that change the math in ways not
/// implemented, missing or mis-shaped weights, and malformed safetensors files.
std::unique_ptr<CausalLM> load_pretrained(const std::string& dir, const LoadOptions& options = {});

/// Reads and normalises config.json (no weights).
ModelConfig read_config(const std::string& dir);

/// Architecture names the registry knows.
std::vector<std::string> supported_architectures();

/// The HF `architectures` name of a model_type ("gpt2" -> "GPT2LMHeadModel", "llama" ->
/// "LlamaForCausalLM", ...); an `architectures` name is returned as is. Throws naming the known ones.
std::string architecture_for(const std::string& model_type_or_architecture);

/// A fresh model from a config.json object (HF keys; "architectures" or "model_type" names the
/// architecture, other keys take transformers' defaults), initialised as transformers'
/// _init_weights does (normal(0, initializer_range), zero biases, unit norms), in training mode,
/// float32. Draws from the default generator (manual_seed makes it reproducible).
std::unique_ptr<CausalLM> create_model(const std::string& config_json);

/// Writes `model` as an HF folder: config.json (the model's config), model.safetensors (float32
/// unless keep_dtype; tied duplicates left out, as transformers saves), atomically per file; with
/// `tokenizer_files`, copies of them.
void save_pretrained(const CausalLM& model, const std::string& dir, const std::vector<std::string>& tokenizer_files = {},
                     bool keep_dtype = false);

/// What save_pretrained writes, for any module: its named parameters (tied tensors once) as
/// model.safetensors, `config_json` with torch_dtype set, and copies of the tokenizer files.
void save_module_folder(const nn::Module& model, const std::string& config_json, const std::string& dir,
                        const std::vector<std::string>& tokenizer_files, bool keep_dtype, DType dtype);

}  // namespace foundry::models
