// The batch `foundry forward --inputs FILE.json` reads: token ids and masks as [B, T] int64 tensors.
#pragma once

#include <string>

#include "foundry/core/tensor.h"

namespace foundry::models {

/// {"input_ids": [[...]], "attention_mask": [[...]], "token_type_ids": [[...]],
///  "decoder_input_ids": [[...]]}: input_ids is required and its rows share one length T;
/// attention_mask and token_type_ids (when present) are [B, T]; decoder_input_ids has B rows of
/// its own common length. Absent keys leave undefined tensors.
struct ForwardInputs {
  Tensor input_ids, attention_mask, token_type_ids, decoder_input_ids;
};

/// Parses and checks the JSON text; ValueError naming `where` and the problem (not JSON, a key
/// that is not a list of lists of integers, ragged or empty rows, row counts that differ).
ForwardInputs parse_forward_inputs(const std::string& json, const std::string& where);

}  // namespace foundry::models
