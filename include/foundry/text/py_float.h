// Python's repr of a float (shortest round-trip digits, "1.0" not "1"), for text that must equal
// what Python prints: module reprs, Jinja output, JSON written as Python writes it.
#pragma once

#include <string>

namespace foundry::text {
std::string py_float(double v);
}
