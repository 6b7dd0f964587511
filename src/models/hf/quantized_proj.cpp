// CausalLM::proj / proj_t: the weight products of every architecture. With weight quantization
// on, products of few activation rows (decode) run on quantized copies of the weights (any format
// of foundry/quant/block_formats.h; made on first use, transposed for [in, out] weights) with the
// activations quantized per row to the format's dot format (q8_0, or q8_K for the K-quants), as
// llama.cpp does; the matrix-vector kernel streams 4.5-8.5 bits per weight instead of 32.
#include <cstring>
#include <memory>

#include "foundry/autograd/grad_mode.h"
#include "foundry/core/parallel.h"
#include "foundry/ops/ops.h"
#include "foundry/quant/block_formats.h"
#include "models/hf/common.h"
#include "quant/q8_kernels.h"

namespace foundry::models {

struct CausalLM::QuantizedWeight {
  quant::BlockFormat format;
  int64_t rows = 0, k = 0;
  std::vector<uint8_t> data;
};

void CausalLM::set_weight_quantization(const std::string& format) {
  if (!format.empty()) {
    const quant::BlockFormat f = quant::traits(format).format;  // ValueError naming the formats if unknown
    if (f == quant::BlockFormat::Q8_K)
      raise<ValueError>("q8_K is the K-quants' activation format, not a weight format");
  }
  qformat_ = format;
  quantized_.clear();
}

const CausalLM::QuantizedWeight* CausalLM::quantized(const Tensor& w, bool transposed) const {
  auto it = quantized_.find(w.impl());
  if (it != quantized_.end()) return it->second.get();
  const quant::BlockFormatTraits& t = quant::traits(qformat_);
  Tensor rows = (transposed ? w.t() : w).to(DType::Float32).contiguous();  // [out, in]
  auto q = std::make_shared<QuantizedWeight>();
  q->format = t.format;
  q->rows = rows.size(0);
  q->k = rows.size(1);
  q->data.resize(size_t(quant::quantized_bytes(t, q->rows, q->k)));
  const int64_t row_bytes = q->k / t.block_size * t.block_bytes;
  const float* src = rows.data<float>();
  parallel_for(0, q->rows, 64, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) t.quantize(src + r * q->k, q->data.data() + r * row_bytes, q->k);
  });
  return quantized_.emplace(w.impl(), std::move(q)).first->second.get();
}

namespace {

bool wants_quantized(const std::string& format, const Tensor& x, int64_t k) {
  return !format.empty() && x.dtype() == DType::Float32 && k > 0 && k % quant::traits(format).block_size == 0 &&
         x.numel() / k <= CausalLM::kQuantizedMaxRows;
}

Tensor quantized_product(const Tensor& x, const Tensor& b, int64_t rows_out, int64_t k, const uint8_t* w,
                         quant::BlockFormat format) {
  autograd::NoGradGuard no_grad;
  Tensor xc = x.contiguous();
  const int64_t m = xc.numel() / k;
  Shape out_shape(x.sizes());
  out_shape.back() = rows_out;
  Tensor out = empty(out_shape, DType::Float32);
  const auto& t = quant::traits(format);
  const auto& act = quant::traits(t.dot_format);
  std::vector<uint8_t> xq(static_cast<size_t>(quant::quantized_bytes(act, 1, k)));
  for (int64_t r = 0; r < m; ++r) {
    act.quantize(xc.data<float>() + r * k, xq.data(), k);
    quant::gemv(t, w, rows_out, k, xq.data(), out.data<float>() + r * rows_out);
  }
  return b.defined() ? out + b : out;
}

}  // namespace

Tensor CausalLM::proj(const Tensor& x, const Tensor& w, const Tensor& b) const {
  if (!wants_quantized(qformat_, x, w.size(1))) return linear(x, w, b);
  const QuantizedWeight* q = quantized(w, false);
  return quantized_product(x, b, q->rows, q->k, q->data.data(), q->format);
}

Tensor CausalLM::proj_t(const Tensor& x, const Tensor& w, const Tensor& b) const {
  if (!wants_quantized(qformat_, x, w.size(0))) {
    Tensor y = matmul(x, w);
    return b.defined() ? y + b : y;
  }
  const QuantizedWeight* q = quantized(w, true);
  return quantized_product(x, b, q->rows, q->k, q->data.data(), q->format);
}

}  // namespace foundry::models
