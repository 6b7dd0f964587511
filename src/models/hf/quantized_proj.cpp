// WeightProducts: the weight products of every architecture when autograd does not record. A weight is quantized when
// weight quantization is on (a copy in any format of foundry/quant/block_formats.h, made on first
// use, transposed for [in, out] weights) or when the loader adopted quantized bytes for it (a GGUF
// file's tensors, used in place). Then every product uses the quantized weight, so prefill and
// decode compute with the same numbers:
// - few activation rows (decode): each row is quantized to the format's dot format (q8_0, or q8_K
//   for the K-quants) and multiplied by the matrix-vector kernels, as llama.cpp does; they stream
//   4.5-8.5 bits per weight instead of 32;
// - more rows (prefill): where the CPU has an integer kernel for the format (every GGUF block
//   format on x86: AMX-INT8 tiles, AVX-512 VNNI or AVX2 byte dot products), every row is quantized
//   as decode's row is and the kernel dots each weight row with several activation rows at once
//   (decode's numbers); for a format without a kernel the weight is dequantized and the product
//   is a GEMM in bfloat16 (activations rounded to bf16, float32 accumulation:
//   oneDNN's AVX512-BF16 / AMX kernels) when the CPU has native bf16 dot products; else a float32
//   GEMM; see set_quantized_prefill.
// Once a memory-mapped float weight is quantized its pages are handed back to the kernel (they are
// clean file pages: a later read faults them in again), so resident memory holds the quantized
// copy only.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <memory>

#include <oneapi/dnnl/dnnl.h>

#include "foundry/autograd/grad_mode.h"
#include "foundry/autograd/node.h"
#include "foundry/core/allocator.h"
#include "foundry/core/layout.h"
#include "foundry/core/parallel.h"
#include "foundry/ops/ops.h"
#include "foundry/quant/block_formats.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/unary.h"
#include "models/hf/common.h"
#include "quant/bf16_packed.h"
#include "quant/q8_kernels.h"

