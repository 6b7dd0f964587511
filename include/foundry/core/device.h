// Where a tensor lives. Only the CPU exists today; the type is in every signature from the start
// so an accelerator backend does not change the API.
#pragma once

#include <string>

namespace foundry {

enum class DeviceType : uint8_t { CPU };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  std::string str() const { return "cpu"; }
  friend bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }
};

inline Device cpu() { return Device{}; }

}  // namespace foundry
