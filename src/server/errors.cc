#include "server/errors.h"

namespace mls::server {

ApiError::ApiError(int status, std::string message, std::string param)
    : std::runtime_error(std::move(message)), status_(status), param_(std::move(param)) {}

void bad_request(std::string message, std::string param) {
  throw ApiError(400, std::move(message), std::move(param));
}

const char* error_type(int status) {
  switch (status) {
    case 400:
      return "BadRequestError";
    case 401:
      return "AuthenticationError";
    case 404:
      return "NotFoundError";
    case 405:
      return "MethodNotAllowedError";
    case 413:
      return "RequestEntityTooLargeError";
    case 503:
      return "ServiceUnavailableError";
    default:
      return status >= 500 ? "InternalServerError" : "BadRequestError";
  }
}

nlohmann::json error_body(int status, const std::string& message, const std::string& param) {
  return {{"error",
           {{"message", message},
            {"type", error_type(status)},
            {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
            {"code", status}}}};
}

}  // namespace mls::server
