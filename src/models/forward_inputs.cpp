#include "foundry/models/forward_inputs.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

#include "foundry/core/error.h"
#include "foundry/ops/ops.h"
#include "foundry/io/json_depth.h"

namespace foundry::models {

ForwardInputs parse_forward_inputs(const std::string& json, const std::string& where) {
  io::check_json_depth(json, "forward: " + where);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    raise<ValueError>("forward: {} is not valid JSON: {}", where, e.what());
  }
  if (!j.is_object()) raise<ValueError>("forward: {} must be a JSON object with \"input_ids\"", where);
  for (const auto& [key, value] : j.items())
    if (key != "input_ids" && key != "attention_mask" && key != "token_type_ids" && key != "decoder_input_ids")
      raise<ValueError>("forward: {}: unknown key '{}' (input_ids, attention_mask, token_type_ids, decoder_input_ids)",
                        where, key);
  // A [B, width] int64 tensor of the key's rows (undefined when absent); width < 0: the rows' own.
  int64_t B = -1, T = -1;
  auto batch = [&](const char* key, int64_t width) -> Tensor {
    if (!j.contains(key)) return Tensor();
    // Element by element: nlohmann's get<int64_t> would cast a float such as 1e21 (undefined).
    std::vector<std::vector<int64_t>> rows;
    const nlohmann::json& value = j[key];
    bool ok = value.is_array();
    for (size_t r = 0; ok && r < value.size(); ++r) {
      const nlohmann::json& row = value[r];
      ok = row.is_array();
      rows.emplace_back();
      for (size_t c = 0; ok && c < row.size(); ++c) {
        const nlohmann::json& id = row[c];
        ok = id.is_number_integer() && (id.is_number_unsigned() ? id.get<uint64_t>() <= uint64_t(INT64_MAX) : true);
        if (ok) rows.back().push_back(id.get<int64_t>());
      }
    }
    if (!ok) raise<ValueError>("forward: {}: '{}' must be a list of lists of integers", where, key);
    if (rows.empty() || rows[0].empty()) raise<ValueError>("forward: {}: '{}' is empty", where, key);
    if (B >= 0 && int64_t(rows.size()) != B)
      raise<ValueError>("forward: {}: {} has {} rows, input_ids {}", where, key, rows.size(), B);
    const int64_t w = width < 0 ? int64_t(rows[0].size()) : width;
    std::vector<int64_t> flat;
    flat.reserve(rows.size() * size_t(w));
    for (const auto& row : rows) {
      if (int64_t(row.size()) != w) {
        if (width < 0) raise<ValueError>("forward: {}: {} rows differ in length", where, key);
        raise<ValueError>("forward: {}: {} rows must match input_ids ({} tokens)", where, key, width);
      }
      flat.insert(flat.end(), row.begin(), row.end());
    }
    return tensor<int64_t>(flat, {int64_t(rows.size()), w});
  };
  if (!j.contains("input_ids")) raise<ValueError>("forward: {} has no 'input_ids'", where);
  ForwardInputs in;
  in.input_ids = batch("input_ids", -1);
  B = in.input_ids.size(0);
  T = in.input_ids.size(1);
  in.attention_mask = batch("attention_mask", T);
  if (in.attention_mask.defined()) {
    // transformers reads 0 / 1 (2 or -1 became "attend" here, and a bias elsewhere)
    const int64_t* m = in.attention_mask.data<int64_t>();
    for (int64_t i = 0; i < in.attention_mask.numel(); ++i)
      if (m[i] != 0 && m[i] != 1)
        raise<ValueError>("forward: {}: attention_mask holds {} at row {}, position {}; it takes 0 (padding) and 1",
                          where, m[i], i / T, i % T);
  }
  in.token_type_ids = batch("token_type_ids", T);
  in.decoder_input_ids = batch("decoder_input_ids", -1);
  return in;
}

}  // namespace foundry::models
