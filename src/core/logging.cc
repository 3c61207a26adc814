#include "core/logging.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "core/error.h"

namespace mls {
namespace {

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarn:
      return spdlog::level::warn;
    case LogLevel::kError:
      break;
  }
  return spdlog::level::err;
}

}  // namespace

bool log_enabled(LogLevel level) {
  return spdlog::default_logger_raw()->should_log(to_spdlog(level));
}

void log(LogLevel level, std::string_view message) {
  spdlog::default_logger_raw()->log(to_spdlog(level), message);
}

void set_log_level(const std::string& level) {
  const auto l = spdlog::level::from_str(level);
  if (l == spdlog::level::off && level != "off")
    raise<InvalidArgument>("unknown log level '{}'", level);
  spdlog::set_level(l);
}

void log_to_stderr_tagged(const std::string& tag) {
  auto logger = spdlog::stderr_logger_mt(tag);
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v");
  spdlog::set_default_logger(logger);
}

void log_to_stderr() {
  const auto logger = spdlog::default_logger();
  logger->sinks() = {std::make_shared<spdlog::sinks::stderr_sink_mt>()};
  logger->set_pattern("%+");
}

void flush_log() {
  spdlog::default_logger()->flush();
}

}  // namespace mls
