#include "models/hf/common.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numbers>
#include <optional>
#include <sstream>

#include "foundry/autograd/grad_mode.h"
#include "foundry/core/allocator.h"
#include "foundry/core/error.h"
#include "foundry/core/parallel.h"
#include "foundry/io/safetensors.h"
#include "foundry/nn/init.h"
#include "models/hf/blocks.h"
#include "foundry/models/gguf.h"
#include "foundry/ops/autocast.h"
#include "foundry/ops/ops.h"
#include "foundry/quant/block_formats.h"
#include "models/hf/quantized_checkpoint.h"
#include "kernels/cpu/binary.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/unary.h"
#include "quant/q8_kernels.h"
#include "foundry/io/json_depth.h"

namespace foundry::models {

namespace fs = std::filesystem;
using hf::json;

// ---- KV cache ---------------------------------------------------------------------------------

namespace {

// Every layer's key and value tensors, `shape` each, carved from one chunk (in huge pages from 2
// MiB) and resident from the start. Resident, as llama.cpp clears its cache buffer when it makes a
// context: decode writes one position per head at a time, and each first touch of a page would
// otherwise fault inside the step (~5% of a 1-thread q4_0 decode step on a Zen 5 VM, Llama-110M
// shape). One chunk in huge pages: each head's new row is in a page of its own, and with 4 KiB
// pages every one of a step's 2 x layers x heads row writes missed the TLB (the weights streamed
// in between evict it): those stores took 4.4% of the weight products' samples, 1.7% from one
// allocation (q4_0, 2 threads, 1500 tokens).
std::pair<std::vector<Tensor>, std::vector<Tensor>> layer_rows(int64_t layers, IntList shape, DType stored) {
  // Checked: a capacity from a huge max_new_tokens wrapped around to a small buffer that decode
  // then wrote past. All of both K and V, every layer, must stay far below the address space.
  int64_t total = 2 * layers * itemsize(stored);
  bool fits = true;
  for (int64_t d : shape) fits = fits && !__builtin_mul_overflow(total, d, &total);
  FOUNDRY_CHECK_AS(ValueError, fits && total <= (int64_t(1) << 56),
                   "KVCache: {} positions ({} layers, {} heads of {} values, {} rows) need more memory than can be "
                   "addressed: ask for fewer positions (max_new_tokens, the sequence length)",
                   shape[2], layers, shape[1], shape[3], shape[0]);
  const int64_t each = (numel_of(shape) * itemsize(stored) + 63) / 64 * 64;
  hf::HugePageChunks chunks(2 * layers * each);
  std::pair<std::vector<Tensor>, std::vector<Tensor>> kv;
  for (int64_t l = 0; l < layers; ++l)
    for (auto* list : {&kv.first, &kv.second}) {
      list->push_back(chunks.empty(shape, stored));
      allocator::populate(list->back().data_ptr(), size_t(list->back().nbytes()));
    }
  return kv;
}

}  // namespace

KVCache::KVCache(int64_t layers, int64_t batch, int64_t kv_heads, int64_t capacity, int64_t head_dim, DType dtype,
                 const std::string& format)
    : capacity_(capacity), batch_(batch), head_dim_(head_dim), dtype_(dtype), format_(format) {
  FOUNDRY_CHECK_AS(ValueError, layers > 0 && batch > 0 && kv_heads > 0 && capacity > 0 && head_dim > 0,
                   "KVCache: sizes must be positive (layers {}, batch {}, kv_heads {}, capacity {}, head_dim {})",
                   layers, batch, kv_heads, capacity, head_dim);
  int64_t row = head_dim;
  DType stored = dtype;
  if (!format.empty()) {
    const quant::BlockFormatTraits& t = quant::traits(format);
    format_traits_ = &t;
    FOUNDRY_CHECK_AS(ValueError, head_dim % t.block_size == 0 && t.format != quant::BlockFormat::Q8_K,
                     "KVCache: head_dim {} is not whole {} blocks ({} values)", head_dim, t.name, t.block_size);
    row = quant::quantized_bytes(t, 1, head_dim);
    stored = DType::UInt8;
  }
  std::tie(k_, v_) = layer_rows(layers, {batch, kv_heads, capacity, row}, stored);
}

void KVCacheRows::store(int64_t b, int64_t g) const {
  for (int64_t t = 0; t < T; ++t) {
    const int64_t src = ((b * Hkv + g) * T + t) * in_row, dst = ((b * Hkv + g) * capacity + position + t) * out_row;
    const uint8_t* ks = k_data + src;
    const uint8_t* vs = v_data + src;
    if (quantize) {
      quantize(reinterpret_cast<const float*>(ks), k_cache + dst, D);
      quantize(reinterpret_cast<const float*>(vs), v_cache + dst, D);
    } else if (narrow) {
      narrow->narrow(reinterpret_cast<const float*>(ks), reinterpret_cast<uint16_t*>(k_cache + dst), D);
      narrow->narrow(reinterpret_cast<const float*>(vs), reinterpret_cast<uint16_t*>(v_cache + dst), D);
    } else {
      std::memcpy(k_cache + dst, ks, size_t(out_row));
      std::memcpy(v_cache + dst, vs, size_t(out_row));
    }
  }
}

Tensor KVCache::read(const Tensor& stored, int64_t length) const {
  if (format_.empty()) return stored.narrow(2, 0, length);
  const quant::BlockFormatTraits& t = *format_traits_;
  const int64_t B = stored.size(0), H = stored.size(1), cap = stored.size(2), row = stored.size(3);
  Tensor out = empty({B, H, length, head_dim_}, DType::Float32);
  const auto* src = static_cast<const uint8_t*>(stored.data_ptr());
  float* dst = out.data<float>();
  const quant::RowDequantizer dequantize = quant::fast_dequantizer(t);
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < length; ++i) dequantize(src + (bh * cap + i) * row, dst + (bh * length + i) * head_dim_, head_dim_);
  return dtype_ == DType::Float32 ? out : out.to(dtype_);
}

