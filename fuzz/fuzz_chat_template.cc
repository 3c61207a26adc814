// The JSON -> template path: a chat request (as the server or `mlaserve chat-template` gets it)
// rendered by each of the test templates. Every input renders or fails with InvalidArgument
// (a 400 in the server).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "core/error.h"
#include "core/json.h"
#include "tokenizer/tokenizer_config.h"

namespace {

std::vector<mls::chat::ChatTemplate> load_templates() {
  std::vector<mls::chat::ChatTemplate> out;
  for (const char* name : {"glm5_style", "deepseek_v31_style", "deepseek_v32_style"})
    out.emplace_back(
        mls::tok::read_text_file(std::string(MLASERVE_SOURCE_DIR "/tests/chat/templates/") + name +
                                 ".jinja"),
        std::vector<std::pair<std::string, std::string>>{{"bos_token", "<s>"}});
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<mls::chat::ChatTemplate> templates = load_templates();
  nlohmann::ordered_json request;
  try {
    request = mls::parse_json<mls::InvalidArgument>(
        std::string_view(reinterpret_cast<const char*>(data), size), "request");
  } catch (const mls::InvalidArgument&) {
    return 0;
  }
  for (const auto& t : templates) {
    try {
      mls::chat::render_chat(t, request);
    } catch (const mls::InvalidArgument&) {
    }
  }
  return 0;
}
