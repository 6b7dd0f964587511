// libFuzzer target: the safetensors header parser and the sharded index parser must reject any
// input with a foundry error (never crash, hang, overflow or leak).
//   scripts/fuzz.sh safetensors
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "foundry/core/error.h"
#include "io/safetensors_format.h"

using namespace foundry::io::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    SafetensorsHeader h = parse_safetensors_header(data, size, "fuzz.safetensors");
    // A header that validates must describe byte ranges inside the buffer, tiled exactly.
    uint64_t end = 0;
    for (const SafetensorsEntry& e : h.entries) {
      if (e.begin != end || e.end < e.begin || h.data_start + e.end > size) __builtin_trap();
      end = e.end;
    }
    if (h.data_start + end != size) __builtin_trap();
    // Re-serialising the validated header must give JSON that parses to the same entries.
    std::string json = safetensors_header_json(h.entries, h.metadata, h.has_metadata);
    json.append((8 - json.size() % 8) % 8, ' ');
    std::string image(8, '\0');
    for (int i = 0; i < 8; ++i) image[size_t(i)] = char((json.size() >> (8 * i)) & 0xff);
    image += json;
    image.append(reinterpret_cast<const char*>(data) + h.data_start, size - h.data_start);
    SafetensorsHeader again =
        parse_safetensors_header(reinterpret_cast<const uint8_t*>(image.data()), image.size(), "again");
    if (again.entries.size() != h.entries.size() || again.metadata != h.metadata) __builtin_trap();
  } catch (const foundry::Error&) {
  }
  try {
    parse_safetensors_index(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.index.json");
  } catch (const foundry::Error&) {
  }
  return 0;
}
