#include "server/http_request.h"

#include <strings.h>

#include "core/error.h"
#include "core/logging.h"
#include "server/errors.h"
#include "server/sse.h"

namespace mls::server {

std::string_view HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k.size() == name.size() && strncasecmp(k.data(), name.data(), k.size()) == 0) return v;
  return {};
}

Reply error_reply(int status, const std::string& message, const std::string& param) {
  Reply r;
  r.status = status;
  r.body = dump_json(error_body(status, message, param));
  return r;
}

Reply current_exception_reply() {
  try {
    throw;
  } catch (const ApiError& e) {
    return error_reply(e.status(), e.what(), e.param());
  } catch (const InvalidArgument& e) {
    return error_reply(400, e.what());
  } catch (const std::exception& e) {
    MLS_LOG_ERROR("internal error: {}", e.what());
    return error_reply(500, e.what());
  } catch (...) {
    return error_reply(500, "unknown internal error");
  }
}

}  // namespace mls::server
