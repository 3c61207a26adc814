#include "core/device.h"

#include <fmt/format.h>

#include "core/error.h"

namespace mls {

std::string Device::str() const {
  return type == DeviceType::kCpu ? std::string("cpu") : fmt::format("cuda:{}", index);
}

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu();
  if (s == "cuda") return Device::cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    try {
      size_t used = 0;
      const int i = std::stoi(s.substr(5), &used);
      if (used == s.size() - 5 && i >= 0) return Device::cuda(i);
    } catch (const std::exception&) {
    }
  }
  raise<InvalidArgument>("unknown device '{}': expected cpu, cuda or cuda:N", s);
}

}  // namespace mls