void KVCache::check_new_rows(int64_t layer, const Tensor& k, const Tensor& v) const {
  FOUNDRY_CHECK_AS(IndexError, layer >= 0 && layer < int64_t(k_.size()), "KVCache: layer {} of {}", layer, k_.size());
  FOUNDRY_CHECK_AS(ValueError,
                   k.dim() == 4 && v.sizes() == k.sizes() && k.size(1) == k_[size_t(layer)].size(1) && k.size(3) == head_dim_,
                   "KVCache: keys {} and values {} for a cache of {} heads of {}", shape_str(k.sizes()),
                   shape_str(v.sizes()), k_[size_t(layer)].size(1), head_dim_);
  const int64_t T = k.size(2);
  if (length_ + T > capacity_)
    raise<ValueError>("KVCache: {} cached + {} new positions exceed the capacity of {}", length_, T, capacity_);
  FOUNDRY_CHECK_AS(ValueError, k.size(0) == batch_, "KVCache: batch {} given to a cache for batch {}", k.size(0), batch_);
}

bool KVCache::new_rows(int64_t layer, const Tensor& k, const Tensor& v, KVCacheRows& rows) const {
  const Tensor& ks = k_[size_t(layer)];
  const DType cached = ks.dtype();
  if (format_traits_) {
    rows.k = kernels::cast_rows(k, DType::Float32).contiguous();
    rows.v = kernels::cast_rows(v, DType::Float32).contiguous();
    rows.quantize = quant::exact_quantizer(*format_traits_);
  } else if (k.dtype() == v.dtype() &&
             (k.dtype() == cached || (k.dtype() == DType::Float32 && kernels::half_convert(cached)))) {
    rows.k = k.contiguous();
    rows.v = v.contiguous();
    if (k.dtype() != cached) rows.narrow = kernels::half_convert(cached);
  } else {
    return false;
  }
  rows.k_data = static_cast<const uint8_t*>(rows.k.data_ptr());
  rows.v_data = static_cast<const uint8_t*>(rows.v.data_ptr());
  rows.k_cache = static_cast<uint8_t*>(ks.data_ptr());
  rows.v_cache = static_cast<uint8_t*>(v_[size_t(layer)].data_ptr());
  rows.T = k.size(2), rows.Hkv = k.size(1), rows.D = head_dim_;
  rows.in_row = head_dim_ * int64_t(itemsize(rows.k.dtype()));
  rows.out_row = format_traits_ ? ks.size(3) : head_dim_ * int64_t(itemsize(cached));
  rows.capacity = capacity_, rows.position = length_;
  return true;
}

void KVCache::store(int64_t layer, const Tensor& k, const Tensor& v) {
  FOUNDRY_CHECK_AS(IndexError, layer >= 0 && layer < int64_t(k_.size()), "KVCache: layer {} of {}", layer, k_.size());
  if (paged()) return store_paged(layer, k, v);
  check_new_rows(layer, k, v);
  // A block format's rows are quantized one by one; plain rows go through the copy op (any dtype
  // or strides, a long prefill's rows in parallel).
  if (KVCacheRows rows; format_traits_ && new_rows(layer, k, v, rows)) {
    for (int64_t b = 0; b < rows.k.size(0); ++b)
      for (int64_t g = 0; g < rows.Hkv; ++g) rows.store(b, g);
    return;
  }
  const int64_t T = k.size(2);
  k_[size_t(layer)].narrow(2, length_, T).copy_(k);
  v_[size_t(layer)].narrow(2, length_, T).copy_(v);
}

std::pair<Tensor, Tensor> KVCache::append(int64_t layer, const Tensor& k, const Tensor& v) {
  store(layer, k, v);
  if (paged()) return read_paged(layer, k.size(2));
  const int64_t filled = length_ + k.size(2);
  return {read(k_[size_t(layer)], filled), read(v_[size_t(layer)], filled)};
}

int64_t KVCache::nbytes() const {
  int64_t n = 0;
  for (size_t l = 0; l < k_.size(); ++l) n += k_[l].nbytes() + v_[l].nbytes();
  for (const auto& [key, t] : states_) n += t.defined() ? t.nbytes() : 0;
  return n;
}

KVCache KVCache::recurrent(int64_t batch) {
  FOUNDRY_CHECK_AS(ValueError, batch > 0, "KVCache: batch must be positive, got {}", batch);
  KVCache c;
  c.batch_ = batch;
  c.capacity_ = std::numeric_limits<int64_t>::max() / 4;
  return c;
}

Tensor& KVCache::state(int64_t layer, int slot) { return states_[{layer, slot}]; }

void KVCache::advance(int64_t T) {
  if (paged()) {
    length_ = 0;
    for (int64_t id : bound_) length_ = std::max(length_, sequence(id).length += T);
    return;
  }
  FOUNDRY_CHECK_AS(ValueError, T >= 0 && length_ + T <= capacity_, "KVCache: can't advance {} by {} (capacity {})",
                   length_, T, capacity_);
  length_ += T;
}

void KVCache::truncate(int64_t length) {
  FOUNDRY_CHECK_AS(ValueError, !paged(), "KVCache: {} is for contiguous caches (a paged cache manages sequences)", __func__);
  FOUNDRY_CHECK_AS(ValueError, length >= 0 && length <= length_, "KVCache: can't truncate {} positions to {}",
                   length_, length);
  if (has_state() && length < length_) {
    FOUNDRY_CHECK_AS(ValueError, length == 0, "KVCache: a recurrent state can't be rewound from {} positions to {}",
                     length_, length);
    states_.clear();
  }
  length_ = length;
}

void KVCache::reserve(int64_t capacity) {
  FOUNDRY_CHECK_AS(ValueError, !paged(), "KVCache: {} is for contiguous caches (a paged cache manages sequences)", __func__);
  if (capacity <= capacity_) return;
  if (!k_.empty()) {
    auto [ks, vs] = layer_rows(int64_t(k_.size()), {k_[0].size(0), k_[0].size(1), capacity, k_[0].size(3)}, k_[0].dtype());
    for (size_t l = 0; l < k_.size(); ++l) {
      ks[l].narrow(2, 0, length_).copy_(k_[l].narrow(2, 0, length_));
      vs[l].narrow(2, 0, length_).copy_(v_[l].narrow(2, 0, length_));
    }
    k_ = std::move(ks);
    v_ = std::move(vs);
  }
  capacity_ = capacity;
}

