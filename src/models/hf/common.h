// Shared pieces of the pretrained architectures: the registry, config reading helpers, and the
// blocks (rotary embeddings, masks and positions from the attention mask, attention over the KV
// cache) that each architecture file composes.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <unordered_map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "foundry/models/pretrained.h"

namespace foundry::kernels {
struct HalfConvert;
}

namespace foundry::models {

/// New key and value rows [B, Hkv, T, D] and where they go in a contiguous cache's layer, written one
/// (batch row, kv head) at a time: by store() for a block-format cache, and by decode attention's
/// job, each chunk its own heads' before it reads them. The same bits as the copy op / the format.
struct KVCacheRows {
  Tensor k, v;  // contiguous: float32 for a block format, else the cache's dtype or float32
  // Their data and the cache's, as raw pointers: store() runs on the pool's workers, which would
  // otherwise read the tensors' headers, lines the caller's reference counting writes.
  const uint8_t *k_data = nullptr, *v_data = nullptr;
  uint8_t *k_cache = nullptr, *v_cache = nullptr;
  int64_t T = 0, in_row = 0, out_row = 0, capacity = 0, position = 0, Hkv = 0, D = 0;
  void (*quantize)(const float* x, void* y, int64_t k) = nullptr;  // a block format's exact quantizer
  const kernels::HalfConvert* narrow = nullptr;                     // float32 rows into a 16-bit cache
  /// Batch row b, kv head g: its T new positions of keys and values.
  void store(int64_t b, int64_t g) const;
};

}  // namespace foundry::models

namespace foundry::models::hf {

/// How a loader may lay a matrix out in memory. A Conv1D weight keeps its [in, out] shape (HF's
/// layout and state_dict entry) but may be stored as the rows of its transpose, strides (1, in),
/// as llama.cpp's GGUF stores GPT-2's: decode's products then stream it in the rows form.
enum class Layout { RowMajor, RowsOfTranspose };

using nlohmann::json;

class WeightSource;

struct Architecture {
  std::vector<std::string> names;  ///< HF `architectures` entries
  std::string model_type;          ///< config.json's model_type ("llama"), as `[model] architecture` names it
  /// Fills the architecture's config fields from config.json; throws for values it doesn't implement.
  std::function<void(const json& j, ModelConfig& c)> parse;
  /// The module tree, its parameters read from `ws` (a checkpoint or an initialiser).
  std::function<std::unique_ptr<CausalLM>(const ModelConfig& c, const WeightSource& ws)> build;
};

const std::vector<Architecture>& architectures();

// One registration function per architecture file.
Architecture llama_architecture();
Architecture mistral_architecture();
Architecture mixtral_architecture();
Architecture qwen2_architecture();
Architecture qwen2_moe_architecture();
Architecture gemma_architecture();
Architecture gpt2_architecture();
Architecture gpt_neox_architecture();
Architecture phi_architecture();
Architecture opt_architecture();
Architecture bloom_architecture();
Architecture falcon_architecture();
Architecture rwkv_architecture();
Architecture mamba_architecture();
Architecture jamba_architecture();
Architecture t5_architecture();

// ---- config helpers -------------------------------------------------------------------------

/// j[key] as an integer; throws naming `key` when missing (or not a number) unless `fallback`.
int64_t get_int(const json& j, const std::string& key, std::optional<int64_t> fallback = std::nullopt);
double get_double(const json& j, const std::string& key, std::optional<double> fallback = std::nullopt);
bool get_bool(const json& j, const std::string& key, bool fallback);
std::string get_string(const json& j, const std::string& key, const std::string& fallback);
/// Throws for a config value that would change the math in a way this implementation lacks.
[[noreturn]] void unsupported(const ModelConfig& c, const std::string& what);
/// MoE configs: output_router_logits = true adds the router's load-balancing loss to the training
/// loss (transformers' load_balancing_loss_func), which Foundry does not compute: refused by name.
void refuse_router_aux_loss(const json& j, const ModelConfig& c);

/// Hands the resident pages of a memory-mapped (copy-on-write, unwritten) weight back to the
/// kernel; reading it again faults them in from the file. No-op for other tensors.
void release_mapped_pages(const Tensor& w);

/// Byte ranges carved, one after the other, from chunks of memory in huge pages (`first_chunk`
/// bytes, then doubling up to 32 MiB; a larger request gets a chunk of its own): for what a
/// decode step streams or writes a little at a time (weights, the KV cache), which read slower
/// from one separately mapped 4 KiB-paged block each.
class HugePageChunks {
 public:
  explicit HugePageChunks(int64_t first_chunk = int64_t(1) << 20) : first_chunk_(first_chunk) {}
  /// `bytes` at a 64-byte aligned address, and the chunk that owns them (keep it alive).
  std::pair<uint8_t*, Tensor> carve(int64_t bytes);
  /// An uninitialised contiguous tensor carved from the chunks.
  Tensor empty(IntList shape, DType dtype);
  /// Starts a fresh chunk for the next request.
  void reset();
  /// A copy of t in `dtype` carved from the chunks, laid out as `layout` asks (a matrix as the
  /// rows of its transpose: t's shape, strides (1, rows)); t's memory-mapped pages are handed back.
  Tensor copy_of(const Tensor& t, DType dtype, Layout layout = Layout::RowMajor);

