// Encoder-only models (BERT, RoBERTa): Hugging Face folders loaded as nn::Module trees with
// transformers' names, bidirectional attention over the unpadded tokens, and their heads.
#pragma once

#include <memory>
#include <string>

#include "foundry/models/pretrained.h"

namespace foundry::models {

struct EncoderOutput {
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
  virtual EncoderOutput encode(const Tensor& input_ids, const Tensor& attention_mask = {},
                               const Tensor& token_type_ids = {}) = 0;

 protected:
  ModelConfig config_;
  std::string head_;
};

/// Whether config.json names an encoder architecture Foundry loads (Bert*, Roberta*).
bool is_encoder_folder(const std::string& dir);
std::unique_ptr<EncoderModel> load_encoder(const std::string& dir);

}  // namespace foundry::models
