// Where a tensor's bytes live.
#pragma once

#include <string>

namespace mls {

enum class DeviceType { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;

  bool operator==(const Device&) const = default;
  bool is_cpu() const { return type == DeviceType::kCpu; }
  std::string str() const;
  static Device cpu() { return {}; }
  static Device cuda(int i) { return {DeviceType::kCuda, i}; }
};

// cuda:0 when this build has CUDA and a GPU is visible, else the CPU.
Device default_device();
// Parses "auto" (default_device()), "cpu", "cuda", "cuda:N"; throws InvalidArgument otherwise.
Device parse_device(const std::string& s);

}  // namespace mls
