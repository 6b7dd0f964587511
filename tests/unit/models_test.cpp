// Pretrained-model plumbing in C++: KV cache bounds, prefix reuse across generate() calls, and
// cached decoding against recomputation. (Logit parity with PyTorch references for every
// architecture lives in tests/python/test_pretrained.py.)
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "foundry/autograd/grad_mode.h"
#include "foundry/io/safetensors.h"
#include "foundry/models/generate.h"
#include "foundry/ops/ops.h"
#include "foundry/quant/block_formats.h"
#include "kernels/cpu/unary.h"
#include "models/hf/common.h"
#include "quant/bf16_packed.h"
#include "tiny_models.h"

using namespace foundry;
using foundry::testing::llama_folder;
namespace fs = std::filesystem;

namespace {

std::string tiny_llama_folder() {
  static const std::string dir = llama_folder("tiny", 32, 4, 48, 0.3, 7, R"(, "eos_token_id": 60)");
  return dir;
}

}  // namespace

TEST(Models, CachedDecodingEqualsRecomputation) {
  auto model = models::load_pretrained(tiny_llama_folder());
  std::vector<int64_t> seq = {3, 14, 15, 9, 2, 6};
  models::KVCache cache = model->make_cache(1, 32);
  Tensor step = model->forward(tensor<int64_t>(seq, {1, 6}), {}, &cache, 1);
  for (int i = 0; i < 5; ++i) {
    Tensor full_logits = model->forward(tensor<int64_t>(seq, {1, int64_t(seq.size())}));
    EXPECT_TRUE(allclose(step.select(1, 0), full_logits.select(1, int64_t(seq.size()) - 1), 1e-5, 1e-5)) << i;
    seq.push_back(argmax(step.reshape({-1})).item<int64_t>());
    step = model->forward(tensor<int64_t>({seq.back()}, {1, 1}), {}, &cache, 1);
  }
  EXPECT_EQ(cache.length(), int64_t(seq.size()) - 1 + 1);
  // Overflowing the preallocated capacity is an error, not a reallocation.
  models::KVCache small = model->make_cache(1, 4);
  EXPECT_THROW(model->forward(tensor<int64_t>(seq, {1, int64_t(seq.size())}), {}, &small), ValueError);
}

// A KV cache stored in a block format returns exactly the rows' dequantized values, through
// appends, reserve() and reorder().
TEST(Models, QuantizedKVCacheHoldsTheFormatsValues) {
  for (const char* format : {"f16", "bf16", "q8_0"}) {
    const auto& t = quant::traits(format);
    models::KVCache cache(1, 2, 3, 4, 64, DType::Float32, format);
    manual_seed(3);
    Tensor k1 = randn({2, 3, 3, 64}), v1 = randn({2, 3, 3, 64}), k2 = randn({2, 3, 1, 64}), v2 = randn({2, 3, 1, 64});
    cache.append(0, k1, v1);
    cache.advance(3);
    cache.reserve(8);
    auto [k, v] = cache.append(0, k2, v2);
    cache.advance(1);
    Tensor want = cat({k1, k2}, 2).contiguous();
    std::vector<uint8_t> row(static_cast<size_t>(quant::quantized_bytes(t, 1, 64)));
    std::vector<float> back(64);
    for (int64_t r = 0; r < want.numel() / 64; ++r) {
      t.quantize(want.data<float>() + r * 64, row.data(), 64);
      t.dequantize(row.data(), back.data(), 64);
      ASSERT_EQ(0, std::memcmp(back.data(), k.contiguous().data<float>() + r * 64, 64 * sizeof(float))) << format << r;
    }
    EXPECT_EQ(cache.nbytes(), 2 * 2 * 3 * 8 * quant::quantized_bytes(t, 1, 64));
    cache.reorder({1, 0});
    cache.truncate(4);
    auto [k3, v3] = cache.append(0, k2.narrow(2, 0, 1), v2.narrow(2, 0, 1));
    EXPECT_TRUE(equal(k3.narrow(0, 0, 1).narrow(2, 0, 4), k.narrow(0, 1, 1))) << format;
  }
  EXPECT_THROW(models::KVCache(1, 1, 1, 4, 48, DType::Float32, "q8_0"), ValueError);  // 48: not whole blocks
  // Sizes whose byte count wraps around (it once allocated a tiny buffer decode wrote past).
  for (int64_t capacity : {int64_t(1) << 62, int64_t(1) << 58, int64_t(1) << 50}) {
    try {
      models::KVCache(12, 1, 8, capacity, 64, DType::Float32);
      ADD_FAILURE() << capacity << " positions were accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("more memory than can be addressed"), std::string::npos) << e.what();
    }
  }
}

