// The command line of every bench program: `--help` prints its usage and exits 0; an unknown
// option, a missing or malformed value, or any failure (a missing model folder, a bad file) prints
// "<program>: error: <what>" and exits 1 — never an uncaught exception or an abort.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <stdexcept>
#include <initializer_list>
#include <string>
#include <system_error>

namespace foundry::bench {

/// argv[i + 1] as the value of option argv[i] (advancing i); throws when it is missing.
inline std::string option_value(int argc, char** argv, int& i) {
  if (i + 1 >= argc) throw std::invalid_argument(std::string("option ") + argv[i] + " needs a value");
  return argv[++i];
}

/// `value` as an integer of at least `min` (all of it: "2x" is refused); the error names `option`
/// ("--threads takes an integer >= 1, not 'abc'").
inline int64_t integer_value(const std::string& option, const std::string& value, int64_t min = 0) {
  int64_t n = 0;
  const auto [end, err] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (value.empty() || err != std::errc() || end != value.data() + value.size() || n < min)
    throw std::invalid_argument(option + " takes an integer >= " + std::to_string(min) + ", not '" + value + "'");
  return n;
}

/// The value of option argv[i] as an integer of at least `min` (advancing i).
inline int64_t integer_option(int argc, char** argv, int& i, int64_t min = 0) {
  const std::string option = argv[i];
  return integer_value(option, option_value(argc, argv, i), min);
}

/// The value of option argv[i], which must be one of `allowed` (advancing i).
inline std::string choice_option(int argc, char** argv, int& i, std::initializer_list<const char*> allowed) {
  const std::string option = argv[i], value = option_value(argc, argv, i);
  std::string names;
  for (const char* a : allowed) {
    if (value == a) return value;
    names += (names.empty() ? "" : ", ") + std::string(a);
  }
  throw std::invalid_argument(option + " takes one of " + names + ", not '" + value + "'");
}

/// `--only NAME` that matched no case: an error, not an empty table.
inline void check_only_matched(const std::string& only, bool matched) {
  if (!only.empty() && !matched) throw std::invalid_argument("--only '" + only + "' names no case (see --help)");
}

[[noreturn]] inline void unknown_option(const std::string& arg) {
  throw std::invalid_argument("unknown option '" + arg + "' (see --help)");
}

/// This process's peak resident memory in MB: VmHWM, not getrusage's ru_maxrss, which Linux
/// carries across fork + exec (a parent's larger peak would show up as the bench's).
inline double peak_rss_mb() {
  double peak_kb = 0;
  std::FILE* status = std::fopen("/proc/self/status", "r");
  char line[256];
  while (status && std::fgets(line, sizeof line, status))
    if (std::sscanf(line, "VmHWM: %lf kB", &peak_kb) == 1) break;
  if (status) std::fclose(status);
  return peak_kb / 1024;
}

/// Runs body() under the rules above.
inline int guarded_main(int argc, char** argv, const char* usage, const std::function<int()>& body) {
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::fputs(usage, stdout);
      return 0;
    }
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", argv[0], e.what());
    return 1;
  }
}

}  // namespace foundry::bench
