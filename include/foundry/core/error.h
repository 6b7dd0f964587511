// Errors raised by Foundry. Every failure a user can cause (bad shapes, dtypes, indices, files)
// throws one of these with a message naming the operation and the problem; nothing aborts.
// The Python bindings map each kind to the matching Python exception.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace foundry {

/// Base class of all Foundry errors (Python: RuntimeError).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// An argument has the wrong value (Python: ValueError).
class ValueError : public Error {
 public:
  using Error::Error;
};

/// A dtype or argument type is not supported (Python: TypeError).
class TypeError : public Error {
 public:
  using Error::Error;
};

/// An index or dimension is out of range (Python: IndexError).
class IndexError : public Error {
 public:
  using Error::Error;
};

/// A feature exists in the API but not for this input (Python: NotImplementedError).
class NotImplementedError : public Error {
 public:
  using Error::Error;
};

/// A file could not be read or is malformed (Python: OSError for I/O, ValueError for content).
class IOError : public Error {
 public:
  using Error::Error;
};

/// Throws `E` with a fmt-formatted message.
template <typename E = Error, typename... Args>
[[noreturn]] void raise(fmt::format_string<Args...> format, Args&&... args) {
  throw E(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace foundry

/// Checks a condition a caller can violate; throws `foundry::Error` with a formatted message.
#define FOUNDRY_CHECK(cond, ...)                   \
  do {                                             \
    if (!(cond)) ::foundry::raise<::foundry::Error>(__VA_ARGS__); \
  } while (0)

/// Same, with an explicit error class: FOUNDRY_CHECK_AS(IndexError, i < n, "...", ...).
#define FOUNDRY_CHECK_AS(E, cond, ...)             \
  do {                                             \
    if (!(cond)) ::foundry::raise<::foundry::E>(__VA_ARGS__); \
  } while (0)
