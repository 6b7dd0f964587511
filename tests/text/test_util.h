// Helpers shared by the tokenizer tests.
#pragma once

#include <sys/stat.h>

#include <cstdlib>
#include <string>

#ifndef FOUNDRY_TEXT_REF_DIR
#define FOUNDRY_TEXT_REF_DIR "build/text-ref"
#endif
#ifndef FOUNDRY_TEXT_DATA_DIR
#define FOUNDRY_TEXT_DATA_DIR "../shared/data"
#endif

/// Where reference.js wrote the expected outputs (override with FOUNDRY_TEXT_REF_DIR).
inline std::string ref_dir() {
  const char* e = std::getenv("FOUNDRY_TEXT_REF_DIR");
  return e ? e : FOUNDRY_TEXT_REF_DIR;
}

/// ../shared/data of the repository (override with FOUNDRY_TEXT_DATA_DIR).
inline std::string data_dir() {
  const char* e = std::getenv("FOUNDRY_TEXT_DATA_DIR");
  return e ? e : FOUNDRY_TEXT_DATA_DIR;
}

/// Why the tests that read ../shared/data (its tokenizer files and corpora) or the references
/// text_reference makes from it cannot run, or "" when they can: a clone alone has no ../shared.
inline std::string missing_shared_data() {
  struct stat st;
  if (::stat((data_dir() + "/tokenizers").c_str(), &st) != 0)
    return data_dir() + "/tokenizers is absent (a clone without ../shared/data): this test needs its tokenizer files "
           "and corpora and the HF / tiktoken references made from them";
  return "";
}

/// Skips the calling test, naming the reason, when ../shared/data is absent.
#define SKIP_WITHOUT_SHARED_DATA()                                        \
  if (const std::string why_missing = missing_shared_data(); !why_missing.empty()) \
  GTEST_SKIP() << why_missing

inline std::string b64decode(const std::string& in) {
  std::string out;
  unsigned buf = 0;
  int bits = 0;
  for (char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    else if (c >= '0' && c <= '9') v = c - '0' + 52;
    else if (c == '+') v = 62;
    else if (c == '/') v = 63;
    else continue;
    buf = (buf << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buf >> bits) & 0xFF);
    }
  }
  return out;
}