// Decoding streams attention over the cache (KVCache::append_and_attend): with an f16 cache and,
// on a model whose head_dim is whole q8_0 blocks, a q8_0 cache read in place, the logits stay close
// to recomputing the whole sequence.
TEST(Models, DecodingWithQuantizedCachesStaysClose) {
  const std::string wide = llama_folder("wide", 128, 4, 96, 0.15, 8);  // head_dim 64: whole q8_0 blocks
  for (const auto& [folder, format] : {std::pair{tiny_llama_folder(), "f16"}, std::pair{wide, "f16"},
                                       std::pair{wide, "q8_0"}, std::pair{wide, ""}}) {
    models::LoadOptions o;
    o.kv_cache = format;
    auto model = models::load_pretrained(folder, o);
    std::vector<int64_t> seq = {3, 14, 15, 9, 2, 6};
    // 80 positions: more than one 64-position tile of the streaming kernel.
    for (int i = 0; i < 70; ++i) seq.push_back((seq[size_t(i)] * 7 + 3) % 61);
    models::KVCache cache = model->make_cache(1, 96);
    Tensor step = model->forward(tensor<int64_t>(seq, {1, int64_t(seq.size())}), {}, &cache, 1);
    // q8_0 keys and values move these random-weight logits (max |logit| ~6.6) by up to ~0.11.
    const double tol = std::string(format).empty() ? 1e-5 : std::string(format) == "q8_0" ? 0.2 : 2e-2;
    for (int i = 0; i < 4; ++i) {
      seq.push_back(argmax(step.reshape({-1})).item<int64_t>());
      step = model->forward(tensor<int64_t>({seq.back()}, {1, 1}), {}, &cache, 1);
      Tensor full_logits = model->forward(tensor<int64_t>(seq, {1, int64_t(seq.size())}));
      // The documented bounds are absolute (docs/quantization.md): rtol 0.
      const double err = amax(abs(step.select(1, 0) - full_logits.select(1, int64_t(seq.size()) - 1))).item<double>();
      EXPECT_LT(err, tol) << format << " step " << i;
    }
  }
}