namespace foundry::models::hf {

struct WeightProducts::Quantized {
  const quant::BlockFormatTraits* format = nullptr;
  int64_t rows = 0, k = 0;
  const uint8_t* data = nullptr;
  Tensor keepalive;  // the storage `data` points into: adopted bytes, or a chunk of carve()
  bool owned = false;  // made by quantizing a weight (carved), not adopted
  bool transposed = false;  // the rows are W^T's (a [in, out] weight)
  quant::WeightLayout layout = quant::WeightLayout::Rows;  // quant::preferred_layout's, chosen when made or adopted
  int64_t bytes = 0;  // what `data` holds (a packed bf16 matrix's tail included)
};

namespace {

// A [rows, k] bf16 matrix (contiguous rows at w) packed without loss into chunk memory
// (quant::WeightLayout::PackedBF16): q's data, keepalive and bytes.
void pack_into(HugePageChunks& chunks, const uint16_t* w, WeightProducts::Quantized& q) {
  const quant::PackedBF16Plan plan = quant::plan_packed_bf16(w, q.rows, q.k);
  q.bytes = plan.bytes();
  uint8_t* dst = nullptr;
  std::tie(dst, q.keepalive) = chunks.carve(q.bytes);
  quant::pack_bf16(w, plan, dst, q.bytes);
  q.data = dst;
  q.layout = quant::WeightLayout::PackedBF16;
}

}  // namespace

std::pair<uint8_t*, Tensor> HugePageChunks::carve(int64_t bytes) {
  constexpr int64_t kMaxChunk = int64_t(32) << 20;
  const int64_t need = (bytes + 63) / 64 * 64;
  if (!chunk_.defined() || used_ + need > chunk_.numel()) {
    const int64_t size = std::max({need, first_chunk_, std::min(carved_, kMaxChunk)});
    chunk_ = foundry::empty({size}, DType::UInt8);
    allocator::advise_huge_pages(chunk_.data_ptr(), size_t(size));
    used_ = 0;
  }
  uint8_t* p = static_cast<uint8_t*>(chunk_.data_ptr()) + used_;
  used_ += need;
  carved_ += need;
  return {p, chunk_};
}

Tensor HugePageChunks::empty(IntList shape, DType dtype) {
  const int64_t item = itemsize(dtype);
  auto [p, chunk] = carve(numel_of(shape) * item);
  const int64_t offset = (p - static_cast<uint8_t*>(chunk.data_ptr())) / item;  // 64-byte aligned: whole items
  return make_tensor(chunk.storage(), shape, contiguous_strides(shape), offset, dtype);
}

void HugePageChunks::reset() {
  chunk_ = Tensor();
  used_ = carved_ = 0;
}

Tensor HugePageChunks::copy_of(const Tensor& t, DType dtype, Layout layout) {
  // RowsOfTranspose: t^T copied contiguous, handed back viewed as t's shape.
  const bool transpose = layout == Layout::RowsOfTranspose && t.dim() == 2;
  const Tensor source = transpose ? t.t() : t;
  Tensor placed = empty(source.sizes(), dtype);
  placed.copy_(source);
  release_mapped_pages(t);
  return transpose ? placed.t() : placed;
}

bool pack_bf16_requested(const LoadOptions& options) {
  return options.pack_bf16 && options.quantize.empty() && options.dtype != DType::Float32 &&
         options.dtype != DType::Float16;
}

bool weights_resident(const std::string& quantize) {
  return quantize.empty() && std::getenv("FOUNDRY_MMAP_WEIGHTS") == nullptr;
}

Tensor place_weight(HugePageChunks& chunks, bool resident, const Tensor& t, DType dtype, Layout layout) {
  if (resident && t.dim() >= 2 && t.numel() * itemsize(dtype) >= (int64_t(64) << 10))
    return chunks.copy_of(t, dtype, layout);
  return t.dtype() == dtype ? t : t.to(dtype);
}

void WeightProducts::set_format(const std::string& format) {
  if (!format.empty()) {
    const quant::BlockFormat f = quant::traits(format).format;  // ValueError naming the formats if unknown
    if (f == quant::BlockFormat::Q8_K)
      raise<ValueError>("q8_K is the K-quants' activation format, not a weight format");
  }
  format_ = format;
  ++generation_;
  for (auto it = quantized_.begin(); it != quantized_.end();)
    it = it->second->owned ? quantized_.erase(it) : std::next(it);
  chunks_.reset();  // copies made from now on start a chunk of their own
}

void WeightProducts::adopt(const Tensor& weight, const std::string& format, const Tensor& bytes, bool transposed) {
  const quant::BlockFormatTraits& t = quant::traits(format);
  FOUNDRY_CHECK_AS(ValueError, weight.dim() == 2, "adopt_quantized: weight must be 2-D, got {} dims", weight.dim());
  const int64_t rows = weight.size(transposed ? 1 : 0), k = weight.size(transposed ? 0 : 1);
  FOUNDRY_CHECK_AS(ValueError, bytes.is_contiguous() && bytes.nbytes() == quant::quantized_bytes(t, rows, k),
                   "adopt_quantized: {} bytes for a [{}, {}] {} matrix that needs {}", bytes.nbytes(), rows, k, t.name,
                   quant::quantized_bytes(t, rows, k));
  auto q = std::make_shared<Quantized>();
  q->format = &t;
  q->rows = rows;
  q->k = k;
  q->keepalive = bytes;
  q->data = static_cast<const uint8_t*>(bytes.data_ptr());
  q->transposed = transposed;
  q->bytes = bytes.nbytes();
  q->layout = quant::preferred_layout(t, rows, k);
  if (q->layout == quant::WeightLayout::PackedBF16) {
    pack_into(chunks_, static_cast<const uint16_t*>(bytes.data_ptr()), *q);
    release_mapped_pages(bytes);
  } else if (q->layout != quant::WeightLayout::Rows) {
    uint8_t* dst = static_cast<uint8_t*>(bytes.data_ptr());
    if (bytes.storage()->kind() != StorageImpl::Kind::Owned || bytes.storage()->read_only()) {
      // A file's pages (or memory this process does not own): rearranged in a copy, the pages handed back.
      std::tie(dst, q->keepalive) = chunks_.carve(bytes.nbytes());
      std::memcpy(dst, bytes.data_ptr(), size_t(bytes.nbytes()));
      q->data = dst;
      release_mapped_pages(bytes);
    }
    quant::to_layout(t, q->layout, dst, rows, k);
  }
  quantized_[weight.impl()] = std::move(q);
  ++generation_;  // a memo may point at the rows this replaced
}

// Drops the resident pages wholly inside a memory-mapped weight (clean file pages: reading them
// again faults them back in from the file, so this frees memory without changing any value).
void release_mapped_pages(const Tensor& w) {
  if (!w.defined() || w.storage()->kind() != StorageImpl::Kind::Mapped || !w.is_contiguous()) return;
  const auto page = uintptr_t(sysconf(_SC_PAGESIZE));
  const auto begin = uintptr_t(w.data_ptr());
  const uintptr_t first = (begin + page - 1) / page * page, last = (begin + uintptr_t(w.nbytes())) / page * page;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

bool WeightProducts::adopted(const Tensor& w) const {
  auto it = quantized_.find(w.impl());
  return it != quantized_.end() && !it->second->owned;
}

std::optional<std::pair<std::string, int64_t>> WeightProducts::adopted_storage(const Tensor& w) const {
  auto it = quantized_.find(w.impl());
  if (it == quantized_.end() || it->second->owned) return std::nullopt;
  const Quantized& q = *it->second;
  return std::pair{std::string(q.format->name), q.bytes};
}

namespace {

// Rows [r0, r1) of a quantized [rows, k] matrix as float32 [r1 - r0, k].
Tensor dequantized_rows(const quant::BlockFormatTraits& t, quant::WeightLayout layout, const uint8_t* w, int64_t rows,
                        int64_t k, int64_t r0, int64_t r1) {
  Tensor out = empty({r1 - r0, k}, DType::Float32);
  float* d = out.data<float>();
  const quant::RowDequantizer dequantize = quant::fast_dequantizer(t);
  parallel_for(r0, r1, 16, [&](int64_t lo, int64_t hi) {
    std::vector<uint8_t> row(size_t(layout == quant::WeightLayout::Rows ? 0 : quant::quantized_bytes(t, 1, k)));
    for (int64_t r = lo; r < hi; ++r) dequantize(quant::row_of(t, layout, w, rows, k, r, row.data()), d + (r - r0) * k, k);
  });
  return out;
}

}  // namespace

Tensor WeightProducts::adopted_dense(const Tensor& w) const {
  auto it = quantized_.find(w.impl());
  if (it == quantized_.end() || it->second->owned) return Tensor();
  const Quantized& q = *it->second;
  Tensor rows = dequantized_rows(*q.format, q.layout, q.data, q.rows, q.k, 0, q.rows).to(w.dtype());  // [rows, k]
  return q.transposed ? rows.t().contiguous() : rows;
}

Tensor WeightProducts::adopted_rows(const Tensor& w, const Tensor& ids) const {
  auto it = quantized_.find(w.impl());
  if (it == quantized_.end() || it->second->owned) return Tensor();
  const Quantized& q = *it->second;
  FOUNDRY_CHECK_AS(ValueError, is_integral(ids.dtype()),
                   "embedding: indices must be an integer tensor, got {}", dtype_name(ids.dtype()));
  const Tensor idx = ids.to(DType::Int64).contiguous();
  const int64_t* id = idx.data<int64_t>();
  const int64_t n = idx.numel();
  for (int64_t i = 0; i < n; ++i)
    if (id[i] < 0 || id[i] >= q.rows)
      raise<IndexError>("embedding: index {} is out of range for a weight with {} rows", id[i], q.rows);
  Shape shape(ids.sizes());
  shape.push_back(q.k);
  Tensor out = empty(shape, DType::Float32);
  float* dst = out.data<float>();
  // The reference dequantizer's floats (fast_dequantizer's SIMD forms give them bit for bit): the
  // values a dense copy of the table held (GGUFFile::tensor).
  const quant::RowDequantizer dequantize = quant::fast_dequantizer(*q.format);
  parallel_for(0, n, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(q.k, 1)), [&](int64_t b, int64_t e) {
    std::vector<uint8_t> row(size_t(q.layout == quant::WeightLayout::Rows ? 0 : quant::quantized_bytes(*q.format, 1, q.k)));
    for (int64_t i = b; i < e; ++i) dequantize(quant::row_of(*q.format, q.layout, q.data, q.rows, q.k, id[i], row.data()), dst + i * q.k, q.k);
  });
  return w.dtype() == DType::Float32 ? out : out.to(w.dtype());
}

bool WeightProducts::any_adopted() const {
  for (const auto& [key, q] : quantized_)
    if (!q->owned) return true;
  return false;
}

namespace {

// Rows per tile: about 4 MB of float32 weights at a time.
int64_t tile_rows(int64_t k) { return std::max<int64_t>(16, (int64_t(1) << 20) / std::max<int64_t>(k, 1)); }

}  // namespace

const std::shared_ptr<WeightProducts::Quantized>& WeightProducts::quantized(const Tensor& w, bool transposed) const {
  static const std::shared_ptr<Quantized> none;
  auto it = quantized_.find(w.impl());
  if (it != quantized_.end()) return it->second;
  if (!format_applies(w, transposed)) return none;  // no format, or rows that are not whole blocks
  const quant::BlockFormatTraits& t = quant::traits(format_);
  const int64_t k = transposed ? w.size(0) : w.size(1);
  autograd::NoGradGuard no_grad;
  auto q = std::make_shared<Quantized>();
  q->format = &t;
  q->rows = transposed ? w.size(1) : w.size(0);
  q->k = k;
  uint8_t* dst = nullptr;
  // Carved from chunks in huge pages, not one block per matrix: alternating x4, 1 thread, f16
  // weights decoded at 69-95 tokens/s in separate blocks and 120-144 in chunks (q4_K 308-324 ->
  // 335).
  q->owned = true;
  q->layout = quant::preferred_layout(t, q->rows, k);
  q->bytes = quant::quantized_bytes(t, q->rows, q->k);
  // A packed bf16 copy's size is known once the rows are bf16: a bf16 weight's rows are packed where
  // they lie, others go to a scratch matrix first.
  const bool packed = q->layout == quant::WeightLayout::PackedBF16;
  if (packed && !transposed && w.dtype() == DType::BFloat16 && w.is_contiguous()) {
    pack_into(chunks_, static_cast<const uint16_t*>(w.data_ptr()), *q);
    release_mapped_pages(w);
    return quantized_.emplace(w.impl(), std::move(q)).first->second;
  }
  Tensor unpacked;
  if (packed) {
    unpacked = foundry::empty({q->bytes}, DType::UInt8);
    dst = static_cast<uint8_t*>(unpacked.data_ptr());
  } else {
    std::tie(dst, q->keepalive) = chunks_.carve(q->bytes);
  }
  q->data = dst;
  const int64_t row_bytes = quant::quantized_bytes(t, 1, k);
  const quant::RowQuantizer quantize = quant::exact_quantizer(t);
  // A tile of rows at a time, each tile's pages of a memory-mapped weight dropped once quantized:
  // the load's peak memory holds the quantized model and one tile, not the largest float matrix
  // too (Llama-110M's tied 98 MB embedding put a q4_0 load's peak at 187 MB, 130 right after it).
  // A transposed weight's rows are its columns, spread over all its pages: one tile.
  const int64_t tile = transposed ? q->rows : tile_rows(k);
  for (int64_t r0 = 0; r0 < q->rows; r0 += tile) {
    const int64_t n = std::min(tile, q->rows - r0);
    Tensor part = transposed ? w.t() : w.narrow(0, r0, n);
    const Tensor rows = part.to(DType::Float32).contiguous();  // [n, k]
    const float* src = rows.data<float>();
    uint8_t* out = dst + r0 * row_bytes;
    parallel_for(0, n, 16, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) quantize(src + r * k, out + r * row_bytes, k);
    });
    if (!transposed) release_mapped_pages(part);
  }
  release_mapped_pages(w);
  if (packed) pack_into(chunks_, reinterpret_cast<const uint16_t*>(dst), *q);
  else quant::to_layout(t, q->layout, dst, q->rows, k);
  return quantized_.emplace(w.impl(), std::move(q)).first->second;
}

