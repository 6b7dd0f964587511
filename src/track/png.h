// PNG: encode 8-bit gray / RGB / RGBA images (zlib deflate, filter 0) and read the size of a PNG.
#pragma once

#include <cstdint>
#include <string>

namespace foundry::track {

std::string encode_png(const uint8_t* pixels, int64_t height, int64_t width, int channels);
/// Checks the signature and IHDR; returns false (with `error` set) for anything else.
bool png_size(const std::string& png, int64_t* height, int64_t* width, int* channels, std::string* error);

}  // namespace foundry::track