void KVCache::reorder(const std::vector<int64_t>& rows) {
  FOUNDRY_CHECK_AS(ValueError, !paged(), "KVCache: {} is for contiguous caches (a paged cache manages sequences)", __func__);
  FOUNDRY_CHECK_AS(ValueError, int64_t(rows.size()) == batch_, "KVCache::reorder: {} rows for a batch of {}",
                   rows.size(), batch_);
  for (int64_t r : rows)
    FOUNDRY_CHECK_AS(IndexError, r >= 0 && r < batch_, "KVCache::reorder: row {} of {}", r, batch_);
  Tensor idx = tensor<int64_t>(rows, {batch_});
  for (size_t l = 0; l < k_.size(); ++l) {
    k_[l] = index_select(k_[l], 0, idx);
    v_[l] = index_select(v_[l], 0, idx);
  }
  for (auto& [key, t] : states_)
    if (t.defined()) t = index_select(t, 0, idx).contiguous();
}

namespace hf {

// ---- registry and config --------------------------------------------------------------------

const std::vector<Architecture>& architectures() {
  static const std::vector<Architecture> all = {llama_architecture(), mistral_architecture(), mixtral_architecture(),
                                                qwen2_architecture(),  qwen2_moe_architecture(), gemma_architecture(),
                                                gpt2_architecture(),   gpt_neox_architecture(),   phi_architecture(),
                                                opt_architecture(),    bloom_architecture(),      falcon_architecture(),
                                                rwkv_architecture(),   mamba_architecture(),      jamba_architecture(),
                                                t5_architecture()};
  return all;
}

int64_t get_int(const json& j, const std::string& key, std::optional<int64_t> fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    raise<ValueError>("config.json: missing '{}'", key);
  }
  if (!it->is_number_integer()) raise<ValueError>("config.json: '{}' must be an integer, got {}", key, it->dump());
  return it->get<int64_t>();
}

double get_double(const json& j, const std::string& key, std::optional<double> fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    raise<ValueError>("config.json: missing '{}'", key);
  }
  if (!it->is_number()) raise<ValueError>("config.json: '{}' must be a number, got {}", key, it->dump());
  return it->get<double>();
}

bool get_bool(const json& j, const std::string& key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) raise<ValueError>("config.json: '{}' must be true or false, got {}", key, it->dump());
  return it->get<bool>();
}

std::string get_string(const json& j, const std::string& key, const std::string& fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) raise<ValueError>("config.json: '{}' must be a string, got {}", key, it->dump());
  return it->get<std::string>();
}

void refuse_router_aux_loss(const json& j, const ModelConfig& c) {
  if (get_bool(j, "output_router_logits", false)) unsupported(c, "output_router_logits (the router's auxiliary loss)");
}

void unsupported(const ModelConfig& c, const std::string& what) {
  raise<NotImplementedError>("{}: {} is not supported (it would change the computation)", c.architecture, what);
}

std::vector<int64_t> id_list(const json& j, const std::string& key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  if (it->is_number_integer()) return {it->get<int64_t>()};
  if (it->is_array()) {
    std::vector<int64_t> out;
    for (const auto& e : *it) {
      if (!e.is_number_integer()) raise<ValueError>("config: '{}' must hold integers, got {}", key, it->dump());
      out.push_back(e.get<int64_t>());
    }
    return out;
  }
  raise<ValueError>("config: '{}' must be an integer or a list of integers, got {}", key, it->dump());
}

json read_json(const fs::path& path) {
  std::ifstream f(path);
  if (!f) raise<IOError>("{}: can't open", path.string());
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  io::check_json_depth(text, path.string());
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    raise<ValueError>("{}: malformed JSON: {}", path.string(), e.what());
  }
}

const Architecture& find_architecture(const std::string& name) {
  for (const Architecture& a : architectures())
    for (const std::string& n : a.names)
      if (n == name) return a;
  std::string known;
  for (const std::string& n : supported_architectures()) known += (known.empty() ? "" : ", ") + n;
  raise<NotImplementedError>("unknown architecture '{}' (supported: {})", name, known);
}

// ---- blocks -----------------------------------------------------------------------------------

Tensor full_mask(const Tensor& attention_mask, int64_t B, int64_t S) {
  if (!attention_mask.defined()) return ones({B, S}, DType::Bool);
  if (attention_mask.dim() != 2 || attention_mask.size(0) != B || attention_mask.size(1) != S)
    raise<ValueError>("attention_mask must be [batch, past + new tokens] = [{}, {}], got {}", B, S,
                      shape_str(attention_mask.sizes()));
  return attention_mask.dtype() == DType::Bool ? attention_mask : ne(attention_mask, zeros({}, attention_mask.dtype()));
}

Tensor positions_from_mask(const Tensor& mask, int64_t T) {
  Tensor m = mask.to(DType::Int64);
  Tensor pos = cumsum(m, 1) - ones({}, DType::Int64);
  pos = masked_fill(pos, logical_not(mask), 1);
  return pos.narrow(1, mask.size(1) - T, T).contiguous();
}

Tensor attention_bias(const Tensor& mask, int64_t T, int64_t window, DType dtype) {
  const int64_t S = mask.size(1), past = S - T;
  Tensor q_idx = arange(past, S, 1, DType::Int64).reshape({T, 1});
  Tensor k_idx = arange(S, DType::Int64).reshape({1, S});
  Tensor allowed = le(k_idx, q_idx);
  if (window > 0) allowed = logical_and(allowed, le(q_idx - k_idx, full({}, window, DType::Int64)));
  allowed = logical_and(allowed.unsqueeze(0), mask.unsqueeze(1));  // [B, T, S]
  // The most negative finite value of the dtype (float's would round to -inf in bfloat16).
  const double low = dtype == DType::Float16    ? -65504.0
                     : dtype == DType::BFloat16 ? -3.3895313892515355e38
                     : dtype == DType::Float64  ? std::numeric_limits<double>::lowest()
                                                : double(std::numeric_limits<float>::lowest());
  Tensor lowest = full({}, low, dtype);
  return where(allowed, zeros({}, dtype), lowest).unsqueeze(1);
}