// The streaming kernel against the dequantize-everything path on the same cache contents: the same
// attention up to float rounding, for float32, f16, bf16 (read in place) and q8_0 caches, grouped
// queries, a masked position, more positions than one tile, and a head dim that is not whole
// vectors (40); and a bfloat16 model's plain bf16 cache with bf16 queries (the attention computed
// in float32 either way, the result in bf16). 600 positions: three 256-position segments merged,
// one of them wholly masked for row 1.
TEST(Models, StreamingDecodeAttentionEqualsFullAttention) {
  for (auto [format, D, dtype, past] :
       {std::tuple{"", 64, DType::Float32, 70}, std::tuple{"f16", 64, DType::Float32, 70},
        std::tuple{"bf16", 64, DType::Float32, 70}, std::tuple{"q8_0", 64, DType::Float32, 70},
        std::tuple{"", 40, DType::Float32, 70}, std::tuple{"f16", 40, DType::Float32, 70},
        std::tuple{"", 64, DType::BFloat16, 70}, std::tuple{"", 64, DType::Float32, 600},
        std::tuple{"f16", 40, DType::Float32, 600}, std::tuple{"q8_0", 64, DType::Float32, 600}}) {
    const int64_t B = 2, H = 4, Hkv = 2;
    models::KVCache a(1, B, Hkv, past + 10, D, dtype, format), b(1, B, Hkv, past + 10, D, dtype, format);
    manual_seed(9);
    Tensor kp = randn({B, Hkv, past, D}).to(dtype), vp = randn({B, Hkv, past, D}).to(dtype);
    a.append(0, kp, vp);
    a.advance(past);
    b.append(0, kp, vp);
    b.advance(past);
    Tensor q = randn({B, H, 1, D}).to(dtype), k = randn({B, Hkv, 1, D}).to(dtype), v = randn({B, Hkv, 1, D}).to(dtype);
    Tensor mask = ones({B, past + 1}, DType::Bool);
    mask.select(0, 1).narrow(0, 3, 1).fill_(0.0);  // row 1 does not see position 3
    if (past > 512) mask.select(0, 1).narrow(0, 256, 256).fill_(0.0);  // nor the second segment
    Tensor bias = models::hf::attention_bias(mask, 1, 0, DType::Float32);
    Tensor got = a.append_and_attend(0, q, k, v, bias);
    EXPECT_EQ(got.dtype(), dtype);
    auto [kk, vv] = b.append(0, k, v);
    // The reference in float32 on the same (bf16-rounded) values; the streamed result is rounded to
    // bf16 once at the end.
    Tensor want = models::hf::attend(q.to(DType::Float32), kk.to(DType::Float32), vv.to(DType::Float32), bias);
    const double tol = dtype == DType::Float32 ? 1e-5 : 8e-3;
    const Tensor g32 = got.to(DType::Float32);
    EXPECT_TRUE(allclose(g32, want, tol, tol)) << format << " D " << D << " past " << past << " max diff "
                                                << amax(abs(g32 - want)).item<float>();
    // The attention job stored the new rows itself: the cache holds store()'s bits.
    a.advance(1);
    b.advance(1);
    Tensor k2 = randn({B, Hkv, 1, D}).to(dtype), v2 = randn({B, Hkv, 1, D}).to(dtype);
    auto [ka, va] = a.append(0, k2, v2);
    auto [kb, vb] = b.append(0, k2, v2);
    EXPECT_TRUE(equal(ka, kb) && equal(va, vb)) << format << " D " << D << " past " << past;
  }
  // Keys of another head size or head count, or values unlike the keys: an error, nothing stored.
  for (const char* format : {"", "q8_0"}) {
    models::KVCache c(1, 1, 2, 8, 64, DType::Float32, format);
    Tensor q = randn({1, 2, 1, 64}), k = randn({1, 2, 1, 64}), bias = zeros({1, 1, 1, 1});
    EXPECT_THROW(c.append_and_attend(0, q, randn({1, 2, 1, 96}), randn({1, 2, 1, 96}), bias), ValueError) << format;
    EXPECT_THROW(c.append_and_attend(0, q, randn({1, 1, 1, 64}), randn({1, 1, 1, 64}), bias), ValueError) << format;
    EXPECT_THROW(c.append_and_attend(0, q, k, randn({1, 2, 1, 32}), bias), ValueError) << format;
    EXPECT_THROW(c.append(0, randn({1, 2, 1, 96}), randn({1, 2, 1, 96})), ValueError) << format;
    EXPECT_EQ(c.length(), 0);
  }
  // Float32 rows into a plain 16-bit cache: narrowed inside the job as the copy op narrows them.
  for (DType cached : {DType::Float16, DType::BFloat16}) {
    models::KVCache a(1, 1, 2, 8, 64, cached), b(1, 1, 2, 8, 64, cached);
    manual_seed(4);
    Tensor q = randn({1, 2, 1, 64}), k = randn({1, 2, 1, 64}) * 300.0, v = randn({1, 2, 1, 64});
    k.select(1, 1).narrow(2, 0, 3).copy_(tensor<float>({1e6f, 3e-8f, -7e4f}, {1, 3}));  // overflow, subnormal
    Tensor got = a.append_and_attend(0, q, k, v, zeros({1, 1, 1, 1}));
    Tensor vv = b.append(0, k, v).second;  // one position: a head's output is its value row
    // Head 0 (head 1's key overflowed to infinity: its one score is not finite).
    Tensor want = vv.to(DType::Float32).select(2, 0).reshape({1, 1, 128}).narrow(2, 0, 64);
    EXPECT_TRUE(equal(got.narrow(2, 0, 64), want)) << dtype_name(cached);
    a.advance(1);
    b.advance(1);
    auto [ka, va] = a.append(0, v, k);
    auto [kb, vb] = b.append(0, v, k);
    EXPECT_TRUE(equal(ka, kb) && equal(va, vb)) << dtype_name(cached);
  }
}

TEST(Models, PromptCacheRunsOnlyTheNewSuffix) {
  auto model = models::load_pretrained(tiny_llama_folder());
  models::GenerationConfig g;
  g.max_new_tokens = 6;
  g.ignore_eos = true;
  const std::vector<int64_t> first = {5, 8, 13, 21, 34};
  models::PromptCache pc;
  models::GenerationResult a = models::generate(*model, first, g, pc);
  EXPECT_EQ(a.tokens[0], models::generate(*model, {first}, g).tokens[0]);
  EXPECT_EQ(a.prefill_tokens, 5);
  // A second turn: the first prompt, its answer, and new tokens.
  std::vector<int64_t> second = first;
  second.insert(second.end(), a.tokens[0].begin(), a.tokens[0].end());
  second.insert(second.end(), {1, 2, 3});
  models::GenerationResult b = models::generate(*model, second, g, pc);
  EXPECT_EQ(b.tokens[0], models::generate(*model, {second}, g).tokens[0]);
  // Everything but the answer's last token (never fed) was cached.
  EXPECT_EQ(b.prefill_tokens, 1 + 3);
  // A prompt that diverges early reuses only the common prefix.
  std::vector<int64_t> third = {5, 8, 40, 41};
  models::GenerationResult c = models::generate(*model, third, g, pc);
  EXPECT_EQ(c.prefill_tokens, 2);
  EXPECT_EQ(c.tokens[0], models::generate(*model, {third}, g).tokens[0]);
}

