#include "tokenizer/tokenizer_config.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json.h"

namespace mls::tok {
namespace {

// Special tokens appear either as plain strings or as AddedToken dicts with "content".
std::string token_string(const nlohmann::json& config, const char* key) {
  if (!config.contains(key)) return "";
  const auto& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v["content"].get<std::string>();
  return "";
}

}  // namespace

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) raise<IoError>("cannot open {}", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TokenizerConfig TokenizerConfig::from_json(const nlohmann::json& config) {
  TokenizerConfig c;
  c.bos_token = token_string(config, "bos_token");
  c.eos_token = token_string(config, "eos_token");
  c.pad_token = token_string(config, "pad_token");
  c.unk_token = token_string(config, "unk_token");
  if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean())
    c.add_bos_token = config["add_bos_token"].get<bool>();
  if (config.contains("add_eos_token") && config["add_eos_token"].is_boolean())
    c.add_eos_token = config["add_eos_token"].get<bool>();
  if (config.contains("chat_template")) {
    const auto& t = config["chat_template"];
    if (t.is_string()) {
      c.chat_template = t.get<std::string>();
    } else if (t.is_array()) {
      for (const auto& named : t) {
        const std::string name = named.value("name", "");
        if (name == "default") c.chat_template = named.value("template", "");
        if (name == "tool_use") c.tool_use_template = named.value("template", "");
      }
    }
  }
  return c;
}

TokenizerConfig TokenizerConfig::from_dir(const std::filesystem::path& dir) {
  TokenizerConfig c;
  const auto config_path = dir / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    try {
      c = from_json(parse_json<ConfigError, nlohmann::json>(read_text_file(config_path),
                                                            config_path.string()));
    } catch (const nlohmann::json::exception& e) {
      raise<ConfigError>("{}: {}", config_path.string(), e.what());
    }
  }
  const auto jinja_path = dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja_path)) c.chat_template = read_text_file(jinja_path);
  return c;
}

}  // namespace mls::tok
