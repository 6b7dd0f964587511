// Supervised fine-tuning with LoRA / QLoRA (`foundry finetune`): a JSONL data set in the common
// instruction formats, a frozen base (float, or quantized in memory), only the adapter trained,
// a held-out evaluation loss, checkpoints with bit-exact resume, metrics.jsonl, and the adapter
// saved in PEFT's layout.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace foundry::text {
class Tokenizer;
}
namespace foundry::models {
struct ModelConfig;
}

namespace foundry::train {

/// One training sequence: token ids and the labels the loss reads (-100: ignored).
struct SftExample {
  std::vector<int64_t> input_ids;
  std::vector<int64_t> labels;
};

/// How a JSONL line becomes an example. The format is detected per line:
///   {"text": ...}                      every token is trained on;
///   {"prompt": ..., "completion": ...} the loss on the completion's tokens only;
///   {"messages": [{"role", "content"}, ...]}  rendered with the chat template, the loss on the
///                                      assistant turns only;
///   {"input_ids": [...]} (optionally "labels")  already tokenized.
/// Text gets the tokenizer's special tokens (a BOS where it adds one) and the EOS token at the end.
struct SftFormat {
  std::shared_ptr<const text::Tokenizer> tokenizer;  ///< null: only {"input_ids"} lines can be read
  std::string chat_template;  ///< "" : {"messages"} lines are refused
  std::string bos_token, eos_token;
  int64_t eos_id = -1;        ///< appended after text / completions (-1: none)
  int64_t seq_len = 512;      ///< longer examples are cut to this many tokens
  int64_t vocab_size = 0;     ///< ids must be below it
};

/// The format of a model folder: its tokenizer, tokenizer_config.json's chat template and special
/// tokens, the config's first EOS id (else the tokenizer's id of eos_token) and vocabulary size.
SftFormat sft_format_for(const std::string& model_dir, const models::ModelConfig& config, int64_t seq_len);

/// Reads and tokenizes a JSONL file; ValueError naming the file and line for malformed lines,
/// unknown formats, ids outside the vocabulary, and examples with nothing to learn.
std::vector<SftExample> load_sft_jsonl(const std::string& path, const SftFormat& format);

struct FinetuneConfig {
  std::string model;  ///< Hugging Face folder of the base model
  std::string data;   ///< JSONL training data
  std::string out;    ///< adapter folder (adapter_config.json, adapter_model.safetensors, metrics.jsonl, checkpoints/)
  std::string eval_data;       ///< held-out JSONL ("": eval_fraction of `data`)
  double eval_fraction = 0.1;  ///< share of `data` held out when no eval_data (at least one example)
  // LoRA
  int64_t lora_r = 8;
  double lora_alpha = 16;
  double lora_dropout = 0.05;
  std::vector<std::string> target_modules;  ///< empty: PEFT's defaults for the architecture
  bool use_rslora = false;
  std::string quantize;  ///< QLoRA base: "nf4", "int8", or a GGML block format; "" keeps it float
  // optimisation
  double lr = 2e-4;
  int64_t steps = 0;    ///< optimizer steps (0: from epochs)
  double epochs = 1;
  int64_t batch_size = 4;
  int64_t grad_accum = 1;
  int64_t seq_len = 512;
  int64_t warmup = 0;
  std::string schedule = "cosine";  ///< cosine | linear | constant (after the warmup)
  double weight_decay = 0;
  double grad_clip = 1.0;           ///< 0: no clipping
  std::string precision = "float32";  ///< or "bfloat16" (autocast)
  bool gradient_checkpointing = false;
  uint64_t seed = 42;
  bool resume = false;              ///< continue from the newest checkpoint in out/checkpoints
  // evaluation, checkpoints, logs
  int64_t eval_every = 0;           ///< steps between evaluations (0: before and after training only)
  int64_t checkpoint_every = 50;    ///< steps between checkpoints (0: at the end only)
  int keep_checkpoints = 2;
  int64_t log_every = 1;
  bool progress = true;
  int threads = 0;
  // experiment tracking (docs/tracking.md); `foundry finetune` turns it on, the library call leaves it off
  bool track = false;
  std::string track_dir = "runs";
  std::string track_project = "finetune";
  std::string track_name;  ///< "" = the out folder's name
};

struct FinetuneResult {
  int64_t steps = 0;
  int64_t resumed_from = -1;
  int64_t train_examples = 0, eval_examples = 0, trainable_parameters = 0, total_parameters = 0;
  int64_t quantized_layers = 0;
  double first_loss = 0, final_loss = 0;         ///< training loss of the first / last step
  double eval_loss_before = 0, eval_loss_after = 0;
  std::vector<double> losses;
  double seconds = 0;
};

/// Trains a LoRA adapter on `config.model` and saves it in config.out (PEFT's layout).
/// `on_step(step, loss)` is called after every optimizer step (tests stop runs with it: return
/// false to stop, leaving the checkpoints as a crash would).
FinetuneResult finetune(const FinetuneConfig& config,
                        const std::function<bool(int64_t step, double loss)>& on_step = {});

}  // namespace foundry::train