namespace {

// AVX512-BF16 (vdpbf16ps) or AMX-BF16: bf16 GEMMs run natively (oneDNN's ISA bit sets nest).
bool native_bf16_gemm() {
  static const bool ok = (unsigned(dnnl_get_effective_cpu_isa()) & unsigned(dnnl_cpu_isa_avx512_core_bf16)) ==
                         unsigned(dnnl_cpu_isa_avx512_core_bf16);
  return ok;
}

}  // namespace

void WeightProducts::set_prefill(const std::string& mode) {
  FOUNDRY_CHECK_AS(ValueError, mode == "auto" || mode == "integer" || mode == "float32" || mode == "bfloat16",
                   "quantized prefill must be auto, integer, float32 or bfloat16, got '{}'", mode);
  prefill_ = mode;
}

namespace {

enum class PrefillMath { Integer, BFloat16, Float32 };

// "auto": integer dot products where the format's integer GEMM beats an AVX-512 bf16 GEMM
// (quant::integer_gemm_preferred: every format with a kernel, with AVX-512 VNNI, and on AMX-INT8
// tiles where the CPU has them), else a bf16 GEMM where the CPU has native bf16 dot products
// (oneDNN's), else integer dot products where there is a kernel for the format (AVX2: no float32
// scratch matrix), else float32. "integer" without a kernel falls back as "auto" does.
PrefillMath prefill_math(const std::string& mode, const quant::BlockFormatTraits& t) {
  if (mode == "integer" && quant::has_integer_gemm(t)) return PrefillMath::Integer;
  if (mode == "auto" && quant::integer_gemm_preferred(t)) return PrefillMath::Integer;
  if (mode == "bfloat16" || (mode != "float32" && native_bf16_gemm())) return PrefillMath::BFloat16;
  if (mode != "float32" && quant::has_integer_gemm(t)) return PrefillMath::Integer;
  return PrefillMath::Float32;
}

// The activation rows' quantizer: q8_0 as llama.cpp's SIMD one (ties to even), other dot formats
// (q8_K) through the SIMD quantizer that writes the reference's bytes.
quant::RowQuantizer activation_quantizer(const quant::BlockFormatTraits& act) {
  return act.format == quant::BlockFormat::Q8_0 ? quant::quantize_row_q8_0_fast : quant::exact_quantizer(act);
}

// Rows of x quantized to t's dot format, as decode quantizes its one row.
kernels::ScratchArray<uint8_t> quantized_activations(const Tensor& xc, const quant::BlockFormatTraits& t, int64_t m,
                                                    int64_t k) {
  const auto& act = quant::traits(t.dot_format);
  const int64_t act_bytes = quant::quantized_bytes(act, 1, k);
  kernels::ScratchArray<uint8_t> xq(static_cast<size_t>(m * act_bytes));
  const float* x = xc.data<float>();
  const quant::RowQuantizer quantize = activation_quantizer(act);
  parallel_for(0, m, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) quantize(x + r * k, xq.data() + r * act_bytes, k);
  });
  return xq;
}

