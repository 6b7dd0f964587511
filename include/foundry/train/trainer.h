// The trainer: a causal language model of any registered Hugging Face architecture, or a BERT /
// RoBERTa encoder as a masked language model (fresh from HF config keys, or continued from a
// pretrained folder) on a text corpus, with gradient accumulation, clipping,
// warmup + cosine learning rate, periodic evaluation (validation loss and perplexity),
// checkpoints with resume (bit-identical continuation), callbacks, a JSONL metrics log, a
// progress bar, optional bfloat16 autocast and activation checkpointing, and a final sample.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "foundry/core/rng.h"
#include "foundry/models/encoder.h"
#include "foundry/models/pretrained.h"
#include "foundry/models/seq2seq.h"

namespace foundry::data {
class TextEncoder;
}

namespace foundry::train {

/// The [model] table: which architecture, from scratch or from a folder.
struct ModelSpec {
  /// A model_type ("gpt2", "llama", "mistral", "qwen2", ...) or an HF `architectures` name.
  std::string architecture = "gpt2";
  /// A pretrained HF folder to continue training (its config.json wins; GGUF files and quantized
  /// folders are refused).
  std::string init_from;
  int64_t block_size = 64;  ///< training sequence length
  /// Recompute each block's activations in backward instead of storing them (less memory).
  bool gradient_checkpointing = false;
  /// The other [model] keys as a config.json object (HF's key names: hidden_size, n_layer, ...).
  std::string hf_config = "{}";
  int64_t vocab_size = 0;  ///< set from the tokenizer
};

struct TrainConfig {
  // data
  std::string data_path;             ///< text file (or JSONL with data_field)
  std::string prepared_dir;          ///< a `foundry prepare` output folder (used instead of data_path)
  std::string data_field;            ///< JSONL field to train on ("" = plain text)
  std::string tokenizer = "char";    ///< "char", "byte", or a tokenizer file
  double val_fraction = 0.1;
  // model
  ModelSpec model;
  // optimisation
  int64_t batch_size = 16;
  int64_t grad_accum_steps = 1;
  int64_t max_steps = 1000;
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 100;
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.99;
  double grad_clip = 1.0;           ///< 0 disables clipping
  /// Encoder (masked-LM) runs: the fraction of tokens to predict, and the [MASK] id (-1: one id past
  /// the tokenizer's vocabulary, which the model's vocabulary then includes).
  double mlm_probability = 0.15;
  int64_t mask_token_id = -1;
  /// Encoder-decoder (T5) runs: span corruption's fraction of corrupted tokens and mean span length.
  double noise_density = 0.15;
  double mean_noise_span_length = 3.0;
  std::string precision = "float32";  ///< or "bfloat16" (autocast, float32 master weights)
  // evaluation, checkpoints, logs
  int64_t eval_every = 250;
  int64_t eval_batches = 20;
  int64_t checkpoint_every = 500;   ///< 0 disables
  int keep_checkpoints = 2;
  int64_t log_every = 10;
  std::string out_dir = "runs/gpt";
  std::string export_dir;           ///< after training: the model as an HF folder ("" = none)
  bool resume = true;               ///< continue from the latest checkpoint in out_dir
  uint64_t seed = 1337;
  int threads = 0;                  ///< 0 keeps the current setting
  int64_t early_stopping_patience = 0;  ///< evaluations without improvement before stopping (0 = off)
  // sampling at the end
  int64_t sample_tokens = 300;
  double temperature = 0.8;
  int64_t top_k = 40;
  std::string prompt = "\n";
  bool progress = true;
  // experiment tracking (docs/tracking.md): config, loss, lr, grad norm, tokens/s, evaluations,
  // the final checkpoint as an artifact, into <track_dir>/foundry.db
  bool track = true;
  std::string track_dir = "runs";
  std::string track_project;  ///< "" = the config file's name
  std::string track_name;     ///< "" = the out_dir's last component
};

/// Parses a TOML run configuration ([data], [model], [train], [eval], [sample] tables; see
/// examples/shakespeare_char.toml). [model] holds architecture, init_from, block_size,
/// gradient_checkpointing and any HF config keys of the architecture; unknown keys of the other
/// tables raise ValueError naming them.
TrainConfig load_train_config(const std::string& toml_path);

/// Checks every value of a run configuration with a fixed set of allowed values or a range
/// (precision float32 | bfloat16, positive sizes, ...), whether it came from TOML or the command
/// line; `where` names the source in the ValueError.
void check_train_config(const TrainConfig& config, const std::string& where);

/// Every setting of a run configuration as a JSON object ({"data": {...}, "model": {...}, ...}):
/// what experiment tracking records as the run's config.
std::string train_config_json(const TrainConfig& config);

/// transformers' DataCollatorForLanguageModeling on token ids [B, T]: each token is chosen with
/// `probability`; a chosen token becomes `mask_token` (80%), a random id in [0, vocab) (10%) or stays
/// (10%). Returns (inputs, labels): labels hold the chosen tokens' ids and -100 elsewhere.
std::pair<Tensor, Tensor> mask_tokens(const Tensor& ids, int64_t mask_token, int64_t vocab, double probability,
                                      Generator& gen);

/// T5's span corruption (transformers' run_t5_mlm_flax: random_spans_noise_mask, then sentinels) on
/// token ids [B, L]: round(L * noise_density) tokens in round(that / mean_span_length) spans (at
/// least one), spans and the kept runs between them of random lengths, the kept run first. Inputs:
/// the kept tokens with each span replaced by a sentinel, then `eos`; labels: each sentinel followed
/// by its span, then `eos`. Sentinel k is first_sentinel - k (T5 counts its extra ids down from the
/// top of the vocabulary).
std::pair<Tensor, Tensor> span_corrupt(const Tensor& ids, int64_t first_sentinel, int64_t eos, double noise_density,
                                       double mean_span_length, Generator& gen);
/// The number of spans span_corrupt makes in `length` tokens.
int64_t noise_spans(int64_t length, double noise_density, double mean_span_length);

/// The config.json object of the model a TrainConfig trains (fresh models: the [model] keys with
/// the trainer's defaults filled in; vocab_size from the tokenizer).
std::string model_config_json(const ModelSpec& spec);

struct StepInfo {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_second = 0, ms = 0;
};
struct EvalInfo {
  int64_t step = 0;
  double val_loss = 0, val_perplexity = 0, train_loss = 0;
};

class Trainer;

/// Hooks into the loop; override what you need.
class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(Trainer&) {}
  virtual void on_step_end(Trainer&, const StepInfo&) {}
  virtual void on_eval(Trainer&, const EvalInfo&) {}
  virtual void on_checkpoint(Trainer&, int64_t /*step*/, const std::string& /*path*/) {}
  virtual void on_train_end(Trainer&) {}
};

