// Encoder-decoder language models (T5): a CausalLM whose generation cache holds the encoder's
// output. generate() runs them unchanged: the prompt is the encoder input, the first forward
// encodes it (cross-attention keys and values computed once per prompt and cached) and starts the
// decoder from decoder_start_token_id; every later forward takes decoder tokens. Training and
// `foundry forward` use seq2seq() with explicit decoder inputs.
#pragma once

#include "foundry/models/pretrained.h"

namespace foundry::models {

struct Seq2SeqOutput {
  Tensor loss;                       ///< with labels: cross-entropy over labels [B, T_dec] (-100 ignored)
  Tensor logits;                     ///< [B, T_dec, vocab] float32
  Tensor encoder_last_hidden_state;  ///< [B, T_enc, d_model]
};

class Seq2SeqLM : public CausalLM {
 public:
  /// transformers' model(input_ids, attention_mask, decoder_input_ids, labels): without
  /// decoder_input_ids they are the labels shifted right (decoder_start_token_id first, -100 as
  /// padding), as T5 does.
  virtual Seq2SeqOutput seq2seq(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& decoder_input_ids,
                                const Tensor& labels = {}) = 0;
  int64_t decoder_start_token_id() const { return decoder_start_; }
  /// labels [B, T] -> decoder inputs: decoder_start_token_id, then labels[:, :-1] with -100 as pad.
  Tensor shift_right(const Tensor& labels) const;
  /// The generation cache: keys and values of the decoder's self-attention, plus the encoder's
  /// output state; not rewindable (a new prompt is a new encoder input).
  bool recurrent() const override { return true; }

 protected:
  Seq2SeqLM(const ModelConfig& c, std::shared_ptr<hf::WeightProducts> products, int64_t decoder_start)
      : CausalLM(c, std::move(products)), decoder_start_(decoder_start) {}
  int64_t decoder_start_ = 0;
};

}  // namespace foundry::models
