// Encoder-only models (BERT, RoBERTa): Hugging Face folders loaded as nn::Module trees with
// transformers' names, bidirectional attention over the unpadded tokens, and their heads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "foundry/models/pretrained.h"

namespace foundry::models {

struct EncoderOutput {
  Tensor loss;               ///< with labels: the head's loss (transformers'), else undefined
  Tensor last_hidden_state;  ///< [B, T, hidden]
  Tensor pooler_output;      ///< [B, hidden] (models with a pooler), else undefined
  Tensor logits;             ///< the head's: [B, T, vocab] (masked LM), [B, labels], [B, T, labels]; undefined for a base model
};

class EncoderModel : public nn::Module {
 public:
  const ModelConfig& config() const { return config_; }
  /// "base", "masked_lm", "sequence_classification" or "token_classification".
  const std::string& head() const { return head_; }
  /// input_ids int64 [B, T]; attention_mask [B, T] (1 keep; undefined: all ones); token_type_ids
  /// [B, T] (undefined: zeros). Float32 outputs.
  /// Records for autograd when grad mode is on and a parameter requires grad (training), else runs
  /// without a graph.
  virtual EncoderOutput encode(const Tensor& input_ids, const Tensor& attention_mask = {},
                               const Tensor& token_type_ids = {}) = 0;
  /// transformers' model(input_ids, attention_mask, token_type_ids, labels): with labels, the loss of
  /// the head — masked LM and token classification: cross-entropy over labels [B, T] (-100
  /// ignored); sequence classification: cross-entropy over labels [B] (mean squared error with one
  /// label, HF's regression).
  EncoderOutput operator()(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids,
                           const Tensor& labels);

 protected:
  ModelConfig config_;
  std::string head_;
};

/// Whether config.json names an encoder architecture Foundry loads (Bert*, Roberta*).
bool is_encoder_folder(const std::string& dir);
/// Whether a model_type or `architectures` name is an encoder ("bert", "roberta", "BertForMaskedLM", ...).
bool is_encoder_architecture(const std::string& model_type_or_architecture);
std::unique_ptr<EncoderModel> load_encoder(const std::string& dir);
/// A fresh encoder from a config.json object ("architectures" or "model_type"; a bare model_type
/// gives its ForMaskedLM), initialised as transformers' _init_weights (normal(0,
/// initializer_range), zero biases, unit LayerNorms, the padding row of the embeddings zero), in
/// training mode.
std::unique_ptr<EncoderModel> create_encoder(const std::string& config_json);
/// Writes an HF folder (config.json, model.safetensors float32, copies of `tokenizer_files`), each
/// file atomically.
void save_pretrained(const EncoderModel& model, const std::string& dir, const std::vector<std::string>& tokenizer_files = {});

}  // namespace foundry::models
