// OpenAI request bodies: JSON parsing with its depth limit, then the chat or completions
// validation. Every input must end in a parsed request or an ApiError 400.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/errors.h"
#include "server/openai_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mls::server;
  const std::string body(reinterpret_cast<const char*>(data), size);
  try {
    const nlohmann::ordered_json j = parse_json_body(body);
    const GenerationDefaults defaults;
    if (j.contains("messages"))
      parse_chat_request(j, defaults);
    else
      parse_completion_request(j, defaults);
  } catch (const ApiError& e) {
    if (e.status() != 400) __builtin_trap();
  }
  return 0;
}
