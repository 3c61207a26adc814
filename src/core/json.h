// Parsing JSON text that comes from outside the process: request bodies, strings re-parsed from
// them (tool-call arguments), model files (config.json, tokenizer.json, safetensors headers).
// nlohmann's parser itself is iterative, but copying, dumping, comparing and every walker of
// ours (the Jinja value conversion, the tokenizer's processors) recurse per nesting level, so
// nesting is bounded here, once, before anything can recurse over it.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "core/error.h"

namespace mls {

// Deepest array/object nesting accepted anywhere: `[[1]]` nests 2 levels. No request or model
// file comes near it (tool schemas nest a dozen levels); the stack cost of 128 levels is small.
inline constexpr int kMaxJsonDepth = 128;

// The array/object nesting of JSON text (brackets inside strings do not count), counted up to
// kMaxJsonDepth + 1: the scan stops as soon as the limit is exceeded.
int json_depth(std::string_view text);

// Parses `text`; throws E("<what>: ...") when it is not JSON or nests deeper than kMaxJsonDepth.
template <class E, class Json = nlohmann::ordered_json>
Json parse_json(std::string_view text, std::string_view what) {
  if (json_depth(text) > kMaxJsonDepth)
    raise<E>("{}: JSON nests deeper than {} levels", what, kMaxJsonDepth);
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    raise<E>("{}: not valid JSON: {}", what, e.what());
  }
}

// As parse_json, nullopt instead of an error (for text that may or may not be JSON).
template <class Json = nlohmann::ordered_json>
std::optional<Json> try_parse_json(std::string_view text) {
  if (json_depth(text) > kMaxJsonDepth) return std::nullopt;
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

}  // namespace mls
