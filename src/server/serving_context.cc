#include "server/serving_context.h"

#include <fmt/format.h>

#include <chrono>
#include <random>

#include "server/errors.h"

namespace mls::server {

std::string random_id(std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}-{:016x}{:016x}", prefix, rng(), rng());
}

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void ServingContext::check_model(const std::string& model) const {
  if (model.empty()) return;
  for (const std::string& name : opts.served_model_names)
    if (name == model) return;
  throw ApiError(404, fmt::format("The model `{}` does not exist.", model), "model");
}

const tok::Tokenizer& ServingContext::text_tokenizer(const std::string& param) const {
  if (!tokenizer)
    bad_request(fmt::format("'{}' needs the tokenizer, and this server runs with "
                            "--skip-tokenizer-init: send token ids to /v1/completions",
                            param),
                param);
  return *tokenizer;
}

}  // namespace mls::server
