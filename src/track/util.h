// Small helpers the tracker's parts share: clocks, host name, JSON numbers that may be NaN/inf,
// base64 (images in sync payloads; the text library's codec), CRC-32C (TFRecord framing).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/base64.h"

namespace foundry::track {

double unix_now();
std::string host_name();
/// A random lowercase hex id of `n` characters.
std::string random_id(int n = 8);

/// JSON has no NaN or infinity: those become the strings "NaN", "Infinity", "-Infinity"
/// (JavaScript's spellings); json_to_double reads both forms back.
nlohmann::json json_number(double v);
double json_to_double(const nlohmann::json& v);

/// A config's leaves under dotted keys, in key order: {"model": {"n_layer": 2}} gives
/// ("model.n_layer", 2); an empty nested object is a leaf ({}); a root that is not an object has none.
std::vector<std::pair<std::string, nlohmann::json>> flatten_json(const nlohmann::json& j);
/// A leaf as text: a string as itself, anything else as JSON.
std::string json_leaf_text(const nlohmann::json& v);

using text::base64_encode;
/// Strict (sync payloads are ours): ValueError on characters outside the alphabet, a bad length or
/// misplaced padding.
inline std::string base64_decode(std::string_view text) { return text::base64_decode(text, /*strict=*/true); }

uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace foundry::track
