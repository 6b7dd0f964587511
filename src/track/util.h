// Small helpers the tracker's parts share: clocks, host name, JSON numbers that may be NaN/inf,
// base64 (images in sync payloads), CRC-32C (TFRecord framing).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace foundry::track {

double unix_now();
std::string host_name();
/// A random lowercase hex id of `n` characters.
std::string random_id(int n = 8);

/// JSON has no NaN or infinity: those become the strings "NaN", "Infinity", "-Infinity"
/// (JavaScript's spellings); json_to_double reads both forms back.
nlohmann::json json_number(double v);
double json_to_double(const nlohmann::json& v);

std::string base64_encode(const std::string& bytes);
/// Throws ValueError on characters outside the alphabet or a bad length.
std::string base64_decode(const std::string& text);

uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace foundry::track