 private:
  int64_t first_chunk_;
  Tensor chunk_;  // UInt8
  int64_t used_ = 0, carved_ = 0;
};

/// Every weight product of a model: dense (x W^T + b, or x W + b for [in, out] weights) or through
/// a quantized copy of W (set_weight_quantization) or quantized bytes adopted for it (GGUF, NF4).
/// Used when autograd does not record; see quantized_proj.cpp.
class WeightProducts {
 public:
  /// One weight's quantized rows (owned, or adopted bytes kept alive).
  struct Quantized;
  /// A weight's quantized rows as its caller (a Linear) last found them: products then skip the
  /// map, whose nodes decode's weight streaming evicts from the cache between tokens (its lookups
  /// were ~0.4% of a q4_0 decode step). Valid while the weight and the products' generation hold.
  struct Memo {
    const void* weight = nullptr;
    const Quantized* q = nullptr;
    uint64_t generation = 0;
  };
  /// A product's weight, bias (may be undefined) and the caller's memo (may be null).
  struct Operand {
    const Tensor* w;
    const Tensor* b;
    Memo* memo = nullptr;
  };
  Tensor product(const Tensor& x, const Tensor& w, const Tensor& b, bool transposed, Memo* memo = nullptr) const;
  /// product(x, w_i, b_i, transposed) for each operand: one input's projections (a layer's q, k
  /// and v; gate and up). Where all are quantized in one format and x has few rows (decode), x is
  /// quantized once and the matrices run as one parallel job; the same numbers.
  std::vector<Tensor> products(const Tensor& x, std::span<const Operand> weights, bool transposed) const;
  /// The float product (differentiable): x W^T + b, or x W + b when transposed.
  static Tensor dense(const Tensor& x, const Tensor& w, const Tensor& b, bool transposed);
  void set_format(const std::string& format);
  const std::string& format() const { return format_; }
  void set_prefill(const std::string& mode);
  /// Products with w read `bytes`: W's rows ([out, in]; for a transposed [in, out] weight, of W^T)
  /// quantized in `format`. Where quant::preferred_layout picks another layout, writable bytes the
  /// process owns are rearranged in place (the caller hands them over), others (a file's mapping)
  /// in a copy; bf16 rows are packed (quant::WeightLayout::PackedBF16) into a copy.
  void adopt(const Tensor& w, const std::string& format, const Tensor& bytes, bool transposed = false);
  /// Whether products with w read adopted quantized bytes (w itself is then a placeholder).
  bool adopted(const Tensor& w) const;
  /// The format and byte count of an adopted w's quantized rows; nullopt when w is not adopted.
  std::optional<std::pair<std::string, int64_t>> adopted_storage(const Tensor& w) const;
  /// Rows `ids` of an adopted w, dequantized to w's dtype ([*ids.shape, k]): an embedding table
  /// kept in its file's format (a GGUF's token_embd) looked up without a dense copy. Undefined
  /// when w is not adopted.
  Tensor adopted_rows(const Tensor& w, const Tensor& ids) const;
  /// An adopted w dequantized whole, in w's dtype and shape; undefined when w is not adopted.
  Tensor adopted_dense(const Tensor& w) const;
  bool any_adopted() const;
  /// Whether products with w read quantized bytes (adopted, or quantized by the format).
  bool quantized_for(const Tensor& w, bool transposed) const;
  /// x W^T + b with W's quantized bytes, recording for autograd: gradients reach x (and b), never
  /// W (a frozen base, QLoRA). Forward and backward dequantize W a tile of rows at a time.
  Tensor differentiable_product(const Tensor& x, const Tensor& w, const Tensor& b, bool transposed) const;

