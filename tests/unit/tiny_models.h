// Small random-weight Hugging Face folders for C++ tests.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "foundry/io/safetensors.h"
#include "foundry/ops/ops.h"

namespace foundry::testing {

// A 2-layer Llama with GQA (heads / 2 kv heads) and random weights, written as an HF folder.
inline std::string llama_folder(const std::string& tag, int64_t hidden, int64_t heads, int64_t ffn, double scale,
                         uint64_t seed, const std::string& extra_config = "") {
  // Removed when the test process exits (each ctest case is a process of its own).
  struct RemovedAtExit {
    std::vector<std::filesystem::path> dirs;
    ~RemovedAtExit() {
      std::error_code ec;
      for (const auto& d : dirs) std::filesystem::remove_all(d, ec);
    }
  };
  static RemovedAtExit made;
  std::filesystem::path d = std::filesystem::temp_directory_path() / ("foundry_models_test_" + tag + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  made.dirs.push_back(d);
  const int64_t kv = hidden / heads * (heads / 2);
  std::ofstream(d / "config.json") << fmt::format(
      R"({{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 61, "hidden_size": {},
          "intermediate_size": {}, "num_hidden_layers": 2, "num_attention_heads": {}, "num_key_value_heads": {},
          "max_position_embeddings": 128, "rms_norm_eps": 1e-5{}}})",
      hidden, ffn, heads, heads / 2, extra_config);
  manual_seed(seed);
  std::map<std::string, Tensor> w;
  auto r = [scale](IntList s) { return randn(s) * full({}, scale); };
  w["model.embed_tokens.weight"] = r({61, hidden});
  w["lm_head.weight"] = r({61, hidden});
  w["model.norm.weight"] = ones({hidden});
  for (int i = 0; i < 2; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    w[p + "input_layernorm.weight"] = ones({hidden});
    w[p + "post_attention_layernorm.weight"] = ones({hidden});
    w[p + "self_attn.q_proj.weight"] = r({hidden, hidden});
    w[p + "self_attn.k_proj.weight"] = r({kv, hidden});
    w[p + "self_attn.v_proj.weight"] = r({kv, hidden});
    w[p + "self_attn.o_proj.weight"] = r({hidden, hidden});
    w[p + "mlp.gate_proj.weight"] = r({ffn, hidden});
    w[p + "mlp.up_proj.weight"] = r({ffn, hidden});
    w[p + "mlp.down_proj.weight"] = r({hidden, ffn});
  }
  io::save_safetensors((d / "model.safetensors").string(), w, {{"format", "pt"}});
  return d.string();
}


}  // namespace foundry::testing