// x W^T in bfloat16 for a block-format W, a tile of W's rows at a time: each thread dequantizes a
// tile (up to 512 KB as bf16, so it stays in L2) and multiplies the activations by it into its columns
// of `out`. A whole dequantized float32 copy of W, then a bf16 copy of that, then the GEMM streamed
// W through memory three more times (the LM head alone: 98 + 98 + 49 MB per prefill). False where
// oneDNN has no native kernel for a tile (the caller falls back to the whole-matrix path).
bool bf16_product_by_tiles(const Tensor& xc, const quant::BlockFormatTraits& t, quant::WeightLayout layout,
                           const uint8_t* w, int64_t rows_out, int64_t k, int64_t m, const Shape& out_shape, Tensor& out) {
  const int64_t row_bytes = quant::quantized_bytes(t, 1, k);
  const quant::RowDequantizer dequantize = quant::fast_dequantizer(t);
  const quant::BF16RowDequantizer to_bf16 = quant::bf16_dequantizer(t);
  // Tiles of up to 512 KB of bf16 (on a Zen 5, 1 thread, q4_0 Llama-110M prefill: 64 / 256 /
  // 1024 / 4096 KB tiles gave 1080-1180 / 1220-1250 / 1250-1375 / 1310-1320 tokens/s), and at least
  // four per thread so small matrices still split evenly.
  const int64_t by_size = (int64_t(512) << 10) / (2 * k), by_threads = rows_out / (4 * int64_t(get_num_threads()));
  const int64_t tile = std::max<int64_t>(32, std::min(by_size, by_threads) / 32 * 32);
  const Tensor xb = xc.reshape({m, k}).to(DType::BFloat16).contiguous();
  const auto* a = static_cast<const uint16_t*>(xb.data_ptr());
  Tensor y = empty({m, rows_out}, DType::Float32);
  float* c = y.data<float>();
  std::atomic<bool> ok{true};
  parallel_for(0, (rows_out + tile - 1) / tile, 1, [&](int64_t lo, int64_t hi) {
    thread_local std::vector<uint16_t> wtile;
    thread_local std::vector<float> row;  // formats without a bf16 dequantizer go through float32
    thread_local std::vector<uint8_t> gathered;  // a row of a layout other than Rows
    wtile.resize(size_t(tile * k));
    if (!to_bf16) row.resize(size_t(k));
    gathered.resize(size_t(row_bytes));
    for (int64_t i = lo; i < hi && ok.load(std::memory_order_relaxed); ++i) {
      const int64_t r0 = i * tile, n = std::min(tile, rows_out - r0);
      for (int64_t r = 0; r < n; ++r) {
        const uint8_t* wr = quant::row_of(t, layout, w, rows_out, k, r0 + r, gathered.data());
        if (to_bf16) {  // the same bits as dequantizing to float32, then rounding
          to_bf16(wr, wtile.data() + r * k, k);
        } else {
          dequantize(wr, row.data(), k);
          kernels::convert_f32_to_bf16(row.data(), wtile.data() + r * k, k);
        }
      }
      if (!kernels::gemm_bf16_nt_block(a, k, wtile.data(), k, c + r0, rows_out, m, n, k)) ok = false;
    }
  });
  if (!ok) return false;
  out = y.reshape(out_shape);
  return true;
}

