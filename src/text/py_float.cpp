#include "foundry/text/py_float.h"

#include <cmath>

#include <fmt/format.h>

namespace foundry::text {

std::string py_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // fmt's shortest round-trip form matches Python's repr except that Python keeps ".0" on
  // integral values.
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

}  // namespace foundry::text