double llama3_rope_divisor(const ModelConfig& c, double inv_freq) {
  const double old = double(c.rope_original_max_positions);
  const double low_wavelen = old / c.rope_low_freq_factor, high_wavelen = old / c.rope_high_freq_factor;
  const double wavelen = 2 * std::numbers::pi / inv_freq;
  if (wavelen > low_wavelen) return c.rope_factor;
  if (wavelen < high_wavelen) return 1.0;
  const double smooth = (old / wavelen - c.rope_low_freq_factor) / (c.rope_high_freq_factor - c.rope_low_freq_factor);
  return 1.0 / ((1 - smooth) / c.rope_factor + smooth);
}

namespace {

// The rotary inverse frequencies of a base and a config's scaling, HF's numbers.
std::vector<float> inverse_frequencies(const ModelConfig& c, double base, int64_t rot_dim) {
  const int64_t half = rot_dim / 2;
  FOUNDRY_CHECK_AS(ValueError, c.rope_freq_factors.empty() || int64_t(c.rope_freq_factors.size()) == half,
                   "{} RoPE frequency factors for {} rotary frequencies", c.rope_freq_factors.size(), half);
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    // As HF: base ** (arange(0, dim, 2).float() / dim) in float32.
    float f = float(1.0 / std::pow(base, double(float(2 * i) / float(rot_dim))));
    if (c.rope_type == "linear") f = float(f / c.rope_factor);
    if (c.rope_type == "llama3") f = float(double(f) / llama3_rope_divisor(c, f));
    if (!c.rope_freq_factors.empty()) f = f / c.rope_freq_factors[size_t(i)];
    inv[size_t(i)] = f;
  }
  return inv;
}

// inverse_frequencies, remembered for the last base and scaling this thread asked for: a decode step
// asks again every token (its pow calls were ~0.1% of a q4_0 step).
const std::vector<float>& cached_inverse_frequencies(const ModelConfig& c, double base, int64_t rot_dim) {
  // Everything inverse_frequencies reads (the frequency factors compared in place: a copy in the
  // key would allocate every token).
  struct Key {
    double base, factor, low, high;
    int64_t rot_dim, original;
    std::string type;
    bool operator==(const Key&) const = default;
  };
  thread_local std::optional<Key> last;
  thread_local std::vector<float> last_factors, inv;
  Key key{base, c.rope_factor, c.rope_low_freq_factor, c.rope_high_freq_factor, rot_dim,
          c.rope_original_max_positions, c.rope_type};
  if (!last || !(*last == key) || last_factors != c.rope_freq_factors) {
    inv = inverse_frequencies(c, base, rot_dim);
    last = std::move(key);
    last_factors = c.rope_freq_factors;
  }
  return inv;
}

}  // namespace

std::pair<Tensor, Tensor> rope_tables(const ModelConfig& c, const Tensor& positions, int64_t rot_dim, DType dtype) {
  const int64_t half = rot_dim / 2;
  double base = c.rope_theta;
  if (c.rope_type == "dynamic") {
    // HF's dynamic NTK scaling: the base grows once the sequence passes the trained length.
    double seq_len = double(amax(positions).item<int64_t>() + 1);
    if (seq_len > double(c.max_positions))
      base *= std::pow(c.rope_factor * seq_len / double(c.max_positions) - (c.rope_factor - 1),
                       double(rot_dim) / double(rot_dim - 2));
  }
  const std::vector<float>& inv = cached_inverse_frequencies(c, base, rot_dim);
  // HF's cos / sin of cat(freqs, freqs) with freqs = positions.float() * inv_freq, [B, 1, T, rot],
  // written straight into the tables: the same float products and the cos / sin ops' own kernels
  // (the same bits), without the five tensor ops a decode step ran for them.
  const Tensor pos = positions.to(DType::Int64).contiguous();
  const int64_t* p = pos.data<int64_t>();
  const int64_t rows = pos.numel();
  Tensor cos_t = empty({positions.size(0), 1, positions.size(1), rot_dim}, DType::Float32);
  Tensor sin_t = empty({positions.size(0), 1, positions.size(1), rot_dim}, DType::Float32);
  float* cp = cos_t.data<float>();
  float* sp = sin_t.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < half; ++i)
      cp[r * rot_dim + i] = cp[r * rot_dim + half + i] = float(p[r]) * inv[size_t(i)];
  std::copy(cp, cp + rows * rot_dim, sp);
  kernels::unary_f32(kernels::UnaryOp::Cos, cp, cp, rows * rot_dim, {});
  kernels::unary_f32(kernels::UnaryOp::Sin, sp, sp, rows * rot_dim, {});
  return {kernels::cast_rows(cos_t, dtype), kernels::cast_rows(sin_t, dtype)};
}

Tensor apply_rope(const Tensor& x, const Tensor& cos_in, const Tensor& sin_in) {
  // The tables in x's dtype (HF casts cos / sin to the activations' dtype, bf16 under autocast).
  const Tensor cos_t = cos_in.dtype() == x.dtype() ? cos_in : cos_in.to(x.dtype());
  const Tensor sin_t = sin_in.dtype() == x.dtype() ? sin_in : sin_in.to(x.dtype());
  const int64_t D = x.size(3), rot = cos_t.size(3), half = rot / 2;
  Tensor xr = rot == D ? x : x.narrow(3, 0, rot);
  Tensor rotated = cat({neg(xr.narrow(3, half, half)), xr.narrow(3, 0, half)}, 3);
  Tensor out = xr * cos_t + rotated * sin_t;
  return rot == D ? out : cat({out, x.narrow(3, rot, D - rot)}, 3);
}

namespace {

bool same_contiguous_rows(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.is_contiguous() && b.is_contiguous() && Shape(a.sizes()) == Shape(b.sizes());
}

const uint16_t* half_data(const Tensor& t) { return static_cast<const uint16_t*>(t.data_ptr()); }
uint16_t* half_data(Tensor& t) { return static_cast<uint16_t*>(t.data_ptr()); }

}  // namespace

// The fused steps below take float32 and, for models computed in Float16 / BFloat16, 16-bit rows
// that round where the per-op path stores a 16-bit result (the same bits as that path; a bf16
// model's decode step ran ~30 more tensor ops per layer without them, 14% of its 2-thread time).

