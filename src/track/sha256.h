// SHA-256 (FIPS 180-4) for content-addressed artifacts.
#pragma once

#include <istream>
#include <string>

namespace foundry::track {

std::string sha256_hex(const std::string& bytes);
/// Reads the stream to its end.
std::string sha256_file_hex(std::istream& in);

}  // namespace foundry::track
