#include "core/logging.h"

#include "core/error.h"

namespace mls {

void set_log_level(const std::string& level) {
  const auto l = spdlog::level::from_str(level);
  if (l == spdlog::level::off && level != "off")
    raise<InvalidArgument>("unknown log level '{}'", level);
  spdlog::set_level(l);
}

}  // namespace mls