 private:
  /// w's quantized rows, made on first use under the format; null when w stays dense.
  const std::shared_ptr<Quantized>& quantized(const Tensor& w, bool transposed) const;
  /// The quantized rows a product of x with w reads: adopted or already made, else (float32 x)
  /// made now; null when w stays dense. One map lookup when they exist.
  const Quantized* lookup(const Tensor& x, const Tensor& w, bool transposed, Memo* memo) const;
  /// A float16 / bfloat16 model's weight read in place as the f16 / bf16 block format, for
  /// products with few rows of x in that dtype (decode) and no format set; null otherwise.
  const Quantized* sixteen_bit_view(const Tensor& x, const Tensor& w, bool transposed) const;
  uint64_t generation_ = 1;  // bumped when entries of quantized_ go or change: memos made before are stale
  /// Whether the format quantizes w (one is set and w's rows are whole blocks of it).
  bool format_applies(const Tensor& w, bool transposed) const;
  std::string format_;
  std::string prefill_ = "auto";
  mutable std::unordered_map<const void*, std::shared_ptr<Quantized>> quantized_;  // by weight impl: one lookup per product
  mutable HugePageChunks chunks_;  // where quantized copies are made
  mutable std::unordered_map<const void*, std::shared_ptr<Quantized>> views_;  // sixteen_bit_view's, by weight impl
};

/// Whether loaders copy weight matrices out of their file mapping into HugePageChunks (see
/// place_weight): yes, unless weights are quantized at load (those copies are made then) or
/// FOUNDRY_MMAP_WEIGHTS is set (weights stay file pages the kernel may drop under memory pressure).
bool weights_resident(const std::string& quantize);
/// LoadOptions::pack_bf16 asked for and not ruled out: no `quantize`, and the computation in bf16 or
/// in the checkpoint's own dtype (which the loader then finds to be bf16 or not).
bool pack_bf16_requested(const LoadOptions& options);
/// A loaded weight as the model keeps it: a matrix of 64 KB or more (a decode step streams it
/// whole) copied into `chunks` when `resident`, in `layout`, else t in `dtype` (t itself, a view
/// over the file, when the dtype matches).
Tensor place_weight(HugePageChunks& chunks, bool resident, const Tensor& t, DType dtype,
                    Layout layout = Layout::RowMajor);

// ---- blocks ---------------------------------------------------------------------------------

/// Full mask [B, S] (S = past + T) of the call: the given one as bool, or all ones.
Tensor full_mask(const Tensor& attention_mask, int64_t B, int64_t S);
/// Position ids [B, T] of the new tokens: cumsum(mask) - 1 over the full mask, padding at 1
/// (HF's generate), last T columns.
Tensor positions_from_mask(const Tensor& mask, int64_t T);
/// Additive float mask [B, 1, T, S]: 0 where query t (at absolute index past + t) may see key s
/// (causal, key not padding, and within `window` when > 0), the lowest float elsewhere (finite,
/// as HF: a fully masked padding row attends uniformly instead of producing NaN).
Tensor attention_bias(const Tensor& mask, int64_t T, int64_t window, DType dtype);

/// Rotary embedding tables for `positions` [B, T]: cos, sin [B, 1, T, rot_dim] (HF's layout,
/// cat(freqs, freqs)), with the config's rope scaling.
std::pair<Tensor, Tensor> rope_tables(const ModelConfig& c, const Tensor& positions, int64_t rot_dim, DType dtype);
/// Llama 3's RoPE scaling (rope_type "llama3") of one rotary frequency, as the number its inverse
/// frequency is divided by: the factor below the low-frequency cut, 1 above the high one, and
/// 1 / ((1 - s) / factor + s) between, s the smoothing. llama.cpp stores these divisors as a
/// GGUF's rope_freqs.weight.
double llama3_rope_divisor(const ModelConfig& c, double inv_freq);
/// x * cos + rotate_half(x) * sin on the first rot_dim features of x [B, H, T, D].
Tensor apply_rope(const Tensor& x, const Tensor& cos, const Tensor& sin);

/// softmax(q k^T / sqrt(D) + bias) v for q [B, H, T, D] and k, v [B, Hkv, S, D] (grouped-query:
/// each kv head serves H / Hkv query heads), with dropout on the attention weights; `causal`
/// (T = S, no bias) masks by position inside the kernel instead. Returns [B, T, H * D].
Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, double dropout = 0,
              bool causal = false);

