#include "tokenizer/post_processor.h"

#include <string>

#include "core/error.h"
#include "tokenizer/token_id.h"

namespace mls::tok {
namespace {

void add_template(const nlohmann::json& config, PostProcessor& p) {
  const auto& special = config.at("special_tokens");
  bool after_sequence = false;
  for (const auto& piece : config.at("single")) {
    if (piece.contains("Sequence")) {
      after_sequence = true;
      continue;
    }
    const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
    if (!special.contains(name))
      raise<ConfigError>("tokenizer.json: TemplateProcessing names unknown special token '{}'",
                         name);
    for (const auto& id : special[name].at("ids"))
      (after_sequence ? p.suffix : p.prefix).push_back(token_id(id, "post_processor"));
  }
}

void add_json(const nlohmann::json& config, PostProcessor& p) {
  const std::string type = config.value("type", "");
  if (type == "TemplateProcessing") {
    add_template(config, p);
  } else if (type == "Sequence") {
    for (const auto& sub : config.at("processors")) add_json(sub, p);
  } else if (type != "ByteLevel") {  // ByteLevel only trims offsets, which we do not report
    raise<Unsupported>("tokenizer.json: post-processor type '{}' is not supported", type);
  }
}

}  // namespace

PostProcessor PostProcessor::from_json(const nlohmann::json& config) {
  PostProcessor p;
  if (!config.is_null()) add_json(config, p);
  return p;
}

}  // namespace mls::tok
