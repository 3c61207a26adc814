// Typed errors. Every error carries enough context (file, tensor, field, expected vs found) for
// the user to act on it without a debugger; callers catch by type to choose a response (the
// server maps InvalidRequest to 400, the CLI prints the message and exits non-zero).
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace mls {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A bad or unsupported model config.json (field and why).
class ConfigError : public Error {
  using Error::Error;
};
// A checkpoint file that is missing, malformed or inconsistent with the config.
class CheckpointError : public Error {
  using Error::Error;
};
// Tensor shapes or dtypes that do not fit an operation.
class ShapeError : public Error {
  using Error::Error;
};
// A user-supplied argument (CLI flag, request field) that is invalid.
class InvalidArgument : public Error {
  using Error::Error;
};
// A tracked allocation that the device or the planned budget cannot satisfy.
class OutOfMemory : public Error {
  using Error::Error;
};
// Something the format allows but this build does not implement.
class Unsupported : public Error {
  using Error::Error;
};
// Operating-system level failure (open, mmap, read).
class IoError : public Error {
  using Error::Error;
};
// A broken internal invariant: always a bug in mlaserve.
class InternalError : public Error {
  using Error::Error;
};

template <class E = Error, class... Args>
[[noreturn]] void raise(fmt::format_string<Args...> f, Args&&... args) {
  throw E(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace mls

// Checks an internal invariant; failure is a bug, reported with the source location.
#define MLS_CHECK(cond, ...)                                                                    \
  do {                                                                                          \
    if (!(cond))                                                                                \
      throw ::mls::InternalError(fmt::format("{}:{}: check failed: {}: {}", __FILE__, __LINE__, \
                                             #cond, fmt::format(__VA_ARGS__)));                 \
  } while (0)
