#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <string>

#include "core/error.h"

namespace mls::tok {
namespace {

// The regex ByteLevel applies itself when use_regex is true (GPT-2's).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

// One `Split` step: a PCRE2 pattern compiled for Unicode properties (\p{L}, \s matching all
// Unicode white space), JIT-compiled because it runs over every byte of every prompt.
class RegexSplitter {
 public:
  RegexSplitter(std::string_view pattern, bool remove_matches) : remove_matches_(remove_matches) {
    int err = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      raise<ConfigError>("tokenizer.json: pre-tokenizer regex does not compile at offset {}: {}",
                         offset, reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if absent
  }
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;
  ~RegexSplitter() { pcre2_code_free(code_); }

  // Isolated behaviour: every match and every gap between matches becomes a piece.
  void split(std::string_view text, pcre2_match_data* md,
             std::vector<std::string_view>& out) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0, emitted = 0;
    while (pos <= text.size()) {
      const int rc = pcre2_match(code_, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0)
        raise<InvalidArgument>("pre-tokenizer regex failed on input (pcre2 error {})", rc);
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t start = ov[0], end = ov[1];
      if (end == start) {  // an empty match cuts nothing; step over one code point
        pos = start + 1;
        while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
        continue;
      }
      if (start > emitted) out.push_back(text.substr(emitted, start - emitted));
      if (!remove_matches_) out.push_back(text.substr(start, end - start));
      emitted = pos = end;
    }
    if (emitted < text.size()) out.push_back(text.substr(emitted));
  }

  pcre2_code* code() const { return code_; }

 private:
  pcre2_code* code_ = nullptr;
  bool remove_matches_;
};

PreTokenizer::PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

PreTokenizer PreTokenizer::from_json(const nlohmann::json& config) {
  PreTokenizer p;
  bool saw_byte_level = false;
  if (!config.is_null()) p.add_json(config, saw_byte_level);
  if (!saw_byte_level)
    raise<Unsupported>(
        "tokenizer.json: only byte-level BPE is supported (no ByteLevel pre-tokenizer)");
  return p;
}

void PreTokenizer::add_json(const nlohmann::json& config, bool& saw_byte_level) {
  const std::string type = config.value("type", "");
  if (type == "Sequence") {
    for (const auto& sub : config.at("pretokenizers")) add_json(sub, saw_byte_level);
  } else if (type == "Split") {
    const auto& pattern = config.at("pattern");
    std::string regex;
    if (pattern.contains("Regex")) {
      regex = pattern["Regex"].get<std::string>();
    } else {
      // A literal string pattern: quote it so PCRE2 matches it verbatim.
      regex = "\\Q" + pattern.at("String").get<std::string>() + "\\E";
    }
    if (config.value("invert", false))
      raise<Unsupported>("tokenizer.json: Split with invert=true is not supported");
    const std::string behavior = config.value("behavior", "Isolated");
    if (behavior != "Isolated" && behavior != "Removed")
      raise<Unsupported>("tokenizer.json: Split behavior '{}' is not supported", behavior);
    splitters_.push_back(std::make_unique<RegexSplitter>(regex, behavior == "Removed"));
  } else if (type == "ByteLevel") {
    saw_byte_level = true;
    add_prefix_space_ = config.value("add_prefix_space", false);
    if (config.value("use_regex", true))
      splitters_.push_back(std::make_unique<RegexSplitter>(kGpt2Pattern, false));
  } else {
    raise<Unsupported>("tokenizer.json: pre-tokenizer type '{}' is not supported", type);
  }
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  std::vector<std::string_view> cur{text}, next;
  for (const auto& splitter : splitters_) {
    const std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        pcre2_match_data_create_from_pattern(splitter->code(), nullptr), &pcre2_match_data_free);
    next.clear();
    for (std::string_view piece : cur) splitter->split(piece, md.get(), next);
    cur.swap(next);
  }
  out.insert(out.end(), cur.begin(), cur.end());
}

}  // namespace mls::tok
