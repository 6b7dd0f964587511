// Shared by the libFuzzer targets: inputs as text, a scratch folder for parsers that read files,
// and inputs made of several files. A target treats foundry::Error as the parser's correct answer
// to bad input; any other exception escaping it, a crash, a sanitizer report, a hang or an
// allocation past libFuzzer's -malloc_limit_mb is a bug.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace fuzz {

inline std::string_view text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// A folder of this process's own under $TMPDIR (scripts/fuzz.sh points it at /dev/shm).
/// Removed when the fuzzer exits normally (libFuzzer's end of run; a crash keeps it to look at).
inline const std::filesystem::path& scratch() {
  struct Scratch {
    std::filesystem::path dir = std::filesystem::temp_directory_path() / ("foundry-fuzz-" + std::to_string(::getpid()));
    Scratch() { std::filesystem::create_directories(dir); }
    ~Scratch() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  };
  static const Scratch scratch;
  return scratch.dir;
}

/// Writes `bytes` to scratch()/name and returns the path.
inline std::string write(const std::string& name, std::string_view bytes) {
  std::filesystem::path p = scratch() / name;
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
  return p.string();
}

/// Files packed into one input are separated by this line (tests/fuzz/seeds.sh packs seeds so).
inline constexpr std::string_view kPartSeparator = "\n--foundry-fuzz-part--\n";

/// The input cut at the separators into exactly `n` parts (missing ones empty, extra ones joined
/// into the last).
inline std::vector<std::string_view> parts(std::string_view in, size_t n) {
  std::vector<std::string_view> out;
  while (out.size() + 1 < n) {
    size_t at = in.find(kPartSeparator);
    if (at == std::string_view::npos) break;
    out.push_back(in.substr(0, at));
    in.remove_prefix(at + kPartSeparator.size());
  }
  out.push_back(in);
  out.resize(n);
  return out;
}

}  // namespace fuzz