// A recurrent model's cache continues a sequence but can't be rewound: PromptCache reuse carries on
// when the new prompt extends exactly what was cached and restarts otherwise; the state reorders
// with its rows.
TEST(Models, RecurrentStateContinuesOrRestarts) {
  manual_seed(3);
  auto model = models::create_model(R"({"model_type": "mamba", "vocab_size": 40, "hidden_size": 16,
      "num_hidden_layers": 2, "state_size": 4, "expand": 2, "conv_kernel": 3})");
  model->eval();
  ASSERT_TRUE(model->recurrent());
  autograd::NoGradGuard no_grad;
  models::GenerationConfig g;
  g.max_new_tokens = 5;
  g.ignore_eos = true;
  const std::vector<int64_t> first = {5, 8, 13, 21};
  models::PromptCache pc;
  models::GenerationResult a = models::generate(*model, first, g, pc);
  EXPECT_EQ(a.tokens[0], models::generate(*model, {first}, g).tokens[0]);
  std::vector<int64_t> second = first;
  second.insert(second.end(), a.tokens[0].begin(), a.tokens[0].end());
  second.insert(second.end(), {1, 2});
  models::GenerationResult b = models::generate(*model, second, g, pc);
  EXPECT_EQ(b.prefill_tokens, 1 + 2);  // continued from the state
  EXPECT_EQ(b.tokens[0], models::generate(*model, {second}, g).tokens[0]);
  const std::vector<int64_t> third = {5, 8, 30};
  models::GenerationResult c = models::generate(*model, third, g, pc);
  EXPECT_EQ(c.prefill_tokens, 3);  // diverged: restarted from an empty state
  EXPECT_EQ(c.tokens[0], models::generate(*model, {third}, g).tokens[0]);

  models::KVCache cache = model->make_cache(2, 16);
  model->forward(tensor<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3}), Tensor(), &cache);
  Tensor before = cache.state(0, 1).clone();
  cache.reorder({1, 0});
  EXPECT_TRUE(allclose(cache.state(0, 1).select(0, 0), before.select(0, 1)));
  EXPECT_THROW(cache.truncate(1), ValueError);
  cache.truncate(0);
  EXPECT_FALSE(cache.has_state());
}

// HF's model(input_ids, attention_mask=..., labels=...) in C++: the loss is the mean over the
// positions whose next label is not -100 of -log softmax(logits[t])[labels[t + 1]], computed here
// from the returned logits by hand; the logits equal forward()'s; gradients reach the parameters.
TEST(Models, LabelsGiveHFsShiftedCrossEntropy) {
  auto model = models::load_pretrained(tiny_llama_folder());
  const std::vector<int64_t> ids_v = {3, 14, 15, 9, 2, 6, 0, 0, 7, 1, 8, 2, 8, 1, 8, 2};
  const std::vector<int64_t> mask_v = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1};
  std::vector<int64_t> labels_v = ids_v;
  labels_v[3] = -100;  // row 0: position 2 predicts nothing
  labels_v[8] = labels_v[9] = labels_v[10] = -100;  // row 1: the pads and the first real token
  Tensor ids = tensor<int64_t>(ids_v, {2, 8}), mask = tensor<int64_t>(mask_v, {2, 8});
  Tensor labels = tensor<int64_t>(labels_v, {2, 8});

  models::CausalLMOutput out = (*model)(ids, mask, labels);
  ASSERT_TRUE(out.loss.defined());
  EXPECT_EQ(out.loss.dim(), 0);
  EXPECT_TRUE(allclose(out.logits, model->forward(ids, mask), 1e-6, 1e-6));
  EXPECT_FALSE((*model)(ids, mask).loss.defined());

  const int64_t V = out.logits.size(2);
  const std::vector<float> logits = out.logits.contiguous().to_vector<float>();
  double total = 0;
  int counted = 0;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t + 1 < 8; ++t) {
      const int64_t target = labels_v[size_t(b * 8 + t + 1)];
      if (target == -100) continue;
      const float* row = logits.data() + (b * 8 + t) * V;
      double mx = row[0];
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, double(row[v]));
      double z = 0;
      for (int64_t v = 0; v < V; ++v) z += std::exp(double(row[v]) - mx);
      total += mx + std::log(z) - double(row[target]);
      ++counted;
    }
  ASSERT_EQ(counted, (7 - 1) + (7 - 2));
  EXPECT_NEAR(out.loss.item<float>(), total / counted, 1e-5);

  // The loss trains: with grad on, backward fills every parameter's gradient.
  model->train();
  for (auto& p : model->parameters()) p.requires_grad_(true);
  models::CausalLMOutput trained = (*model)(ids, mask, labels);
  trained.loss.backward();
  for (const auto& [name, p] : model->named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
  // Labels of another shape are refused.
  EXPECT_ANY_THROW((*model)(ids, mask, tensor<int64_t>({1, 2, 3}, {1, 3})));
}