// Inference-only fused kernels (callers use them only when autograd does not record; contiguous
// float32, or Float16 / BFloat16 rounded as the unfused ops round, else the unfused ops):
/// h += delta in place, then returns rms_norm(h) * w over the last dimension.
Tensor add_rms_norm_(Tensor& h, const Tensor& delta, const Tensor& w, double eps);
/// h += delta in place (the residual stream's add, rounded as the add op); returns h.
Tensor residual_add_(Tensor& h, const Tensor& delta);
/// rms_norm(x) * w over the last dimension: the rms_norm op's kernel without the dispatcher (two
/// dispatch levels, ~1.9 us a call in a decode step that runs one or two a layer).
Tensor rms_norm_rows(const Tensor& x, const Tensor& w, double eps);
/// layer_norm(x) * w + b over the last dimension: the layer_norm op's kernel without its two
/// dispatch levels (GPT-2's decode step runs two a layer); under autocast, the op.
Tensor layer_norm_rows(const Tensor& x, const Tensor& w, const Tensor& b, double eps);
/// silu(g) * u, written over g (a temporary of the caller).
Tensor silu_mul_(Tensor g, const Tensor& u);
/// Rotary embedding applied in place to x [B, T, heads * D] (projection output, before
/// split_heads): the first rot values of every head rotated (rotate-half layout) with cos / sin
/// [B, 1, T, rot]. Returns x.
Tensor rope_rows_(Tensor x, int64_t heads, const Tensor& cos, const Tensor& sin);

/// What every forward starts from: batch, new and cached lengths, and the full mask [B, past + T].
struct ForwardInputs {
  int64_t B, T, past;
  Tensor mask;
};
/// Checks input_ids [B, T] and derives the ForwardInputs.
ForwardInputs begin_forward(const ModelConfig& c, const Tensor& input_ids, const Tensor& attention_mask,
                            const KVCache* cache);
/// After the last block: marks the T new positions cached and keeps the last `last_positions`
/// of the hidden states (all when <= 0).
Tensor end_layers(const Tensor& h, KVCache* cache, int64_t T, int64_t last_positions);
/// Logits as float32 (models computing in bf16/f16 return float32 all the same).
Tensor float_logits(const Tensor& logits);

/// The sizes every config has under its own key names: vocab_size, hidden, layers, heads (kv heads
/// = heads, head_dim = hidden / heads, which must divide).
void parse_sizes(const json& j, ModelConfig& c, const char* hidden_key, const char* layers_key, const char* heads_key);
/// The sizes of a model without attention (RWKV, Mamba): vocab_size, hidden_size, num_hidden_layers,
/// layer_norm_epsilon, tie_word_embeddings (default `tie_default`); no position limit; the KV-cache
/// sizes are placeholders (one head of hidden_size), unused by their recurrent caches.
void parse_recurrent_sizes(const json& j, ModelConfig& c, bool tie_default);
/// rope_scaling: null, or {"type"/"rope_type": linear | dynamic (| llama3 when allowed), "factor", ...}.
void parse_rope_scaling(const json& j, ModelConfig& c, bool allow_llama3);

/// [B, T, H * D] -> [B, H, T, D]
Tensor split_heads(const Tensor& x, int64_t heads);

/// HF's ACT2FN for the names the architectures use: gelu (erf), gelu_new / gelu_fast /
/// gelu_pytorch_tanh (tanh form), relu, silu / swish. Throws naming anything else.
Tensor activation(const std::string& name, const Tensor& x);
bool known_activation(const std::string& name);

/// ALiBi bias [B, H, 1, S]: slope_h x (cumsum(mask) - 1) x mask over the keys (BLOOM's
/// build_alibi_tensor, which Falcon shares), times `scale`.
Tensor alibi_bias(const Tensor& mask, int64_t heads, double scale, DType dtype);

}  // namespace foundry::models::hf
