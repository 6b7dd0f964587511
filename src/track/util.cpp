#include "track/util.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <random>

#include "foundry/core/error.h"

namespace foundry::track {

double unix_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

std::string random_id(int n) {
  static thread_local std::mt19937_64 rng{std::random_device{}() ^ uint64_t(::getpid()) ^
                                          uint64_t(std::chrono::steady_clock::now().time_since_epoch().count())};
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < n; ++i) s += hex[rng() & 15];
  return s;
}

nlohmann::json json_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

double json_to_double(const nlohmann::json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_null()) return NAN;
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "NaN" || s == "nan") return NAN;
    if (s == "Infinity" || s == "inf") return INFINITY;
    if (s == "-Infinity" || s == "-inf") return -INFINITY;
  }
  raise<ValueError>("expected a number (or \"NaN\", \"Infinity\", \"-Infinity\"), got {}", v.dump());
}

namespace {
void flatten_into(const nlohmann::json& j, const std::string& prefix,
                  std::vector<std::pair<std::string, nlohmann::json>>& out) {
  if (j.is_object() && (!j.empty() || prefix.empty())) {
    for (auto it = j.begin(); it != j.end(); ++it)
      flatten_into(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
  } else if (!prefix.empty()) {
    out.emplace_back(prefix, j);
  }
}
}  // namespace

std::vector<std::pair<std::string, nlohmann::json>> flatten_json(const nlohmann::json& j) {
  std::vector<std::pair<std::string, nlohmann::json>> out;
  if (j.is_object()) flatten_into(j, "", out);
  return out;
}

std::string json_leaf_text(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  auto p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 255] ^ (crc >> 8);
  return ~crc;
}

}  // namespace foundry::track