// A model computed in Float16 / BFloat16 runs the fused residual + RMS norm, SwiGLU and rotary
// steps of its decode loop on 16-bit rows; they round where the per-op path stores each result,
// so the two give the same bits (the per-op path is what HF parity is tested on).
TEST(Models, FusedHalfStepsEqualThePerOpPath) {
  namespace hf = models::hf;
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    return a.dtype() == b.dtype() && a.sizes() == b.sizes() &&
           std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), size_t(a.nbytes())) == 0;
  };
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(dt));
    manual_seed(11);
    const int64_t B = 2, T = 3, heads = 4, D = 32, C = heads * D;
    Tensor h = (randn({B, T, C}) * 3).to(dt), delta = randn({B, T, C}).to(dt), w = (randn({C}) + 1).to(dt);
    Tensor fused_h = h.clone();
    Tensor fused = hf::add_rms_norm_(fused_h, delta, w, 1e-5);
    Tensor sum = h + delta;
    EXPECT_TRUE(same_bits(fused_h, sum));
    EXPECT_TRUE(same_bits(fused, rms_norm(sum, {C}, w, 1e-5)));
    // rms_norm's own 16-bit finish: the normalised value rounded, then times the weight, rounded.
    Tensor composed = (rms_norm(sum.to(DType::Float32), {C}, Tensor(), 1e-5).to(dt).to(DType::Float32) *
                       w.to(DType::Float32)).to(dt);
    EXPECT_TRUE(same_bits(fused, composed));
    // One row (decode): rms_norm_rows gives the op's bits, and kernels::cast_rows (the SIMD casts
    // without the to op) the to op's, overflow, subnormals and NaN included.
    Tensor row = (randn({1, 1, C}) * 3).to(dt);
    EXPECT_TRUE(same_bits(hf::rms_norm_rows(row, w, 1e-5), rms_norm(row, {C}, w, 1e-5)));
    Tensor wide = randn({1, 1, 3 * C}) * 5;
    wide.data<float>()[0] = 1e30f, wide.data<float>()[1] = 1e-42f, wide.data<float>()[2] = std::nanf("");
    EXPECT_TRUE(same_bits(kernels::cast_rows(wide, dt), wide.to(dt)));
    const Tensor narrow16 = wide.to(dt);
    EXPECT_TRUE(same_bits(kernels::cast_rows(narrow16, DType::Float32), narrow16.to(DType::Float32)));
    const Tensor strided = randn({1, 4, C}).transpose(1, 2);  // not contiguous: the op's own path
    EXPECT_TRUE(same_bits(kernels::cast_rows(strided, dt), strided.to(dt)));
    // GPT-2's norm outside autograd: the layer_norm op's kernel and bits, in this dtype and float32.
    for (DType ldt : {dt, DType::Float32}) {
      const Tensor lw = w.to(ldt), lb = randn({C}).to(ldt), none;
      for (const Tensor& rows : {row.to(ldt), sum.to(ldt)})
        for (const Tensor* bias : {&lb, &none})
          EXPECT_TRUE(same_bits(hf::layer_norm_rows(rows, lw, *bias, 1e-5), layer_norm(rows, {C}, lw, *bias, 1e-5)));
    }

    Tensor g = (randn({B, T, 3 * C}) * 4).to(dt), u = randn({B, T, 3 * C}).to(dt);
    EXPECT_TRUE(same_bits(hf::silu_mul_(g.clone(), u), silu(g) * u));

    Tensor x = (randn({B, T, C}) * 2).to(dt);
    Tensor angles = randn({1, 1, T, D});
    Tensor cos_t = cos(angles).to(dt), sin_t = sin(angles).to(dt);
    Tensor per_op = hf::apply_rope(hf::split_heads(x, heads), cos_t, sin_t).transpose(1, 2).reshape({B, T, C});
    EXPECT_TRUE(same_bits(hf::rope_rows_(x.clone(), heads, cos_t, sin_t), per_op));
    // float32 tables are rounded to x's dtype first, as apply_rope does.
    Tensor per_op_f32 = hf::apply_rope(hf::split_heads(x, heads), cos(angles), sin(angles)).transpose(1, 2).reshape({B, T, C});
    EXPECT_TRUE(same_bits(hf::rope_rows_(x.clone(), heads, cos(angles), sin(angles)), per_op_f32));
  }
}