Tensor residual_add_(Tensor& h, const Tensor& delta) {
  if (const kernels::HalfConvert* hc = kernels::half_convert(h.dtype()); hc && same_contiguous_rows(h, delta)) {
    uint16_t* hp = half_data(h);
    const uint16_t* dp = half_data(delta);
    parallel_for(0, h.numel(), 4096, [&](int64_t b, int64_t e) {  // h = h + delta, rounded as the add op
      float x[kernels::kChunk], d[kernels::kChunk];
      for (int64_t i = b; i < e; i += kernels::kChunk) {
        const int64_t m = std::min(kernels::kChunk, e - i);
        hc->widen(hp + i, x, m);
        hc->widen(dp + i, d, m);
        for (int64_t k = 0; k < m; ++k) x[k] += d[k];
        hc->narrow(x, hp + i, m);
      }
    });
  } else if (h.dtype() == DType::Float32 && same_contiguous_rows(h, delta)) {
    float* hp = h.data<float>();
    const float* dp = delta.data<float>();
    parallel_for(0, h.numel(), 4096, [&](int64_t b, int64_t e) {  // the add op's SIMD kernel (Add has one), in place
      kernels::binary_simd_f32(kernels::BinaryOp::Add, hp + b, dp + b, hp + b, e - b, false, false, 1.f);
    });
  } else {
    h = h + delta;
  }
  return h;
}

Tensor layer_norm_rows(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  const int64_t C = x.dim() ? x.size(-1) : 0;
  auto fits = [&](const Tensor& t) { return !t.defined() || (t.dim() == 1 && t.numel() == C && t.dtype() == x.dtype()); };
  if (C == 0 || !is_floating(x.dtype()) || !fits(w) || !fits(b) || autocast::is_enabled())
    return layer_norm(x, {C}, w, b, eps);
  Shape stats(x.sizes());
  stats.back() = 1;
  return kernels::layer_norm_forward(x, C, w, b, eps, stats)[0];
}

Tensor rms_norm_rows(const Tensor& x, const Tensor& w, double eps) {
  const int64_t C = w.numel();
  if (x.dim() == 0 || x.size(-1) != C || w.dim() != 1 || x.dtype() != w.dtype()) return rms_norm(x, {C}, w, eps);
  if (x.numel() == C && x.dtype() == DType::Float32 && x.is_contiguous() && w.is_contiguous()) {
    // One row (decode): rms_norm_forward's kernel, without its statistics tensor and result vector.
    Tensor y = empty(x.sizes(), DType::Float32);
    float rstd;
    kernels::rms_norm_rows_f32(x.data<float>(), w.data<float>(), y.data<float>(), &rstd, 1, C, float(eps));
    return y;
  }
  Shape stats(x.sizes());
  stats.back() = 1;
  return kernels::rms_norm_forward(x, C, w, eps, stats)[0];
}

// Two passes over a row that stays in L1, each with its op's SIMD kernel: the fused scalar loop
// summing squares in double it replaces had 1.7x the samples of rms_norm_rows' kernel in a q4_0
// decode step (its 12 calls 0.42% of the step, the norm kernel's 13 calls 0.25%), and rounded
// other than the per-op path.
Tensor add_rms_norm_(Tensor& h, const Tensor& delta, const Tensor& w, double eps) {
  return rms_norm_rows(residual_add_(h, delta), w, eps);
}

Tensor silu_mul_(Tensor g, const Tensor& u) {
  if (const kernels::HalfConvert* hc = kernels::half_convert(g.dtype()); hc && same_contiguous_rows(g, u)) {
    uint16_t* gp = half_data(g);
    const uint16_t* up = half_data(u);
    parallel_for(0, g.numel(), 4096, [&](int64_t b, int64_t e) {  // silu(g) rounded, then * u rounded
      float x[kernels::kChunk], v[kernels::kChunk];
      for (int64_t i = b; i < e; i += kernels::kChunk) {
        const int64_t m = std::min(kernels::kChunk, e - i);
        hc->widen(gp + i, x, m);
        kernels::unary_f32(kernels::UnaryOp::Silu, x, x, m, {});
        hc->round(x, m);
        hc->widen(up + i, v, m);
        for (int64_t k = 0; k < m; ++k) x[k] *= v[k];
        hc->narrow(x, gp + i, m);
      }
    });
    return g;
  }
  if (g.dtype() != DType::Float32 || !same_contiguous_rows(g, u)) return silu(g) * u;
  float* gp = g.data<float>();
  const float* up = u.data<float>();
  // silu through the SIMD unary kernel (the silu op's own: vector exp), then the product; a
  // scalar std::exp per value was ~3% of a 128-token q4_0 prefill.
  parallel_for(0, g.numel(), 4096, [&](int64_t b, int64_t e) {
    kernels::unary_f32(kernels::UnaryOp::Silu, gp + b, gp + b, e - b, {});
    for (int64_t i = b; i < e; ++i) gp[i] *= up[i];
  });
  return g;
}