// One matrix of decode_products: `rows` quantized rows at `data`.
struct QuantizedRows {
  const uint8_t* data;
  int64_t rows;
};

// Few rows (decode): each row of xc [m, k] (float32, contiguous) quantized to t's dot format once,
// then the matrix-vector products of every matrix with it as one parallel job. Float32 outputs of
// shape x_sizes with the last dimension each matrix's rows.
std::vector<Tensor> decode_products(const Tensor& xc, IntList x_sizes, const quant::BlockFormatTraits& t,
                                    quant::WeightLayout layout, int64_t k, std::span<const QuantizedRows> mats) {
  std::vector<Tensor> out;
  out.reserve(mats.size());
  for (const QuantizedRows& q : mats) {
    Shape shape(x_sizes);
    shape.back() = q.rows;
    out.push_back(empty(IntList(shape), DType::Float32));
  }
  const auto& act = quant::traits(t.dot_format);
  // Reused across calls (decode makes several a layer): no allocation per product.
  thread_local std::vector<uint8_t> xq;
  thread_local std::vector<quant::GemvTarget> targets;
  xq.resize(static_cast<size_t>(quant::quantized_bytes(act, 1, k)));
  targets.resize(mats.size());
  const quant::RowQuantizer quantize = activation_quantizer(act);
  for (int64_t r = 0, m = xc.numel() / k; r < m; ++r) {
    quantize(xc.data<float>() + r * k, xq.data(), k);
    for (size_t i = 0; i < mats.size(); ++i) targets[i] = {mats[i].data, mats[i].rows, out[i].data<float>() + r * mats[i].rows};
    quant::gemv_many(t, k, xq.data(), targets, layout);
  }
  return out;
}