// A 16-bit model's decode products read its weights in place as the f16 / bf16 block format (q, k and
// v as one job): the dense op's values to one rounding of the output (the bias is added in float32
// before it), the fused products the same bits as one at a time; more rows than decode's (prefill)
// and a transposed (Conv1D) weight stay the dense op.
TEST(Models, SixteenBitDecodeProductsMatchTheDenseOp) {
  namespace hf = models::hf;
  autograd::NoGradGuard no_grad;
  manual_seed(21);
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(dt));
    hf::WeightProducts wp;
    const int64_t out = 48, k = 64;
    Tensor w1 = randn({out, k}).to(dt), w2 = randn({out + 16, k}).to(dt), b1 = randn({out}).to(dt), none;
    for (int64_t rows : {int64_t(1), int64_t(3), int64_t(40)}) {
      Tensor x = randn({1, rows, k}).to(dt);
      Tensor got = wp.product(x, w1, b1, false), want = hf::WeightProducts::dense(x, w1, b1, false);
      ASSERT_EQ(got.dtype(), dt);
      ASSERT_EQ(got.sizes(), want.sizes());
      const double ulp = dt == DType::BFloat16 ? 1.0 / 128 : 1.0 / 1024;
      EXPECT_TRUE(allclose(got.to(DType::Float32), want.to(DType::Float32), ulp, 1e-3)) << rows;
      const hf::WeightProducts::Operand ops[] = {{&w1, &b1}, {&w2, &none}};
      std::vector<Tensor> both = wp.products(x, ops, false);
      EXPECT_TRUE(equal(both[0], got)) << rows;
      EXPECT_TRUE(equal(both[1], wp.product(x, w2, none, false))) << rows;
      if (rows > models::CausalLM::kQuantizedMaxRows) {
        EXPECT_TRUE(equal(got, want));
      }
    }
    Tensor wt = randn({k, out}).to(dt), x = randn({1, 1, k}).to(dt);  // Conv1D's [in, out]
    EXPECT_TRUE(equal(wp.product(x, wt, none, true), hf::WeightProducts::dense(x, wt, none, true)));
  }
}

// The decode step's direct calls (no op dispatch): the residual add in place, the RMS norm through
// the op's kernel and the rotary tables written straight out give the ops' own bits.
TEST(Models, DecodeStepDirectCallsEqualTheOps) {
  namespace hf = models::hf;
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    return a.dtype() == b.dtype() && a.sizes() == b.sizes() &&
           std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), size_t(a.nbytes())) == 0;
  };
  manual_seed(5);
  for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t C = 96;
    Tensor h = (randn({2, 3, C}) * 3).to(dt), delta = randn({2, 3, C}).to(dt), w = (randn({C}) + 1).to(dt);
    Tensor in_place = h.clone();
    const void* storage = in_place.data_ptr();
    Tensor sum = hf::residual_add_(in_place, delta);
    EXPECT_EQ(sum.data_ptr(), storage);
    EXPECT_TRUE(same_bits(sum, h + delta));
    EXPECT_TRUE(same_bits(hf::rms_norm_rows(h, w, 1e-5), rms_norm(h, {C}, w, 1e-5)));
    // A weight of another dtype goes through the op (which casts it).
    EXPECT_TRUE(same_bits(hf::rms_norm_rows(h, w.to(DType::Float64), 1e-5), rms_norm(h, {C}, w.to(DType::Float64), 1e-5)));
  }
  // A non-contiguous delta: the add op's broadcasting path, same values.
  Tensor h = randn({4, 8}), delta = randn({8, 4}).t();
  Tensor expect = h + delta;
  EXPECT_TRUE(same_bits(hf::residual_add_(h, delta), expect));

  // The tables against HF's formula as tensor ops: inv_freq = 1 / base ** (arange(0, rot, 2) / rot)
  // in float32 (divided by the factor for "linear"), freqs = positions.float() * inv_freq,
  // cos / sin of cat(freqs, freqs).
  for (const std::string rope_type : {"", "linear"}) {
    SCOPED_TRACE(rope_type);
    models::ModelConfig c;
    c.rope_theta = 500000.0;
    c.rope_type = rope_type;
    c.rope_factor = 4.0;
    const int64_t rot = 32, half = rot / 2;
    std::vector<float> inv(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
      inv[size_t(i)] = float(1.0 / std::pow(c.rope_theta, double(float(2 * i) / float(rot))));
      if (rope_type == "linear") inv[size_t(i)] = float(inv[size_t(i)] / c.rope_factor);
    }
    Tensor positions = tensor<int64_t>({0, 1, 2, 7, 100, 4095}, {2, 3});
    Tensor freqs = positions.to(DType::Float32).unsqueeze(2) * tensor<float>(inv, {1, 1, half});
    Tensor emb = cat({freqs, freqs}, 2).unsqueeze(1);
    for (DType dt : {DType::Float32, DType::BFloat16}) {
      SCOPED_TRACE(dtype_name(dt));
      auto [cos_t, sin_t] = hf::rope_tables(c, positions, rot, dt);
      EXPECT_TRUE(same_bits(cos_t, cos(emb).to(dt)));
      EXPECT_TRUE(same_bits(sin_t, sin(emb).to(dt)));
    }
  }
}