Tensor rope_rows_(Tensor x, int64_t heads, const Tensor& cos_t, const Tensor& sin_t) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2) / heads, rot = cos_t.size(3), half = rot / 2;
  if (const kernels::HalfConvert* hc = kernels::half_convert(x.dtype()); hc && x.is_contiguous() && rot <= kernels::kChunk) {
    // As apply_rope in x's dtype: the tables rounded to it, each product and the sum rounded.
    const Tensor c = (cos_t.dtype() == x.dtype() ? cos_t : cos_t.to(x.dtype())).contiguous();
    const Tensor s = (sin_t.dtype() == x.dtype() ? sin_t : sin_t.to(x.dtype())).contiguous();
    uint16_t* xp = half_data(x);
    parallel_for(0, B * T, 16, [&](int64_t lo, int64_t hi) {
      float cr[kernels::kChunk], sr[kernels::kChunk], v[kernels::kChunk], a[kernels::kChunk], r[kernels::kChunk];
      for (int64_t bt = lo; bt < hi; ++bt) {
        hc->widen(half_data(c) + (c.size(0) == 1 ? bt % T : bt) * rot, cr, rot);
        hc->widen(half_data(s) + (s.size(0) == 1 ? bt % T : bt) * rot, sr, rot);
        for (int64_t h = 0; h < heads; ++h) {
          uint16_t* row = xp + (bt * heads + h) * D;
          hc->widen(row, v, rot);
          for (int64_t i = 0; i < half; ++i) {
            a[i] = v[i] * cr[i];
            r[i] = -v[i + half] * sr[i];
            a[i + half] = v[i + half] * cr[i + half];
            r[i + half] = v[i] * sr[i + half];
          }
          hc->round(a, rot);
          hc->round(r, rot);
          for (int64_t i = 0; i < rot; ++i) a[i] += r[i];
          hc->narrow(a, row, rot);
        }
      }
    });
    return x;
  }
  if (x.dtype() != DType::Float32 || !x.is_contiguous() || cos_t.dtype() != DType::Float32) {
    Tensor r = apply_rope(split_heads(x, heads), cos_t, sin_t);  // [B, H, T, D]
    return r.transpose(1, 2).reshape({B, T, heads * D});
  }
  Tensor c = cos_t.contiguous(), s = sin_t.contiguous();
  float* xp = x.data<float>();
  parallel_for(0, B * T, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t bt = lo; bt < hi; ++bt) {
      const float* cr = c.data<float>() + (c.size(0) == 1 ? bt % T : bt) * rot;
      const float* sr = s.data<float>() + (s.size(0) == 1 ? bt % T : bt) * rot;
      for (int64_t h = 0; h < heads; ++h) {
        float* v = xp + (bt * heads + h) * D;
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = v[i], x2 = v[i + half];
          v[i] = x1 * cr[i] + -x2 * sr[i];
          v[i + half] = x2 * cr[i + half] + x1 * sr[i + half];
        }
      }
    }
  });
  return x;
}

Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, double dropout, bool causal) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), S = k.size(2);
  if (T == 1 && dropout == 0 && !causal) {
    // Decoding: each kv head's query group as the rows of two small products, no KV copies
    // (the tiled kernel's blocking only pays off for many queries).
    const int64_t rep = H / Hkv;
    Tensor qg = q.reshape({B, Hkv, rep, D});
    Tensor b = bias.size(1) == H ? bias.reshape({B, Hkv, rep, S}) : bias;  // [B, 1, 1, S] broadcasts
    Tensor s = matmul(qg, k.transpose(2, 3)) * full({}, 1.0 / std::sqrt(double(D)), q.dtype()) + b;
    return matmul(softmax(s, 3), v).reshape({B, 1, H * D});
  }
  Tensor kk = k, vv = v;
  if (Hkv != H) {
    const int64_t rep = H / Hkv;
    kk = k.unsqueeze(2).expand({B, Hkv, rep, S, D}).reshape({B, H, S, D});
    vv = v.unsqueeze(2).expand({B, Hkv, rep, S, D}).reshape({B, H, S, D});
  }
  Tensor o = scaled_dot_product_attention(q, kk, vv, bias, dropout, causal);
  return o.transpose(1, 2).reshape({B, T, H * D});
}

ForwardInputs begin_forward(const ModelConfig& c, const Tensor& input_ids, const Tensor& attention_mask,
                            const KVCache* cache) {
  FOUNDRY_CHECK_AS(ValueError, input_ids.dim() == 2, "{}: input_ids must be [batch, tokens], got {}", c.architecture,
                   shape_str(input_ids.sizes()));
  const int64_t B = input_ids.size(0), T = input_ids.size(1), past = cache ? cache->length() : 0;
  return {B, T, past, full_mask(attention_mask, B, past + T)};
}

Tensor end_layers(const Tensor& h, KVCache* cache, int64_t T, int64_t last_positions) {
  if (cache) cache->advance(T);
  return last_positions <= 0 || last_positions >= T ? h : h.narrow(1, T - last_positions, last_positions);
}

Tensor float_logits(const Tensor& logits) {
  return kernels::cast_rows(logits, DType::Float32);
}

void parse_recurrent_sizes(const json& j, ModelConfig& c, bool tie_default) {
  c.vocab_size = get_int(j, "vocab_size");
  c.hidden_size = get_int(j, "hidden_size");
  c.num_layers = get_int(j, "num_hidden_layers");
  FOUNDRY_CHECK_AS(ValueError, c.vocab_size > 0 && c.hidden_size > 0 && c.num_layers > 0,
                   "config.json: vocab_size, hidden_size and num_hidden_layers must be positive");
  c.num_heads = c.num_kv_heads = 1;
  c.head_dim = c.hidden_size;
  c.norm_eps = get_double(j, "layer_norm_epsilon", 1e-5);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", tie_default);
  c.max_positions = 0;
}

void parse_sizes(const json& j, ModelConfig& c, const char* hidden_key, const char* layers_key, const char* heads_key) {
  c.vocab_size = get_int(j, "vocab_size");
  c.hidden_size = get_int(j, hidden_key);
  c.num_layers = get_int(j, layers_key);
  c.num_heads = get_int(j, heads_key);
  c.num_kv_heads = c.num_heads;
  FOUNDRY_CHECK_AS(ValueError, c.num_heads > 0 && c.hidden_size % c.num_heads == 0,
                   "config.json: {} ({}) must be divisible by {} ({})", hidden_key, c.hidden_size, heads_key,
                   c.num_heads);
  c.head_dim = c.hidden_size / c.num_heads;
}

void parse_rope_scaling(const json& j, ModelConfig& c, bool allow_llama3) {
  auto rs = j.find("rope_scaling");
  if (rs == j.end() || rs->is_null()) return;
  if (!rs->is_object()) raise<ValueError>("config.json: rope_scaling must be an object, got {}", rs->dump());
  c.rope_type = get_string(*rs, "rope_type", get_string(*rs, "type", ""));
  if (c.rope_type == "default") c.rope_type.clear();
  if (!c.rope_type.empty() && c.rope_type != "linear" && c.rope_type != "dynamic" &&
      !(allow_llama3 && c.rope_type == "llama3"))
    unsupported(c, "rope_scaling type '" + c.rope_type + "'");
  if (!c.rope_type.empty()) c.rope_factor = get_double(*rs, "factor");
  if (c.rope_type == "llama3") {
    c.rope_low_freq_factor = get_double(*rs, "low_freq_factor");
    c.rope_high_freq_factor = get_double(*rs, "high_freq_factor");
    c.rope_original_max_positions = get_int(*rs, "original_max_position_embeddings");
  }
}

