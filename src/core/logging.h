// Logging. spdlog stays inside logging.cc: it is built header-only (the GPU machine ships a
// different spdlog ABI), and its implementation cost every including file ~6 CPU-s to parse.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace mls {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

// Whether a message at `level` is written (checked before formatting it).
bool log_enabled(LogLevel level);
void log(LogLevel level, std::string_view message);
// Sets the global level from a name (trace, debug, info, warn, error, off).
void set_log_level(const std::string& level);
// Writes every later message to stderr, each tagged with `tag` (one process of several).
void log_to_stderr_tagged(const std::string& tag);
// Writes every later message to stderr, for commands whose stdout is their output (serve logs
// to stdout, as vLLM does).
void log_to_stderr();
void flush_log();

}  // namespace mls

#define MLS_LOG_AT(level, ...)                                                    \
  do {                                                                            \
    if (::mls::log_enabled(level)) ::mls::log(level, ::fmt::format(__VA_ARGS__)); \
  } while (0)
#define MLS_LOG_INFO(...) MLS_LOG_AT(::mls::LogLevel::kInfo, __VA_ARGS__)
#define MLS_LOG_WARN(...) MLS_LOG_AT(::mls::LogLevel::kWarn, __VA_ARGS__)
#define MLS_LOG_DEBUG(...) MLS_LOG_AT(::mls::LogLevel::kDebug, __VA_ARGS__)
#define MLS_LOG_ERROR(...) MLS_LOG_AT(::mls::LogLevel::kError, __VA_ARGS__)
