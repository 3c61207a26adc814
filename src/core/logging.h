// Logging through spdlog (header-only build; see core/CMakeLists.txt).
#pragma once

#include <spdlog/spdlog.h>

namespace mls {

// Sets the global level from a name (trace, debug, info, warn, error, off).
void set_log_level(const std::string& level);

}  // namespace mls

#define MLS_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define MLS_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define MLS_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define MLS_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