// Weights carved from huge-page chunks: 64-byte aligned, not overlapping, alive after the
// HugePageChunks that carved them is gone; a request larger than a chunk gets its own.
TEST(Models, HugePageChunksCarveAlignedTensorsThatOutliveThem) {
  std::vector<Tensor> carved;
  {
    models::hf::HugePageChunks chunks;
    for (int64_t n : {int64_t(3), int64_t(1000), int64_t(70000), int64_t(300000), int64_t(9) << 20}) {
      Tensor t = chunks.empty({n}, DType::Float32);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u) << n;
      t.fill_(float(n));
      carved.push_back(t);
    }
  }
  for (const Tensor& t : carved) EXPECT_TRUE(equal(t, full_like(t, float(t.numel())))) << t.numel();
}

// A folder's matrices are copied into those chunks at load unless FOUNDRY_MMAP_WEIGHTS keeps them
// over the file mapping: the same logits either way.
TEST(Models, WeightsInChunksOrOverTheMappingGiveTheSameLogits) {
  // hidden 128: q_proj [128, 128] float32 is 64 KB (copied), k_proj [64, 128] 32 KB (stays mapped).
  const std::string dir = llama_folder("chunks", 128, 4, 256, 0.1, 9);
  const Tensor ids = tensor<int64_t>({3, 14, 15, 9, 2, 6}, {1, 6});
  auto storage_of = [](const models::CausalLM& m, const std::string& suffix) {
    for (const auto& [name, p] : m.named_parameters())
      if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        return p.storage()->kind();
    ADD_FAILURE() << "no parameter " << suffix;
    return StorageImpl::Kind::Owned;
  };
  auto copied = models::load_pretrained(dir);
  EXPECT_NE(storage_of(*copied, "layers.0.self_attn.q_proj.weight"), StorageImpl::Kind::Mapped);
  EXPECT_EQ(storage_of(*copied, "layers.0.self_attn.k_proj.weight"), StorageImpl::Kind::Mapped);
  ::setenv("FOUNDRY_MMAP_WEIGHTS", "1", 1);
  auto mapped = models::load_pretrained(dir);
  ::unsetenv("FOUNDRY_MMAP_WEIGHTS");
  EXPECT_EQ(storage_of(*mapped, "layers.0.self_attn.q_proj.weight"), StorageImpl::Kind::Mapped);
  EXPECT_TRUE(equal(copied->forward(ids), mapped->forward(ids)));
}

// One input's projections (q, k, v; gate and up) through WeightProducts::products: at decode's row
// counts the matrices run as one job with the activation quantized once; the same numbers as one
// product at a time, for every kind of kernel, with biases, and past the decode row count.
TEST(Models, WeightProductsOfOneInputEqualOneProductAtATime) {
  autograd::NoGradGuard no_grad;
  manual_seed(5);
  const int64_t k = 256;
  const std::vector<Tensor> w = {randn({40, k}), randn({18, k}), randn({18, k})};
  const std::vector<Tensor> b = {Tensor(), randn({18}), randn({18})};
  for (const char* format : {"q8_0", "q4_0", "q4_K", "q6_K", "nf4", "f16", "bf16"}) {
    models::hf::WeightProducts products;
    products.set_format(format);
    std::vector<models::hf::WeightProducts::Memo> memos(w.size());
    std::vector<models::hf::WeightProducts::Operand> weights;
    for (size_t i = 0; i < w.size(); ++i) weights.push_back({&w[i], &b[i], &memos[i]});
    for (int64_t m : {int64_t(1), int64_t(3), int64_t(20)}) {
      const Tensor x = randn({1, m, k});
      const std::vector<Tensor> together = products.products(x, weights, false);
      ASSERT_EQ(together.size(), w.size());
      for (size_t i = 0; i < w.size(); ++i)
        EXPECT_TRUE(equal(together[i], products.product(x, w[i], b[i], false))) << format << " m " << m << " matrix " << i;
    }
  }
}