Tensor split_heads(const Tensor& x, int64_t heads) {
  const int64_t B = x.size(0), T = x.size(1), HD = x.size(2), D = HD / heads;
  // The same view built at once where nothing records (decode makes three a layer).
  if (!records(x) && x.is_contiguous() && HD == heads * D)
    return make_tensor(x.storage(), {B, heads, T, D}, {T * HD, D, HD, 1}, x.storage_offset(), x.dtype());
  return x.reshape({B, T, heads, D}).transpose(1, 2);
}

bool known_activation(const std::string& n) {
  return n == "gelu" || n == "gelu_new" || n == "gelu_fast" || n == "gelu_pytorch_tanh" || n == "relu" ||
         n == "silu" || n == "swish";
}

Tensor activation(const std::string& n, const Tensor& x) {
  if (n == "gelu") return gelu(x);
  if (n == "gelu_new" || n == "gelu_fast" || n == "gelu_pytorch_tanh") return gelu(x, "tanh");
  if (n == "relu") return relu(x);
  if (n == "silu" || n == "swish") return silu(x);
  raise<NotImplementedError>("activation '{}' is not supported", n);
}

Tensor alibi_bias(const Tensor& mask, int64_t heads, double scale, DType dtype) {
  // Slopes: a geometric sequence for the largest power of two <= heads, then every other term
  // of the sequence for twice as many heads (HF's build_alibi_tensor, in float32).
  const int64_t p2 = int64_t(1) << int64_t(std::floor(std::log2(double(heads))));
  auto slope_base = [](int64_t n) { return float(std::pow(2.0, -std::pow(2.0, -(std::log2(double(n)) - 3)))); };
  std::vector<float> slopes;
  for (int64_t i = 1; i <= p2; ++i) slopes.push_back(float(std::pow(double(slope_base(p2)), double(i))));
  for (int64_t i = 1; int64_t(slopes.size()) < heads; i += 2)
    slopes.push_back(float(std::pow(double(slope_base(2 * p2)), double(i))));
  Tensor m = mask.to(DType::Int64);
  Tensor rel = ((cumsum(m, 1) - ones({}, DType::Int64)) * m).to(DType::Float32);  // [B, S]
  Tensor s = tensor<float>(slopes, {1, heads, 1, 1});
  return (s * rel.unsqueeze(1).unsqueeze(1) * full({}, scale, DType::Float32)).to(dtype);
}

}  // namespace hf

// ---- loading ----------------------------------------------------------------------------------

std::vector<std::string> supported_architectures() {
  std::vector<std::string> out;
  for (const hf::Architecture& a : hf::architectures()) out.insert(out.end(), a.names.begin(), a.names.end());
  return out;
}

std::string architecture_for(const std::string& name) {
  std::string known;
  for (const hf::Architecture& a : hf::architectures()) {
    if (a.model_type == name) return a.names[0];
    for (const std::string& n : a.names)
      if (n == name) return n;
    known += (known.empty() ? "" : ", ") + a.model_type;
  }
  raise<NotImplementedError>("unknown architecture '{}' (model types: {})", name, known);
}

namespace {

// config.json (an object) -> the normalised config and its architecture. `where` names the source
// in messages. A config without "architectures" may name its model_type instead.
// Values no checkpoint can mean, which ran and gave NaN or silently different numbers.
void check_config_values(const ModelConfig& c, const std::string& where) {
  FOUNDRY_CHECK_AS(ValueError, std::isfinite(c.norm_eps) && c.norm_eps >= 0,
                   "{}: the norm epsilon (rms_norm_eps / layer_norm_eps) must be finite and >= 0, got {}", where, c.norm_eps);
  FOUNDRY_CHECK_AS(ValueError, std::isfinite(c.rope_theta) && c.rope_theta > 0,
                   "{}: rope_theta must be finite and > 0, got {}", where, c.rope_theta);
  FOUNDRY_CHECK_AS(ValueError, std::isfinite(c.rope_factor) && c.rope_factor > 0,
                   "{}: rope_scaling's factor must be finite and > 0, got {}", where, c.rope_factor);
  FOUNDRY_CHECK_AS(ValueError, c.max_positions >= 0, "{}: max_position_embeddings must be >= 0, got {}", where,
                   c.max_positions);
}

std::pair<ModelConfig, const hf::Architecture*> config_from_json(const json& j, const std::string& where,
                                                                 const fs::path& generation_config = {}) {
  if (!j.is_object()) raise<ValueError>("{}: config.json must be a JSON object", where);
  ModelConfig c;
  c.json = j.dump();
  c.model_type = hf::get_string(j, "model_type", "");
  auto archs = j.find("architectures");
  if (archs != j.end() && archs->is_array() && !archs->empty() && (*archs)[0].is_string())
    c.architecture = (*archs)[0].get<std::string>();
  else if (!c.model_type.empty() && (archs == j.end() || archs->is_null()))
    c.architecture = architecture_for(c.model_type);
  else
    raise<ValueError>("{}: config.json has no 'architectures' list naming the model class", where);
  const hf::Architecture& arch = hf::find_architecture(c.architecture);
  if (c.model_type.empty()) c.model_type = arch.model_type;
  c.eos_token_ids = hf::id_list(j, "eos_token_id");
  if (auto b = hf::id_list(j, "bos_token_id"); !b.empty()) c.bos_token_id = b[0];
  if (auto p = hf::id_list(j, "pad_token_id"); !p.empty()) c.pad_token_id = p[0];
  if (!generation_config.empty() && fs::exists(generation_config)) {
    json g = hf::read_json(generation_config);
    if (auto e = hf::id_list(g, "eos_token_id"); !e.empty()) c.eos_token_ids = e;
    if (auto p = hf::id_list(g, "pad_token_id"); !p.empty()) c.pad_token_id = p[0];
  }
  arch.parse(j, c);
  FOUNDRY_CHECK_AS(ValueError, c.vocab_size > 0 && c.hidden_size > 0 && c.num_layers > 0 && c.num_heads > 0,
                   "{}: config.json sizes must be positive", where);
  FOUNDRY_CHECK_AS(ValueError, c.num_kv_heads > 0 && c.num_heads % c.num_kv_heads == 0,
                   "{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", where, c.num_heads,
                   c.num_kv_heads);
  check_config_values(c, where);
  return {c, &arch};
}

std::pair<ModelConfig, const hf::Architecture*> parse_config(const std::string& dir) {
  fs::path folder(dir);
  if (!fs::is_directory(folder)) {
    if (fs::exists(folder))
      raise<IOError>("{}: a file that is neither a GGUF model (it does not start with 'GGUF') nor a model folder", dir);
    raise<IOError>("{}: not a model folder (no such directory)", dir);
  }
  fs::path cfg_path = folder / "config.json";
  if (!fs::exists(cfg_path)) raise<IOError>("{}: no config.json in the model folder", dir);
  return config_from_json(hf::read_json(cfg_path), dir, folder / "generation_config.json");
}

}  // namespace

