// QLoRA's quantized frozen base: the projections' weights replaced by quantized bytes that the
// products read (and differentiate through, tile by tile; see WeightProducts::differentiable_product).
#include <cmath>
#include <cstring>

#include "foundry/autograd/grad_mode.h"
#include "foundry/core/error.h"
#include "foundry/core/numeric.h"
#include "foundry/ops/ops.h"
#include "foundry/peft/lora.h"
#include "foundry/quant/block_formats.h"
#include "foundry/quant/weight_only.h"
#include "models/hf/blocks.h"
#include "quant/formats_internal.h"
#include "quant/q8_kernels.h"

namespace foundry::peft {

namespace {

// rows [rows, k] float32 contiguous -> the bytes of `format` for every row.
Tensor quantize_rows(const Tensor& rows, const std::string& format) {
  const int64_t n = rows.size(0), k = rows.size(1);
  const float* src = rows.data<float>();
  if (format == "nf4") {
    const quant::BlockFormatTraits& t = quant::traits("nf4");
    const quant::NF4Weight q = quant::quantize_nf4(src, n * k, /*double_quant=*/true);
    const int64_t blocks = n * k / quant::kNF4BlockSize, half = quant::kNF4BlockSize / 2;
    Tensor out = empty({quant::quantized_bytes(t, n, k)}, DType::UInt8);
    auto* dst = static_cast<uint8_t*>(out.data_ptr());
    for (int64_t b = 0; b < blocks; ++b)
      quant::detail::nf4_block_from_bnb(q.absmax[size_t(b)], q.packed.data() + b * half, dst + b * t.block_bytes);
    return out;
  }
  if (format == "int8") {
    const quant::BlockFormatTraits& t = quant::traits("q8_0");
    const quant::Int8RowWeight q = quant::quantize_int8_rows(src, n, k);
    Tensor out = empty({quant::quantized_bytes(t, n, k)}, DType::UInt8);
    auto* dst = static_cast<uint8_t*>(out.data_ptr());
    for (int64_t r = 0; r < n; ++r) {
      const uint16_t scale = Half(q.scales[size_t(r)] / 127.0f).bits;
      for (int64_t b = 0; b < k / t.block_size; ++b) {
        uint8_t* block = dst + (r * k / t.block_size + b) * t.block_bytes;
        std::memcpy(block, &scale, 2);
        std::memcpy(block + 2, q.codes.data() + r * k + b * t.block_size, size_t(t.block_size));
      }
    }
    return out;
  }
  const quant::BlockFormatTraits& t = quant::traits(format);
  Tensor out = empty({quant::quantized_bytes(t, n, k)}, DType::UInt8);
  const int64_t row_bytes = quant::quantized_bytes(t, 1, k);
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  const quant::RowQuantizer quantize = quant::exact_quantizer(t);
  for (int64_t r = 0; r < n; ++r) quantize(src + r * k, dst + r * row_bytes, k);
  return out;
}

}  // namespace

int64_t quantize_base(models::CausalLM& model, const std::string& format) {
  const std::string stored = format == "int8" ? "q8_0" : format;
  const quant::BlockFormatTraits& t = quant::traits(stored);  // ValueError naming the formats
  if (t.format == quant::BlockFormat::Q8_K) raise<ValueError>("q8_K is an activation format, not a weight format");
  autograd::NoGradGuard no_grad;
  int64_t count = 0;
  for (auto& [name, m] : model.named_modules()) {
    auto linear = std::dynamic_pointer_cast<models::hf::Linear>(m);
    if (!linear || is_output_layer(name)) continue;
    if (linear->products()->quantized_for(linear->weight, linear->transposed())) continue;
    const int64_t k = linear->in_features();
    if (k % t.block_size != 0 || (format == "nf4" && k % quant::kNF4BlockSize != 0)) continue;
    Tensor rows = (linear->transposed() ? linear->weight.t() : linear->weight).detach().to(DType::Float32).contiguous();
    Tensor bytes = quantize_rows(rows, format);
    rows = Tensor();
    models::hf::release_mapped_pages(linear->weight);
    const Shape shape(linear->weight.sizes());
    linear->weight = zeros({1}, DType::Float32).expand(IntList(shape));  // a placeholder: no float copy stays
    linear->weight.requires_grad_(false);
    linear->products()->adopt(linear->weight, stored, bytes, linear->transposed());
    ++count;
  }
  return count;
}

}  // namespace foundry::peft
