// tokenizer.json loading and encoding. The first byte picks the mode: even, the rest is a
// tokenizer.json (loaded, then used on a fixed text); odd, the rest is text for the GLM fixture
// tokenizer (encode, decode, incremental detokenization, which must agree with decode).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/json.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

void use(const mls::tok::Tokenizer& tok, std::string_view text) {
  std::vector<int32_t> ids;
  try {
    ids = tok.encode(text, true);
  } catch (const mls::InvalidArgument&) {
    return;  // not UTF-8, or the regex engine gave up
  }
  const std::string decoded = tok.decode(ids, false);
  mls::tok::IncrementalDetokenizer detok(tok, false);
  std::string streamed;
  for (int32_t id : ids) streamed += detok.push(id);
  streamed += detok.flush();
  if (streamed != decoded) __builtin_trap();
  for (int32_t id : ids) tok.id_to_token(id);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const mls::tok::Tokenizer glm =
      mls::tok::Tokenizer::from_dir(MLASERVE_TEST_DATA "/tok-glm");
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    use(glm, rest);
    return 0;
  }
  try {
    const auto j = mls::parse_json<mls::ConfigError, nlohmann::json>(rest, "tokenizer.json");
    const mls::tok::Tokenizer tok = mls::tok::Tokenizer::from_json(j);
    use(tok, "Hello wörld <eot> 123 \n\t  !!");
  } catch (const mls::ConfigError&) {
  } catch (const mls::Unsupported&) {
  }
  return 0;
}
