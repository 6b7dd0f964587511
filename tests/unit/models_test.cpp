// Pretrained-model plumbing in C++: KV cache bounds, prefix reuse across generate() calls, and
// cached decoding against recomputation. (Logit parity with PyTorch references for every
// architecture lives in tests/python/test_pretrained.py.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "foundry/io/safetensors.h"
#include "foundry/models/generate.h"
#include "foundry/ops/ops.h"

using namespace foundry;
namespace fs = std::filesystem;

namespace {

// A 2-layer Llama with GQA and random weights, written as an HF folder.
std::string tiny_llama_folder() {
  static const std::string dir = [] {
    fs::path d = fs::temp_directory_path() / ("foundry_models_test_" + std::to_string(::getpid()));
    fs::create_directories(d);
    std::ofstream(d / "config.json")
        << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 61, "hidden_size": 32,
              "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "eos_token_id": 60})";
    manual_seed(7);
    std::map<std::string, Tensor> w;
    auto r = [](IntList s) { return randn(s) * full({}, 0.3); };
    w["model.embed_tokens.weight"] = r({61, 32});
    w["lm_head.weight"] = r({61, 32});
    w["model.norm.weight"] = ones({32});
    for (int i = 0; i < 2; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      w[p + "input_layernorm.weight"] = ones({32});
      w[p + "post_attention_layernorm.weight"] = ones({32});
      w[p + "self_attn.q_proj.weight"] = r({32, 32});
      w[p + "self_attn.k_proj.weight"] = r({16, 32});
      w[p + "self_attn.v_proj.weight"] = r({16, 32});
      w[p + "self_attn.o_proj.weight"] = r({32, 32});
      w[p + "mlp.gate_proj.weight"] = r({48, 32});
      w[p + "mlp.up_proj.weight"] = r({48, 32});
      w[p + "mlp.down_proj.weight"] = r({32, 48});
    }
    io::save_safetensors((d / "model.safetensors").string(), w, {{"format", "pt"}});
    return d.string();
  }();
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