// How every product ends: the bias added in float32, then x's dtype. (Decode runs this and
// float32_rows for every product of every token: a tensor handed on by move rather than copied
// spares its reference count two locked instructions, each waiting for the stores before it.)
Tensor finish_product(Tensor out, const Tensor& b, DType dtype) {
  if (b.defined()) out = out + kernels::cast_rows(b, DType::Float32);
  if (out.dtype() == dtype) return out;
  return kernels::cast_rows(out, dtype);
}

// x as contiguous float32: x itself where it is already.
Tensor float32_rows(const Tensor& x) {
  if (x.dtype() == DType::Float32 && x.is_contiguous()) return x;
  return kernels::cast_rows(x, DType::Float32).contiguous();
}

Tensor quantized_product(const Tensor& x, const Tensor& b, const quant::BlockFormatTraits& t, quant::WeightLayout layout,
                         int64_t rows_out, int64_t k, const uint8_t* w, const std::string& prefill) {
  autograd::NoGradGuard no_grad;
  Tensor xc = float32_rows(x);
  const int64_t m = xc.numel() / k;
  const int64_t row_bytes = quant::quantized_bytes(t, 1, k);
  Shape out_shape(x.sizes());
  out_shape.back() = rows_out;
  Tensor out;
  const PrefillMath math = m > CausalLM::kQuantizedMaxRows ? prefill_math(prefill, t) : PrefillMath::Integer;
  if (math == PrefillMath::Integer && quant::has_integer_gemm(t) && m > 1) {
    // Decode's numbers on every row: integer dot products against the rows quantized as decode does
    // (one row is decode's own call below, without a quantized row allocated per product).
    out = empty(out_shape, DType::Float32);
    const kernels::ScratchArray<uint8_t> xq = quantized_activations(xc, t, m, k);
    quant::gemm_integer(t, w, rows_out, k, xq.data(), m, out.data<float>(), layout);
  } else if (math == PrefillMath::Integer) {
    const QuantizedRows one{w, rows_out};
    out = decode_products(xc, x.sizes(), t, layout, k, std::span<const QuantizedRows>(&one, 1))[0];
  } else {
    const bool bf16_gemm = math == PrefillMath::BFloat16;
    Tensor dense;
    if ((t.format == quant::BlockFormat::F16 || t.format == quant::BlockFormat::BF16) && layout == quant::WeightLayout::Rows) {
      // 16-bit rows are a tensor already: viewed in place, converted by the SIMD casts.
      auto storage = make_ref<StorageImpl>(const_cast<uint8_t*>(w), size_t(rows_out * row_bytes),
                                           StorageImpl::Kind::External, [] {}, true);
      Tensor raw = make_tensor(storage, {rows_out, k}, contiguous_strides({rows_out, k}), 0,
                               t.format == quant::BlockFormat::F16 ? DType::Float16 : DType::BFloat16);
      dense = raw.dtype() == DType::Float16 ? raw.to(DType::Float32) : raw;  // f16 -> bf16 has no direct SIMD cast
      if (bf16_gemm) dense = dense.to(DType::BFloat16);
    } else if (layout == quant::WeightLayout::PackedBF16 && bf16_gemm) {
      // Unpacked whole, then the 16-bit rows' GEMM: Llama-110M bf16 prefill, 1 thread, alternating
      // processes against the plain rows 0.95-1.02x (through bf16_product_by_tiles' tiles: 0.89-0.93x).
      dense = empty({rows_out, k}, DType::BFloat16);
      auto* d = static_cast<uint16_t*>(dense.data_ptr());
      const int64_t packed_row = quant::packed_bf16_row_bytes(k);
      parallel_for(0, rows_out, 16, [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) quant::unpack_bf16_row(w + r * packed_row, k, d + r * k);
      });
    } else if (bf16_gemm && bf16_product_by_tiles(xc, t, layout, w, rows_out, k, m, out_shape, out)) {
      return finish_product(std::move(out), b, x.dtype());
    } else {
      dense = dequantized_rows(t, layout, w, rows_out, k, 0, rows_out);
    }
    out = empty({m, rows_out}, DType::Float32);
    if (bf16_gemm && kernels::gemm_bf16_f32out(xc.reshape({m, k}).to(DType::BFloat16), dense.to(DType::BFloat16).t(), out))
      return finish_product(out.reshape(out_shape), b, x.dtype());
    // The dense model's op, the bias inside it.
    return finish_product(linear(xc, dense.to(DType::Float32), b.defined() ? b.to(DType::Float32) : b), Tensor(), x.dtype());
  }
  return finish_product(std::move(out), b, x.dtype());
}

}  // namespace