ModelConfig read_config(const std::string& dir) { return parse_config(dir).first; }

namespace {

// LoadOptions::pack_bf16 applies: every floating matrix of the checkpoint is bf16 and stays bf16.
bool packs_bf16(const LoadOptions& options, const io::ShardedSafetensors& st) {
  if (!hf::pack_bf16_requested(options)) return false;
  bool any = false;
  for (const std::string& name : st.names()) {
    const Tensor t = st.get(name);
    if (t.dim() != 2 || !is_floating(t.dtype())) continue;
    if (t.dtype() != DType::BFloat16) return false;
    any = true;
  }
  return any;
}

}  // namespace

std::unique_ptr<CausalLM> load_pretrained(const std::string& dir, const LoadOptions& options) {
  if (is_gguf_file(dir)) return load_gguf(dir, options);
  auto [config, arch] = parse_config(dir);
  io::ShardedSafetensors st;
  try {
    // Copy-on-write pages: weights are used in place, and training writes private copies.
    st = io::ShardedSafetensors::open(dir, /*copy_on_write=*/true);
  } catch (const Error& e) {
    raise<IOError>("{}: no loadable weights (model.safetensors or model.safetensors.index.json): {}", dir, e.what());
  }
  autograd::NoGradGuard no_grad;
  // A `foundry quantize` folder: quantized weights are dequantized, or, for NF4 computed in float32
  // without another --quantize, kept as in-memory nf4 rows (the model gets a placeholder; GPT-2's
  // [in, out] Conv1D weights are not rows of outputs, so they are dequantized).
  const hf::QuantizedCheckpoint qc(dir, config.json, st);
  // (A quantized folder's matrices are not bf16 ones: they are never packed.)
  const std::string quantize = !qc.active() && packs_bf16(options, st) ? "bf16" : options.quantize;
  const bool keep_nf4 = quantize.empty() && options.dtype == DType::Float32 &&
                        config.architecture != "GPT2LMHeadModel";
  std::vector<std::pair<std::string, Tensor>> nf4_weights;
  // HF's own gpt2 checkpoints store the trunk without the "transformer." prefix.
  const bool bare_gpt2 = config.architecture == "GPT2LMHeadModel" && !st.contains("transformer.wte.weight") &&
                         st.contains("wte.weight");
  auto stored = [&](const std::string& name) {
    return bare_gpt2 && name.rfind("transformer.", 0) == 0 ? name.substr(12) : name;
  };
  // Matrices a decode step streams whole are copied out of the file mapping into chunks in huge
  // pages (hf::place_weight). A bf16 checkpoint computed in bf16, 1 thread, alternating x5:
  // 102-123 tokens/s on the mapping, 122-146 from the chunks, peak RSS 245.0 -> 246.5 MB.
  const bool resident = hf::weights_resident(quantize);
  hf::HugePageChunks chunks;
  auto fetch = [&](const std::string& module_name, const Shape& shape, const hf::Init&, hf::Layout layout) {
    const std::string name = stored(module_name);
    if (qc.quantized(name)) {
      if (keep_nf4)
        if (std::optional<Tensor> rows = qc.nf4_rows(name, shape)) {
          nf4_weights.emplace_back(module_name, *rows);
          return zeros({1}, DType::Float32).expand(IntList(shape));
        }
      Tensor t = qc.dequantize(name, shape);
      return t.to(options.dtype.value_or(DType::Float32));
    }
    if (!st.contains(name)) raise<ValueError>("{}: the checkpoint has no tensor '{}'", dir, name);
    Tensor t = st.get(name);
    if (!(Shape(t.sizes()) == shape))
      raise<ValueError>("{}: '{}' has shape {} but the config implies {}", dir, name, shape_str(t.sizes()),
                        shape_str(shape));
    if (!is_floating(t.dtype()))
      raise<TypeError>("{}: '{}' has dtype {}; weights must be floating point", dir, name, dtype_name(t.dtype()));
    const DType want = options.dtype.value_or(t.dtype());  // nullopt: the checkpoint's own
    return hf::place_weight(chunks, resident, t, want, layout);
  };
  auto has = [&](const std::string& name) { return st.contains(stored(name)) || qc.quantized(stored(name)); };
  std::unique_ptr<CausalLM> model =
      arch->build(config, hf::WeightSource(fetch, has, std::make_shared<hf::WeightProducts>()));
  for (const auto& [name, rows] : nf4_weights) model->adopt_quantized(name, "nf4", rows);
  model->set_weight_quantization(quantize);
  model->set_kv_cache_format(options.kv_cache);
  model->set_quantized_prefill(options.quantized_prefill);
  model->eval();
  model->freeze_if_quantized();
  return model;
}

std::unique_ptr<CausalLM> create_model(const std::string& config_json) {
  io::check_json_depth(config_json, "model config");
  json j;
  try {
    j = json::parse(config_json);
  } catch (const json::exception& e) {
    raise<ValueError>("model config: malformed JSON: {}", e.what());
  }
  auto [config, arch] = config_from_json(j, "model config");
  j["architectures"] = {config.architecture};
  j["model_type"] = config.model_type;
  config.json = j.dump();
  const double std_dev = hf::get_double(j, "initializer_range", 0.02);
  autograd::NoGradGuard no_grad;
  auto fetch = [std_dev](const std::string&, const Shape& shape, const hf::Init& init, hf::Layout) { return init.make(shape, std_dev); };
  auto has = [](const std::string&) { return false; };
  std::unique_ptr<CausalLM> model =
      arch->build(config, hf::WeightSource(fetch, has, std::make_shared<hf::WeightProducts>()));
  model->train();
  return model;
}

}  // namespace foundry::models
