// OpenAI-shaped API errors. Handlers throw ApiError; the HTTP layer turns it (and any other
// exception) into {"error": {"message", "type", "param", "code"}} with the matching status, the
// shape OpenAI clients and vLLM-era dashboards parse.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace mls::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {});

  int status() const { return status_; }
  const std::string& param() const { return param_; }

 private:
  int status_;
  std::string param_;
};

// 400 naming the offending request field.
[[noreturn]] void bad_request(std::string message, std::string param = {});

// The error type name for a status, as vLLM reports it ("BadRequestError", ...).
const char* error_type(int status);

// {"error": {...}}; `param` empty means null.
nlohmann::json error_body(int status, const std::string& message, const std::string& param = {});

}  // namespace mls::server