// The weight's quantized copy: adopted bytes, or (float32 activations) one made on first use.
const WeightProducts::Quantized* WeightProducts::lookup(const Tensor& x, const Tensor& w, bool transposed,
                                                        Memo* memo) const {
  if (memo && memo->q && memo->weight == w.impl() && memo->generation == generation_) return memo->q;
  const Quantized* q = nullptr;
  if (auto it = quantized_.find(w.impl()); it != quantized_.end()) q = it->second.get();
  else if (x.dtype() == DType::Float32 || (x.dtype() == DType::BFloat16 && format_ == "bf16"))  // bf16 models: packed copies
    q = quantized(w, transposed).get();
  else return sixteen_bit_view(x, w, transposed);  // never memoised: it depends on x's rows
  if (memo && q) *memo = {w.impl(), q, generation_};
  return q;
}

// Decode's products of a 16-bit model as the quantized formats' (decode_products): q, k and v (gate
// and up) as one job with the activation converted once, where each Linear had been its own op
// (the activation widened, a job, the output narrowed). Llama-110M decode at 2 threads, medians of
// alternating processes: bf16 234 -> 263 tokens/s (6 pairs), f16 228 -> 253 (4); 1 thread alike
// (139 / 142). The same kernel and sums per row; the bias is added in float32 before the one
// rounding. Prefill (more rows) keeps the dense op's GEMMs.
const WeightProducts::Quantized* WeightProducts::sixteen_bit_view(const Tensor& x, const Tensor& w,
                                                                  bool transposed) const {
  const DType dt = w.dtype();
  if (!format_.empty() || w.dim() != 2 || x.dtype() != dt || (dt != DType::BFloat16 && dt != DType::Float16) ||
      x.dim() == 0)
    return nullptr;
  // W's rows ([out, in]): w itself, or a Conv1D weight ([in, out]) stored as the rows of its
  // transpose (Layout::RowsOfTranspose, strides (1, in)).
  const int64_t rows = w.size(transposed ? 1 : 0), k = w.size(transposed ? 0 : 1);
  if (!(transposed ? is_rows_of_transpose(w) : w.is_contiguous()) || x.size(-1) != k ||
      x.numel() / std::max<int64_t>(k, 1) > CausalLM::kQuantizedMaxRows)
    return nullptr;
  // Checked against w at every use, so an entry never outlives what it reads and holds nothing
  // alive (a model converted to another dtype frees its 16-bit weights).
  const quant::BlockFormatTraits* format =
      &quant::traits(dt == DType::BFloat16 ? quant::BlockFormat::BF16 : quant::BlockFormat::F16);
  std::shared_ptr<Quantized>& v = views_[w.impl()];
  if (!v || v->data != w.data_ptr() || v->format != format || v->rows != rows || v->k != k) {
    v = std::make_shared<Quantized>();
    v->format = format;
    v->rows = rows;
    v->k = k;
    v->data = static_cast<const uint8_t*>(w.data_ptr());
    v->transposed = transposed;
  }
  return v.get();
}

Tensor WeightProducts::product(const Tensor& x, const Tensor& w, const Tensor& b, bool transposed, Memo* memo) const {
  const Quantized* q = lookup(x, w, transposed, memo);
  if (q) return quantized_product(x, b, *q->format, q->layout, q->rows, q->k, q->data, prefill_);
  return dense(x, w, b, transposed);
}

