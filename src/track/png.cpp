#include "track/png.h"

#include <zlib.h>

#include <cstring>

#include "foundry/core/error.h"

namespace foundry::track {

namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out += char((v >> s) & 255);
}
uint32_t get_u32(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 | uint32_t(uint8_t(s[at + 2])) << 8 |
         uint8_t(s[at + 3]);
}
void chunk(std::string& out, const char* type, const std::string& data) {
  put_u32(out, uint32_t(data.size()));
  std::string body = std::string(type, 4) + data;
  out += body;
  put_u32(out, uint32_t(::crc32(0, reinterpret_cast<const Bytef*>(body.data()), uInt(body.size()))));
}
constexpr char kSignature[] = "\x89PNG\r\n\x1a\n";

}  // namespace

std::string encode_png(const uint8_t* pixels, int64_t height, int64_t width, int channels) {
  if (height <= 0 || width <= 0 || height > (1 << 15) || width > (1 << 15))
    raise<ValueError>("image size {}x{} is out of range (1..32768 each)", height, width);
  if (channels != 1 && channels != 3 && channels != 4)
    raise<ValueError>("an image needs 1 (gray), 3 (RGB) or 4 (RGBA) channels, got {}", channels);
  std::string raw;
  size_t row = size_t(width) * size_t(channels);
  raw.reserve(size_t(height) * (row + 1));
  for (int64_t y = 0; y < height; ++y) {
    raw += '\0';  // filter type 0 (none)
    raw.append(reinterpret_cast<const char*>(pixels) + size_t(y) * row, row);
  }
  uLongf cap = compressBound(uLong(raw.size()));
  std::string z(cap, '\0');
  if (compress2(reinterpret_cast<Bytef*>(z.data()), &cap, reinterpret_cast<const Bytef*>(raw.data()), uLong(raw.size()),
                6) != Z_OK)
    raise<Error>("PNG: deflate failed");
  z.resize(cap);
  std::string out(kSignature, 8), ihdr;
  put_u32(ihdr, uint32_t(width));
  put_u32(ihdr, uint32_t(height));
  ihdr += char(8);                                             // bit depth
  ihdr += char(channels == 1 ? 0 : channels == 3 ? 2 : 6);    // colour type
  ihdr += std::string("\0\0\0", 3);                           // compression, filter, interlace
  chunk(out, "IHDR", ihdr);
  chunk(out, "IDAT", z);
  chunk(out, "IEND", "");
  return out;
}

bool png_size(const std::string& png, int64_t* height, int64_t* width, int* channels, std::string* error) {
  if (png.size() < 33 || std::memcmp(png.data(), kSignature, 8) != 0) {
    *error = "not a PNG file (bad signature or shorter than a header)";
    return false;
  }
  if (get_u32(png, 8) != 13 || png.compare(12, 4, "IHDR") != 0) {
    *error = "PNG without an IHDR chunk first";
    return false;
  }
  *width = get_u32(png, 16);
  *height = get_u32(png, 20);
  int colour = uint8_t(png[25]);
  *channels = colour == 0 ? 1 : colour == 2 ? 3 : colour == 4 ? 2 : colour == 6 ? 4 : 3;
  if (*width == 0 || *height == 0) {
    *error = "PNG with a zero size";
    return false;
  }
  return true;
}

}  // namespace foundry::track