/// Records the run with foundry::track (config, per-step loss/lr/grad norm/tokens per second,
/// evaluations, the final sample and checkpoint). A run resumed from a checkpoint continues the
/// same tracked run (its id is kept in <out_dir>/track_run_id). Finishes as failed (exit code 1)
/// when destroyed before training ended.
std::shared_ptr<Callback> make_tracking_callback(const TrainConfig& config, const std::string& config_path);

/// Stops training after `patience` evaluations without a validation-loss improvement of at least
/// min_delta.
class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(int64_t patience, double min_delta = 0.0) : patience_(patience), min_delta_(min_delta) {}
  void on_eval(Trainer& t, const EvalInfo& e) override;

 private:
  int64_t patience_;
  double min_delta_;
  double best_ = 1e300;
  int64_t bad_ = 0;
};

struct TrainResult {
  int64_t steps = 0;          ///< last completed step
  int64_t resumed_from = -1;  ///< checkpoint step the run continued from (-1: fresh)
  double final_train_loss = 0;
  double final_val_loss = 0;
  double unigram_val_loss = 0;  ///< baseline: cross-entropy of the train split's token frequencies on val
  std::vector<double> losses;   ///< training loss of every step run in this call
  std::string sample;
  double seconds = 0;
};

class Trainer {
 public:
  explicit Trainer(TrainConfig config);
  ~Trainer();
  void add_callback(std::shared_ptr<Callback> cb);
  /// Trains until max_steps (or a callback stops it); `stop_after` > 0 stops early after that many
  /// steps of this call (for interruption tests).
  TrainResult run(int64_t stop_after = 0);
  void request_stop() { stop_ = true; }

  /// The model being trained (a models::CausalLM, or a models::EncoderModel for masked-LM runs).
  nn::Module& model() { return *module_; }
  const TrainConfig& config() const { return cfg_; }
  const data::TextEncoder& encoder() const;
  /// Validation loss over the configured number of evaluation batches.
  double evaluate();
  /// `prompt` followed by sample.tokens sampled tokens (temperature, top_k of the config).
  std::vector<int64_t> sample(std::vector<int64_t> prompt, Generator& gen);
  /// The result of the run so far: complete when on_train_end is called.
  const TrainResult& result() const { return result_; }

 private:
  struct State;
  TrainConfig cfg_;
  std::unique_ptr<State> st_;
  /// The batch's mean loss: next-token cross-entropy, or masked-LM cross-entropy over a fresh masking.
  Tensor batch_loss(const Tensor& x, const Tensor& y, Generator* gen);
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<models::CausalLM> causal_;
  std::shared_ptr<models::EncoderModel> encoder_;
  std::shared_ptr<models::Seq2SeqLM> seq2seq_;
  int64_t mask_token_ = -1;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  TrainResult result_;
  bool stop_ = false;
};

}  // namespace foundry::train