// bf16 matrices are packed without loss where the CPU has the kernels (quant::WeightLayout::PackedBF16):
// adopted bf16 rows take ~12.3 bits a weight, and products, embedding lookups and the dense copy read
// the values they hold; a bf16 weight quantized to "bf16" computes as the bf16 rows adopted do.
TEST(Models, WeightProductsPackBF16MatricesWithoutLoss) {
  autograd::NoGradGuard no_grad;
  manual_seed(8);
  const Tensor w = (randn({96, 768}) * 0.02).to(DType::BFloat16), x = randn({1, 1, 768});
  models::hf::WeightProducts adopted;
  Tensor bytes = empty({w.numel() * 2}, DType::UInt8);
  std::memcpy(bytes.data_ptr(), w.data_ptr(), size_t(w.numel() * 2));
  adopted.adopt(w, "bf16", bytes);
  const auto storage = adopted.adopted_storage(w);
  ASSERT_TRUE(storage.has_value());
  EXPECT_EQ(storage->first, "bf16");
  if (quant::packed_bf16_preferred()) {
    EXPECT_LT(storage->second, w.numel() * 2 * 78 / 100) << "packed: ~12.3 bits a weight";
    EXPECT_GT(storage->second, w.numel() * 2 * 75 / 100);
  }
  EXPECT_TRUE(equal(adopted.adopted_dense(w), w));
  const Tensor ids = tensor<int64_t>({95, 0, 17}, {3});
  EXPECT_TRUE(equal(adopted.adopted_rows(w, ids), index_select(w, 0, ids)));
  // The decode product against the weight's plain bf16 rows, quantized to "bf16" and read in place.
  const Tensor y = adopted.product(x, w, Tensor(), false);
  models::hf::WeightProducts copied;
  copied.set_format("bf16");
  const Tensor y_copied = copied.product(x, w, Tensor(), false);
  EXPECT_TRUE(equal(y, y_copied));
  // (decode rounds the activation row to bf16, as the plain bf16 rows' products do)
  EXPECT_TRUE(allclose(y, matmul(x.to(DType::BFloat16).to(DType::Float32), w.to(DType::Float32).t()), 1e-4, 1e-4));
  // bf16 activations (a model computing in bf16) read the "bf16" copies too.
  EXPECT_TRUE(equal(copied.product(x.to(DType::BFloat16), w, Tensor(), false), y.to(DType::BFloat16)));
}

// A Linear's memo of its weight's quantized rows goes stale when the products change format: the
// next product reads the new format's rows, as one without a memo does.
TEST(Models, WeightProductMemoFollowsTheFormat) {
  autograd::NoGradGuard no_grad;
  manual_seed(6);
  const Tensor w = randn({32, 128}), x = randn({1, 1, 128});
  models::hf::WeightProducts products;
  models::hf::WeightProducts::Memo memo;
  products.set_format("q4_0");
  const Tensor q4 = products.product(x, w, Tensor(), false, &memo);
  EXPECT_EQ(memo.weight, w.impl());
  EXPECT_TRUE(equal(products.product(x, w, Tensor(), false, &memo), q4));
  products.set_format("q8_0");
  const Tensor q8 = products.product(x, w, Tensor(), false, &memo);
  EXPECT_TRUE(equal(q8, products.product(x, w, Tensor(), false)));
  EXPECT_FALSE(equal(q8, q4));
  // A memo made for one weight is not used for another.
  const Tensor w2 = randn({32, 128});
  EXPECT_TRUE(equal(products.product(x, w2, Tensor(), false, &memo), products.product(x, w2, Tensor(), false)));
}

// Greedy choose_token is std::max_element's answer on every layout the SIMD scan meets: lengths
// around its 4- and 16-wide steps, ties (the first wins), -0 / +0, NaNs after the first value
// (passed over) and a leading NaN (index 0, as max_element with < gives).
TEST(Generate, GreedyTokenIsTheFirstLargestScore) {
  const models::GenerationConfig greedy;
  Generator gen(11);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t n : {1, 3, 4, 5, 15, 16, 17, 31, 33, 100, 32000}) {
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<float> s = randint(-3, 4, {n}, DType::Int64, &gen).to(DType::Float32).to_vector<float>();
      if (trial == 1) s.assign(size_t(n), 0.f);                       // all tied
      if (trial == 2) for (size_t i = 0; i < s.size(); i += 2) s[i] = -0.f;  // signed zeros among zeros
      if (trial == 3 && n > 2) s[size_t(n / 2)] = nan;                // a NaN after the first value
      if (trial == 4) s[0] = nan;                                     // a leading NaN
      if (trial == 5) s.back() = 100.f;                               // the maximum in the tail
      const int64_t want = std::max_element(s.begin(), s.end()) - s.begin();
      EXPECT_EQ(models::choose_token(s, greedy, nullptr), want) << "n " << n << " trial " << trial;
    }
  }
}