std::vector<Tensor> WeightProducts::products(const Tensor& x, std::span<const Operand> weights, bool transposed) const {
  SmallVec<const Quantized*, 4> qs;
  for (const Operand& o : weights) {
    const Quantized* q = lookup(x, *o.w, transposed, o.memo);
    if (!q || (!qs.empty() && (q->format != qs.front()->format || q->k != qs.front()->k || q->layout != qs.front()->layout)))
      break;
    qs.push_back(q);
  }
  const int64_t k = x.size(-1), m = x.numel() / std::max<int64_t>(k, 1);
  std::vector<Tensor> out;
  if (qs.size() != weights.size() || weights.size() < 2 || m > CausalLM::kQuantizedMaxRows || k != qs.front()->k) {
    for (const Operand& o : weights) out.push_back(product(x, *o.w, *o.b, transposed, o.memo));
    return out;
  }
  // quantized_product's decode path, with one activation row quantized for all the matrices.
  autograd::NoGradGuard no_grad;
  SmallVec<QuantizedRows, 4> mats;
  for (const Quantized* q : qs) mats.push_back({q->data, q->rows});
  out = decode_products(float32_rows(x), x.sizes(), *qs.front()->format,
                        qs.front()->layout, k, std::span<const QuantizedRows>(mats.data(), mats.size()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = finish_product(std::move(out[i]), *weights[i].b, x.dtype());
  return out;
}

bool WeightProducts::quantized_for(const Tensor& w, bool transposed) const {
  return quantized_.count(w.impl()) || format_applies(w, transposed);
}

bool WeightProducts::format_applies(const Tensor& w, bool transposed) const {
  if (format_.empty() || w.dim() != 2) return false;
  return (transposed ? w.size(0) : w.size(1)) % quant::traits(format_).block_size == 0;
}

namespace {

// y = x W^T over a quantized W, one tile of W's rows at a time; x [m, k] float32 contiguous.
Tensor tiled_product(const Tensor& x, const quant::BlockFormatTraits& t, quant::WeightLayout layout, const uint8_t* w,
                     int64_t rows, int64_t k) {
  Tensor y = empty({x.size(0), rows}, DType::Float32);
  for (int64_t r0 = 0; r0 < rows; r0 += tile_rows(k)) {
    const int64_t r1 = std::min(rows, r0 + tile_rows(k));
    Tensor part = matmul(x, dequantized_rows(t, layout, w, rows, k, r0, r1).t());
    if (r1 - r0 == rows) return part;
    y.narrow(1, r0, r1 - r0).copy_(part);
  }
  return y;
}

// dx = dy W over a quantized W, tile by tile; dy [m, rows] float32.
Tensor tiled_input_grad(const Tensor& dy, const quant::BlockFormatTraits& t, quant::WeightLayout layout,
                        const uint8_t* w, int64_t rows, int64_t k) {
  Tensor dx;
  for (int64_t r0 = 0; r0 < rows; r0 += tile_rows(k)) {
    const int64_t r1 = std::min(rows, r0 + tile_rows(k));
    Tensor part = matmul(dy.narrow(1, r0, r1 - r0), dequantized_rows(t, layout, w, rows, k, r0, r1));
    dx = dx.defined() ? dx.add_(part) : part;
  }
  return dx;
}

}  // namespace

class QuantizedProductBackward : public autograd::Node {
 public:
  std::shared_ptr<WeightProducts::Quantized> q;
  Shape x_sizes;
  DType x_dtype = DType::Float32, b_dtype = DType::Float32;
  std::string name() const override { return "QuantizedProductBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    autograd::NoGradGuard no_grad;
    const Tensor& g = grads[0];
    std::vector<Tensor> out(2);
    if (!g.defined()) return out;
    Tensor dy = g.to(DType::Float32).contiguous().reshape({-1, q->rows});
    if (next_edges[0].valid())
      out[0] = tiled_input_grad(dy, *q->format, q->layout, q->data, q->rows, q->k).reshape(IntList(x_sizes)).to(x_dtype);
    if (next_edges[1].valid()) out[1] = sum(dy, {0}).to(b_dtype);
    return out;
  }
};

Tensor WeightProducts::differentiable_product(const Tensor& x, const Tensor& w, const Tensor& b, bool transposed) const {
  const std::shared_ptr<Quantized> q = quantized(w, transposed);
  FOUNDRY_CHECK_AS(ValueError, q != nullptr, "differentiable_product: the weight is not quantized");
  FOUNDRY_CHECK_AS(ValueError, x.size(-1) == q->k, "linear: input features {} but the quantized weight has {}", x.size(-1),
                   q->k);
  Tensor y;
  {
    autograd::NoGradGuard no_grad;
    y = tiled_product(x.to(DType::Float32).contiguous().reshape({-1, q->k}), *q->format, q->layout, q->data, q->rows,
                      q->k);
    if (b.defined()) y = y + b.to(DType::Float32);
    Shape out_shape(x.sizes());
    out_shape.back() = q->rows;
    y = y.reshape(IntList(out_shape));
    if (x.dtype() != DType::Float32) y = y.to(x.dtype());
  }
  const bool bias_grad = b.defined() && b.requires_grad();
  if (!autograd::is_grad_enabled() || (!x.requires_grad() && !bias_grad)) return y;
  auto node = std::make_shared<QuantizedProductBackward>();
  node->q = q;
  node->x_sizes = Shape(x.sizes());
  node->x_dtype = x.dtype();
  node->b_dtype = b.defined() ? b.dtype() : DType::Float32;
  node->next_edges.push_back(x.requires_grad() ? autograd::gradient_edge(x) : autograd::Edge{});
  node->next_edges.push_back(bias_grad ? autograd::gradient_edge(b) : autograd::Edge{});
  node->outputs.push_back({Shape(y.sizes()), y.dtype()});
  Tensor out = y.detach();
  autograd::AutogradMeta& m = out.impl()->autograd_meta();
  m.requires_grad = true;
  m.grad_fn = node;
  m.output_nr = 0;
  return out;
}

Tensor WeightProducts::dense(const Tensor& x, const Tensor& w, const Tensor& b, bool transposed) {
  if (!transposed) return linear(x, w, b);
  // A [in, out] weight stored as the rows of its transpose is an nn.Linear weight read through a
  // view: the same op, its bias inside the GEMM.
  if (is_rows_of_transpose(w)) return linear(x, w.t(), b);
  Tensor y = matmul(x, w);
  return b.defined() ? y + b : y;
}

}  // namespace foundry::models::hf
