#include "core/device.h"

#include <fmt/format.h>

#include "core/error.h"
#ifdef MLASERVE_CUDA_RUNTIME
#include "core/cuda_allocator.h"
#endif

namespace mls {

std::string Device::str() const {
  return type == DeviceType::kCpu ? std::string("cpu") : fmt::format("cuda:{}", index);
}

Device default_device() {
#ifdef MLASERVE_CUDA_RUNTIME
  if (cuda_device_count() > 0) return Device::cuda(0);
#endif
  return Device::cpu();
}

Device parse_device(const std::string& s) {
  if (s == "auto") return default_device();
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
  raise<InvalidArgument>("unknown device '{}': expected auto, cpu, cuda or cuda:N", s);
}

}  // namespace mls
