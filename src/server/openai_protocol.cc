#include "server/openai_protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <mutex>
#include <set>

#include "chat/chat_template.h"
#include "core/error.h"
#include "core/json.h"
#include "core/logging.h"
#include "grammar/grammar_error.h"
#include "grammar/json_schema.h"
#include "server/errors.h"
#include "server/stop_matcher.h"

namespace mls::server {

const nlohmann::ordered_json* present_field(const nlohmann::ordered_json& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

namespace {

using ojson = nlohmann::ordered_json;

std::optional<double> opt_number(const ojson& obj, const char* key) {
  const ojson* v = present_field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad_request(fmt::format("'{}' must be a number", key), key);
  return v->get<double>();
}

std::optional<int64_t> opt_int(const ojson& obj, const char* key) {
  const ojson* v = present_field(obj, key);
  if (!v) return std::nullopt;
  if (v->is_number_integer()) return v->get<int64_t>();
  // 1.0 is an integer to Python's pydantic too; 1.5 is not.
  if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
      std::abs(v->get<double>()) < 9e15)
    return static_cast<int64_t>(v->get<double>());
  bad_request(fmt::format("'{}' must be an integer", key), key);
}

std::optional<bool> opt_bool(const ojson& obj, const char* key) {
  const ojson* v = present_field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad_request(fmt::format("'{}' must be a boolean", key), key);
  return v->get<bool>();
}

std::optional<std::string> opt_string(const ojson& obj, const char* key) {
  const ojson* v = present_field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad_request(fmt::format("'{}' must be a string", key), key);
  return v->get<std::string>();
}

void check_range(bool ok, const char* key, const std::string& why) {
  if (!ok) bad_request(fmt::format("'{}' {}", key, why), key);
}

std::vector<int64_t> int_list(const ojson& v, const char* key) {
  if (!v.is_array()) bad_request(fmt::format("'{}' must be a list of integers", key), key);
  std::vector<int64_t> out;
  for (const ojson& e : v) {
    if (!e.is_number_integer())
      bad_request(fmt::format("'{}' must be a list of integers", key), key);
    out.push_back(e.get<int64_t>());
  }
  return out;
}

int32_t token_id(const ojson& v, const char* key) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
      v.get<int64_t>() > std::numeric_limits<int32_t>::max())
    bad_request(fmt::format("'{}' must hold token ids (non-negative integers)", key), key);
  return static_cast<int32_t>(v.get<int64_t>());
}

// logit_bias, allowed_token_ids, bad_words (engine-side vocabulary checks come on submit).
void parse_token_constraints(const ojson& body, SamplingOptions& o) {
  SamplingParams& p = o.params;
  if (const ojson* bias = present_field(body, "logit_bias")) {
    if (!bias->is_object())
      bad_request("'logit_bias' must be an object mapping token ids to biases", "logit_bias");
    for (auto it = bias->begin(); it != bias->end(); ++it) {
      const std::string& key = it.key();
      const ojson& value = it.value();
      const bool digits = !key.empty() && key.size() <= 10 &&
                          key.find_first_not_of("0123456789") == std::string::npos;
      if (!digits || std::stoll(key) > std::numeric_limits<int32_t>::max())
        bad_request(fmt::format("'logit_bias' key '{}' is not a token id", key), "logit_bias");
      if (!value.is_number() || !(std::abs(value.get<double>()) <= 100))
        bad_request(fmt::format("'logit_bias' of token {} must be a number in [-100, 100]", key),
                    "logit_bias");
      p.logit_bias.emplace_back(static_cast<int32_t>(std::stoll(key)), value.get<float>());
    }
  }
  if (const ojson* ids = present_field(body, "allowed_token_ids")) {
    if (!ids->is_array() || ids->empty())
      bad_request("'allowed_token_ids' must be a non-empty list of token ids", "allowed_token_ids");
    for (const ojson& id : *ids) p.allowed_token_ids.push_back(token_id(id, "allowed_token_ids"));
  }
  if (const ojson* words = present_field(body, "bad_words")) {
    const char* shape = "'bad_words' must be a string or a list of non-empty strings";
    if (words->is_string()) {
      o.bad_words.push_back(words->get<std::string>());
    } else if (words->is_array()) {
      for (const ojson& w : *words) {
        if (!w.is_string()) bad_request(shape, "bad_words");
        o.bad_words.push_back(w.get<std::string>());
      }
    } else {
      bad_request(shape, "bad_words");
    }
    for (const std::string& w : o.bad_words)
      if (w.find_first_not_of(' ') == std::string::npos) bad_request(shape, "bad_words");
  }
}

// Fields a peer server defines whose non-default values this server cannot honour: a 400 naming
// the field rather than an answer computed without it.
struct Unsupported {
  const char* name;
  bool (*is_default)(const ojson&);
  const char* why;
};

bool is_false(const ojson& v) {
  return v.is_boolean() && !v.get<bool>();
}
bool is_true(const ojson& v) {
  return v.is_boolean() && v.get<bool>();
}
bool never(const ojson&) {
  return false;
}

constexpr Unsupported kUnsupported[] = {
    {"use_beam_search", is_false, "beam search is not supported"},
    {"length_penalty", [](const ojson& v) { return v.is_number() && v.get<double>() == 1.0; },
     "applies to beam search, which is not supported"},
    {"truncate_prompt_tokens", never, "prompt truncation is not supported"},
    {"return_tokens_as_token_ids", is_false, "is not supported"},
    {"spaces_between_special_tokens", is_true,
     "false is not supported (special tokens are joined as the tokenizer decodes them)"},
    {"priority", [](const ojson& v) { return v.is_number() && v.get<double>() == 0.0; },
     "is not supported (first come, first served)"},
    {"logits_processors", never, "custom logits processors are not supported"},
    {"prompt_embeds", never, "prompt embeddings are not supported"},
    {"cache_salt", never, "is not supported"},
    {"kv_transfer_params", never, "disaggregated serving is not supported"},
    {"vllm_xargs", never, "is not supported"},
    {"mm_processor_kwargs", never, "multimodal input is not supported"},
    {"guided_decoding_backend", [](const ojson& v) { return v == "auto"; },
     "is not supported: one grammar engine serves every structured output (only \"auto\")"},
};

constexpr Unsupported kUnsupportedChat[] = {
    {"echo", is_false, "echo is supported on /v1/completions only"},
    {"return_token_ids", is_false, "is supported on /v1/completions only"},
    {"continue_final_message", is_false, "is not supported"},
    {"chat_template", never,
     "a request-level chat template is not supported (use --chat-template)"},
    {"functions", never, "the deprecated 'functions' is not supported: use 'tools'"},
    {"function_call", never, "the deprecated 'function_call' is not supported: use 'tool_choice'"},
    {"audio", never, "audio output is not supported"},
    {"modalities", [](const ojson& v) { return v == ojson::array({"text"}); },
     "only [\"text\"] is supported"},
    {"prediction", never, "predicted outputs are not supported"},
};

constexpr Unsupported kUnsupportedCompletion[] = {
    {"suffix", [](const ojson& v) { return v.is_string() && v.get<std::string>().empty(); },
     "is not supported"},
};

void reject_unsupported(const ojson& body, std::span<const Unsupported> table) {
  for (const Unsupported& u : table)
    if (const ojson* v = present_field(body, u.name); v && !u.is_default(*v))
      bad_request(fmt::format("'{}' {}", u.name, u.why), u.name);
}

// The fields each endpoint reads (the structured-output fields are parsed by src/grammar's
// request side; they are listed here so that they are not reported as ignored).
constexpr std::string_view kSamplingFields[] = {"model",
                                                "temperature",
                                                "top_p",
                                                "top_k",
                                                "min_p",
                                                "presence_penalty",
                                                "frequency_penalty",
                                                "repetition_penalty",
                                                "seed",
                                                "n",
                                                "max_tokens",
                                                "max_completion_tokens",
                                                "min_tokens",
                                                "ignore_eos",
                                                "stop_token_ids",
                                                "stop",
                                                "skip_special_tokens",
                                                "stream",
                                                "stream_options",
                                                "logit_bias",
                                                "allowed_token_ids",
                                                "bad_words",
                                                "include_stop_str_in_output",
                                                "prompt_logprobs",
                                                "best_of",
                                                "response_format",
                                                "structured_outputs",
                                                "guided_json",
                                                "guided_regex",
                                                "guided_choice",
                                                "guided_grammar",
                                                "guided_whitespace_pattern",
                                                "guided_decoding_backend"};
constexpr std::string_view kChatFields[] = {"messages",
                                            "tools",
                                            "tool_choice",
                                            "parallel_tool_calls",
                                            "include_reasoning",
                                            "logprobs",
                                            "top_logprobs",
                                            "add_generation_prompt",
                                            "chat_template_kwargs",
                                            "documents",
                                            "add_special_tokens"};
constexpr std::string_view kCompletionFields[] = {"prompt", "echo", "logprobs",
                                                  "add_special_tokens", "return_token_ids"};

bool listed(std::string_view name, std::span<const std::string_view> list) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

// A JSON Schema given as an object (or boolean), or as a string holding one (vLLM accepts both).
ojson schema_field(const ojson& v, const std::string& param) {
  if (v.is_object() || v.is_boolean()) return v;
  if (v.is_string()) {
    ojson parsed = ojson::parse(v.get<std::string>(), nullptr, false);
    if (!parsed.is_discarded() && (parsed.is_object() || parsed.is_boolean())) return parsed;
  }
  bad_request(fmt::format("'{}' must be a JSON Schema (an object, or a string holding one)", param),
              param);
}

std::vector<std::string> choice_field(const ojson& v, const std::string& param) {
  std::vector<std::string> out;
  if (v.is_array())
    for (const ojson& c : v) {
      if (!c.is_string() || c.get_ref<const std::string&>().empty()) break;
      out.push_back(c.get<std::string>());
    }
  if (!v.is_array() || v.empty() || out.size() != v.size())
    bad_request(fmt::format("'{}' must be a non-empty list of non-empty strings", param), param);
  return out;
}

std::string text_field(const ojson& v, const std::string& param) {
  if (!v.is_string() || v.get_ref<const std::string&>().empty())
    bad_request(fmt::format("'{}' must be a non-empty string", param), param);
  return v.get<std::string>();
}

// response_format, structured_outputs and the older guided_* fields: at most one constraint,
// and for JSON output at most one whitespace pattern.
StructuredOutput parse_structured(const ojson& body) {
  using Kind = StructuredOutput::Kind;
  std::vector<StructuredOutput> found;
  std::vector<std::pair<std::string, std::string>> whitespace;  // (field, pattern)
  const auto add = [&](Kind kind, std::string field) -> StructuredOutput& {
    found.push_back({});
    found.back().kind = kind;
    found.back().field = std::move(field);
    return found.back();
  };
  if (const ojson* rf = present_field(body, "response_format")) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      bad_request("'response_format' must be an object with a 'type'", "response_format");
    const std::string type = (*rf)["type"].get<std::string>();
    if (type == "json_object") {
      add(Kind::kJsonObject, "response_format");
    } else if (type == "json_schema") {
      const ojson* js = present_field(*rf, "json_schema");
      if (!js || !js->is_object() || !js->contains("schema"))
        bad_request("'response_format.json_schema' must be an object with a 'schema'",
                    "response_format.json_schema");
      if (js->contains("strict") && !(*js)["strict"].is_boolean() && !(*js)["strict"].is_null())
        bad_request("'response_format.json_schema.strict' must be a boolean",
                    "response_format.json_schema.strict");
      // strict or not, the schema is enforced: a non-strict schema is a looser promise.
      add(Kind::kJsonSchema, "response_format.json_schema.schema").schema =
          schema_field((*js)["schema"], "response_format.json_schema.schema");
    } else if (type != "text") {
      bad_request(fmt::format("'response_format.type' '{}' is not one of text, json_object, "
                              "json_schema",
                              type),
                  "response_format.type");
    }
  }
  if (const ojson* so = present_field(body, "structured_outputs")) {
    if (!so->is_object())
      bad_request("'structured_outputs' must be an object", "structured_outputs");
    for (const auto& [key, v] : so->items()) {
      if (v.is_null()) continue;
      const std::string param = "structured_outputs." + key;
      if (key == "json") {
        add(Kind::kJsonSchema, param).schema = schema_field(v, param);
      } else if (key == "regex") {
        add(Kind::kRegex, param).text = text_field(v, param);
      } else if (key == "choice") {
        add(Kind::kChoice, param).choices = choice_field(v, param);
      } else if (key == "grammar") {
        add(Kind::kGrammar, param).text = text_field(v, param);
      } else if (key == "json_object") {
        if (!v.is_boolean()) bad_request(fmt::format("'{}' must be a boolean", param), param);
        if (v.get<bool>()) add(Kind::kJsonObject, param);
      } else if (key == "whitespace_pattern") {
        whitespace.emplace_back(param, text_field(v, param));
      } else {
        bad_request(fmt::format("'{}' is not supported (json, regex, choice, grammar, "
                                "json_object, whitespace_pattern are)",
                                param),
                    param);
      }
    }
  }
  if (const ojson* v = present_field(body, "guided_json"))
    add(Kind::kJsonSchema, "guided_json").schema = schema_field(*v, "guided_json");
  if (const ojson* v = present_field(body, "guided_regex"))
    add(Kind::kRegex, "guided_regex").text = text_field(*v, "guided_regex");
  if (const ojson* v = present_field(body, "guided_choice"))
    add(Kind::kChoice, "guided_choice").choices = choice_field(*v, "guided_choice");
  if (const ojson* v = present_field(body, "guided_grammar"))
    add(Kind::kGrammar, "guided_grammar").text = text_field(*v, "guided_grammar");
  if (found.size() > 1)
    bad_request(fmt::format("'{}' and '{}' both constrain the output; give only one",
                            found[0].field, found[1].field),
                found[1].field);
  StructuredOutput out = found.empty() ? StructuredOutput{} : std::move(found[0]);
  if (const ojson* v = present_field(body, "guided_whitespace_pattern"))
    whitespace.emplace_back("guided_whitespace_pattern",
                            text_field(*v, "guided_whitespace_pattern"));
  if (whitespace.empty()) return out;
  const std::string& ws_field = whitespace[0].first;
  if (whitespace.size() > 1)
    bad_request(fmt::format("'{}' and '{}' both set the whitespace; give only one", ws_field,
                            whitespace[1].first),
                whitespace[1].first);
  if (out.kind != Kind::kJsonObject && out.kind != Kind::kJsonSchema)
    bad_request(fmt::format("'{}' applies to JSON output only (response_format json_object or "
                            "json_schema, structured_outputs json or json_object, guided_json)",
                            ws_field),
                ws_field);
  try {
    grammar::json_whitespace(whitespace[0].second);
  } catch (const grammar::GrammarError& e) {
    bad_request(fmt::format("'{}': {}", ws_field, e.what()), ws_field);
  }
  out.whitespace = std::move(whitespace[0].second);
  return out;
}

// Fields shared by both endpoints.
SamplingOptions parse_sampling_fields(const ojson& body, const GenerationDefaults& d) {
  SamplingOptions o;
  SamplingParams& p = o.params;
  p.temperature = opt_number(body, "temperature").value_or(d.temperature.value_or(1.0));
  check_range(p.temperature >= 0 && p.temperature <= 100, "temperature", "must be in [0, 100]");
  p.top_p = opt_number(body, "top_p").value_or(d.top_p.value_or(1.0));
  check_range(p.top_p > 0 && p.top_p <= 1, "top_p", "must be in (0, 1]");
  p.top_k = opt_int(body, "top_k").value_or(d.top_k.value_or(0));
  check_range(p.top_k >= -1, "top_k", "must be -1 (disabled) or at least 1");
  p.min_p = opt_number(body, "min_p").value_or(d.min_p.value_or(0.0));
  check_range(p.min_p >= 0 && p.min_p <= 1, "min_p", "must be in [0, 1]");
  p.presence_penalty = opt_number(body, "presence_penalty").value_or(0.0);
  check_range(std::abs(p.presence_penalty) <= 2, "presence_penalty", "must be in [-2, 2]");
  p.frequency_penalty = opt_number(body, "frequency_penalty").value_or(0.0);
  check_range(std::abs(p.frequency_penalty) <= 2, "frequency_penalty", "must be in [-2, 2]");
  p.repetition_penalty =
      opt_number(body, "repetition_penalty").value_or(d.repetition_penalty.value_or(1.0));
  check_range(p.repetition_penalty > 0 && p.repetition_penalty <= 2, "repetition_penalty",
              "must be in (0, 2]");
  if (const auto seed = opt_int(body, "seed")) p.seed = static_cast<uint64_t>(*seed);
  const int64_t n = opt_int(body, "n").value_or(1);
  check_range(n >= 1 && n <= 128, "n", "must be in [1, 128]");
  p.n = static_cast<int>(n);
  // max_completion_tokens is the chat API's current name; max_tokens the legacy one.
  std::optional<int64_t> max_tokens = opt_int(body, "max_completion_tokens");
  if (!max_tokens) max_tokens = opt_int(body, "max_tokens");
  if (!max_tokens) max_tokens = d.max_tokens;
  if (max_tokens) {
    check_range(
        *max_tokens >= 1,
        present_field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens",
        "must be at least 1");
    p.max_tokens = *max_tokens;
  }
  p.min_tokens = opt_int(body, "min_tokens").value_or(0);
  check_range(p.min_tokens >= 0, "min_tokens", "must be at least 0");
  if (p.max_tokens > 0)
    check_range(p.min_tokens <= p.max_tokens, "min_tokens", "must not exceed max_tokens");
  p.ignore_eos = opt_bool(body, "ignore_eos").value_or(false);
  if (const ojson* ids = present_field(body, "stop_token_ids"))
    p.stop_token_ids = int_list(*ids, "stop_token_ids");
  if (const ojson* stop = present_field(body, "stop")) {
    if (stop->is_string()) {
      o.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > kMaxStopStrings)
        bad_request(fmt::format("'stop' may hold at most {} strings (got {})", kMaxStopStrings,
                                stop->size()),
                    "stop");
      for (const ojson& s : *stop) {
        if (!s.is_string()) bad_request("'stop' must be a string or a list of strings", "stop");
        o.stop.push_back(s.get<std::string>());
      }
    } else {
      bad_request("'stop' must be a string or a list of strings", "stop");
    }
    size_t total = 0;
    for (const std::string& s : o.stop) {
      if (s.empty()) bad_request("'stop' strings must not be empty", "stop");
      total += s.size();
    }
    if (o.stop.size() > kMaxStopStrings || total > kMaxStopBytes)
      bad_request(
          fmt::format("'stop' may hold at most {} strings of {} bytes in all (got {} of {})",
                      kMaxStopStrings, kMaxStopBytes, o.stop.size(), total),
          "stop");
  }
  o.skip_special_tokens = opt_bool(body, "skip_special_tokens").value_or(true);
  o.stream = opt_bool(body, "stream").value_or(false);
  if (const ojson* so = present_field(body, "stream_options")) {
    if (!so->is_object()) bad_request("'stream_options' must be an object", "stream_options");
    if (!o.stream)
      bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
    o.include_usage = opt_bool(*so, "include_usage").value_or(false);
    o.continuous_usage = o.include_usage && opt_bool(*so, "continuous_usage_stats").value_or(false);
  }
  o.include_stop_str_in_output = opt_bool(body, "include_stop_str_in_output").value_or(false);
  parse_token_constraints(body, o);
  if (const std::optional<int64_t> k = opt_int(body, "prompt_logprobs")) {
    check_range(*k >= 0 && *k <= 20, "prompt_logprobs", "must be in [0, 20]");
    if (o.stream)
      bad_request("'prompt_logprobs' is not available when 'stream' is true", "prompt_logprobs");
    p.prompt_logprobs = static_cast<int>(*k);
  }
  // vLLM V1 draws n samples and returns them all; best_of larger than n would rank and drop.
  if (const std::optional<int64_t> best_of = opt_int(body, "best_of"))
    check_range(*best_of == p.n, "best_of", "other than n is not supported");
  reject_unsupported(body, kUnsupported);
  o.structured = parse_structured(body);
  return o;
}

std::string check_model(const ojson& body) {
  return opt_string(body, "model").value_or("");
}

// Text of a message's content: a string, null, or a list of text parts (joined with newlines,
// as vLLM does for templates that expect a string).
ojson normalise_content(const ojson& content, int index) {
  const std::string param = fmt::format("messages[{}].content", index);
  if (content.is_null() || content.is_string()) return content;
  if (!content.is_array())
    bad_request(param + " must be a string, null or a list of content parts", param);
  std::string text;
  for (const ojson& part : content) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      bad_request(param + ": each part must be an object with a 'type'", param);
    const std::string type = part["type"].get<std::string>();
    if (type != "text")
      bad_request(
          fmt::format("{}: content part type '{}' is not supported (text only)", param, type),
          param);
    if (!part.contains("text") || !part["text"].is_string())
      bad_request(param + ": a text part needs a string 'text'", param);
    if (!text.empty()) text += "\n";
    text += part["text"].get<std::string>();
  }
  return text;
}

ojson normalise_tool_calls(const ojson& calls, int index) {
  const std::string param = fmt::format("messages[{}].tool_calls", index);
  if (!calls.is_array()) bad_request(param + " must be a list", param);
  for (const ojson& c : calls) {
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
      bad_request(param + ": each call needs a 'function' object", param);
    const ojson& f = c["function"];
    if (!f.contains("name") || !f["name"].is_string())
      bad_request(param + ": each function needs a string 'name'", param);
    if (f.contains("arguments") && !f["arguments"].is_string() && !f["arguments"].is_object())
      bad_request(param + ": 'arguments' must be a JSON string or an object", param);
  }
  return calls;
}

ojson normalise_messages_impl(const ojson& messages) {
  if (!messages.is_array() || messages.empty())
    bad_request("'messages' must be a non-empty list", "messages");
  ojson out = ojson::array();
  int i = 0;
  for (const ojson& m : messages) {
    const std::string param = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad_request(param + " must be an object", param);
    if (!m.contains("role") || !m["role"].is_string())
      bad_request(param + ".role must be a string", param + ".role");
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for the system role
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      bad_request(fmt::format("{}.role '{}' is not one of system, developer, user, assistant, tool",
                              param, role),
                  param + ".role");
    ojson n = m;
    n["role"] = role;
    n["content"] = normalise_content(m.contains("content") ? m["content"] : ojson(nullptr), i);
    if (role != "assistant" && n["content"].is_null())
      bad_request(fmt::format("{}.content is required for role '{}'", param, role),
                  param + ".content");
    if (role == "assistant") {
      // vLLM's output name `reasoning` is accepted back as input, as the templates' field.
      if (m.contains("reasoning") && m["reasoning"].is_string() && !m.contains("reasoning_content"))
        n["reasoning_content"] = m["reasoning"];
      n.erase("reasoning");
      if (const ojson* calls = present_field(m, "tool_calls")) {
        n["tool_calls"] = normalise_tool_calls(*calls, i);
        if (n["tool_calls"].empty()) n.erase("tool_calls");
      }
    }
    out.push_back(std::move(n));
    ++i;
  }
  return out;
}

// A tool's `parameters` is a JSON Schema of an object (OpenAI): tool parsers read argument
// types from its `properties`, so its shape is checked here rather than trusted there.
void check_tool_parameters(const ojson& function, size_t index) {
  const ojson* params = present_field(function, "parameters");
  if (!params) return;
  const std::string param = fmt::format("tools[{}].function.parameters", index);
  if (!params->is_object()) bad_request(param + " must be a JSON Schema object", param);
  if (const ojson* type = present_field(*params, "type"); type && *type != "object")
    bad_request(param + ".type must be \"object\"", param);
  if (const ojson* props = present_field(*params, "properties")) {
    if (!props->is_object()) bad_request(param + ".properties must be an object", param);
    for (const auto& [name, schema] : props->items())
      if (!schema.is_object() && !schema.is_boolean())
        bad_request(fmt::format("{}.properties.{} must be a JSON Schema (an object)", param, name),
                    param);
  }
}

void parse_tools(const ojson& body, ChatRequest& r) {
  if (const ojson* tools = present_field(body, "tools")) {
    if (!tools->is_array()) bad_request("'tools' must be a list", "tools");
    for (size_t i = 0; i < tools->size(); ++i) {
      const ojson& t = (*tools)[i];
      if (!t.is_object() || !t.contains("function") || !t["function"].is_object() ||
          !t["function"].contains("name") || !t["function"]["name"].is_string())
        bad_request("each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                    "tools");
      if (t.contains("type") && t["type"] != "function")
        bad_request("only tools of type 'function' are supported", "tools");
      check_tool_parameters(t["function"], i);
    }
    r.tools = *tools;
  }
  const ojson* choice = present_field(body, "tool_choice");
  const bool has_tools = !r.tools.empty();
  if (!choice) {
    r.tool_choice = has_tools ? ToolChoice::kAuto : ToolChoice::kNone;
    return;
  }
  if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none")
      r.tool_choice = ToolChoice::kNone;
    else if (c == "auto")
      r.tool_choice = has_tools ? ToolChoice::kAuto : ToolChoice::kNone;
    else if (c == "required")
      r.tool_choice = ToolChoice::kRequired;
    else
      bad_request(fmt::format("'tool_choice' '{}' is not one of none, auto, required", c),
                  "tool_choice");
  } else if (choice->is_object() && choice->contains("function") &&
             (*choice)["function"].is_object() && (*choice)["function"].contains("name") &&
             (*choice)["function"]["name"].is_string()) {
    r.tool_choice = ToolChoice::kNamed;
    r.tool_name = (*choice)["function"]["name"].get<std::string>();
    bool found = false;
    for (const ojson& t : r.tools) found = found || t["function"]["name"] == r.tool_name;
    if (!found)
      bad_request(fmt::format("'tool_choice' names '{}', which is not in 'tools'", r.tool_name),
                  "tool_choice");
  } else {
    bad_request(
        "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": "
        "{\"name\": ...}}",
        "tool_choice");
  }
  if (r.tool_choice == ToolChoice::kRequired && !has_tools)
    bad_request("'tool_choice' is 'required' but no 'tools' were given", "tool_choice");
}

}  // namespace

SamplingOptions parse_sampling(const nlohmann::ordered_json& body,
                               const GenerationDefaults& defaults) {
  return parse_sampling_fields(body, defaults);
}

nlohmann::ordered_json normalise_messages(const nlohmann::ordered_json& messages) {
  return normalise_messages_impl(messages);
}

void log_ignored_fields(const nlohmann::ordered_json& body,
                        std::span<const std::string_view> known) {
  static std::mutex mu;
  static std::set<std::string, std::less<>> logged;
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& key = it.key();
    if (listed(key, known)) continue;
    std::lock_guard lock(mu);
    if (logged.insert(key).second)
      MLS_LOG_WARN("The following fields were present in the request but ignored: {{'{}'}}", key);
  }
}

std::vector<std::vector<int32_t>> bad_words_token_ids(const tok::Tokenizer& tokenizer,
                                                      const std::vector<std::string>& words) {
  std::vector<std::vector<int32_t>> out;
  for (const std::string& word : words) {
    const std::string bare = word.substr(word.find_first_not_of(' '));
    for (const std::string& text : {bare, " " + bare}) {
      std::vector<int32_t> ids = tokenizer.encode(text, false);
      if (!ids.empty() && std::find(out.begin(), out.end(), ids) == out.end())
        out.push_back(std::move(ids));
    }
  }
  return out;
}

GenerationDefaults GenerationDefaults::load(const std::filesystem::path& model_dir,
                                            const std::string& mode) {
  GenerationDefaults d;
  if (mode == "vllm") return d;
  if (mode != "auto")
    raise<InvalidArgument>("--generation-config '{}': expected auto or vllm", mode);
  const std::filesystem::path path = model_dir / "generation_config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return d;
  const std::optional<ojson> parsed =
      try_parse_json(std::string(std::istreambuf_iterator<char>(in), {}));
  if (!parsed || !parsed->is_object()) return d;
  const ojson& j = *parsed;
  const auto num = [&](const char* k) -> std::optional<double> {
    return j.contains(k) && j[k].is_number() ? std::optional(j[k].get<double>()) : std::nullopt;
  };
  // Integers as the file wrote them, when they are integers a request could have sent.
  const auto integer = [&](const char* k) -> std::optional<int64_t> {
    const std::optional<double> v = num(k);
    if (!v || std::floor(*v) != *v || std::abs(*v) >= 9e15) return std::nullopt;
    return static_cast<int64_t>(*v);
  };
  d.temperature = num("temperature");
  d.top_p = num("top_p");
  d.min_p = num("min_p");
  d.repetition_penalty = num("repetition_penalty");
  d.top_k = integer("top_k");
  d.max_tokens = integer("max_new_tokens");
  return d;
}

nlohmann::ordered_json parse_json_body(const std::string& body) {
  ojson j;
  try {
    j = parse_json<InvalidArgument>(body, "the request body");
  } catch (const InvalidArgument& e) {
    bad_request(e.what());
  }
  if (!j.is_object()) bad_request("the request body must be a JSON object");
  return j;
}

ChatRequest parse_chat_request(const nlohmann::ordered_json& body,
                               const GenerationDefaults& defaults) {
  ChatRequest r;
  r.model = check_model(body);
  if (!body.contains("messages")) bad_request("'messages' is required", "messages");
  r.sampling = parse_sampling_fields(body, defaults);
  reject_unsupported(body, kUnsupportedChat);
  parse_tools(body, r);
  r.add_special_tokens = opt_bool(body, "add_special_tokens").value_or(false);
  r.parallel_tool_calls = opt_bool(body, "parallel_tool_calls").value_or(true);
  r.include_reasoning = opt_bool(body, "include_reasoning").value_or(true);
  r.logprobs = opt_bool(body, "logprobs").value_or(false);
  const std::optional<int64_t> top = opt_int(body, "top_logprobs");
  if (top) {
    check_range(*top >= 0 && *top <= 20, "top_logprobs", "must be in [0, 20]");
    if (!r.logprobs) bad_request("'top_logprobs' requires 'logprobs': true", "top_logprobs");
  }
  if (r.logprobs) r.sampling.params.logprobs = static_cast<int>(top.value_or(0));

  ojson& t = r.template_request;
  t = ojson::object();
  t["messages"] = normalise_messages_impl(body["messages"]);
  if (!r.tools.empty()) t["tools"] = r.tools;
  t["add_generation_prompt"] = opt_bool(body, "add_generation_prompt").value_or(true);
  if (const ojson* kw = present_field(body, "chat_template_kwargs")) {
    if (!kw->is_object())
      bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    for (const auto& [k, v] : kw->items())
      if (chat::is_reserved_template_variable(k))
        bad_request(chat::reserved_kwarg_message(k), "chat_template_kwargs." + k);
    t["chat_template_kwargs"] = *kw;
  }
  if (const ojson* docs = present_field(body, "documents")) t["documents"] = *docs;
  std::vector<std::string_view> known(std::begin(kSamplingFields), std::end(kSamplingFields));
  known.insert(known.end(), std::begin(kChatFields), std::end(kChatFields));
  log_ignored_fields(body, known);
  return r;
}

CompletionRequest parse_completion_request(const nlohmann::ordered_json& body,
                                           const GenerationDefaults& defaults) {
  CompletionRequest r;
  r.model = check_model(body);
  r.sampling = parse_sampling_fields(body, defaults);
  reject_unsupported(body, kUnsupportedCompletion);
  r.echo = opt_bool(body, "echo").value_or(false);
  r.prompt_logprobs = r.sampling.params.prompt_logprobs >= 0;
  r.add_special_tokens = opt_bool(body, "add_special_tokens").value_or(true);
  r.return_token_ids = opt_bool(body, "return_token_ids");
  if (const std::optional<int64_t> lp = opt_int(body, "logprobs")) {
    check_range(*lp >= 0 && *lp <= 20, "logprobs", "must be in [0, 20]");
    r.sampling.params.logprobs = static_cast<int>(*lp);
    // echo with logprobs reports the prompt's tokens too: prompt logprobs of the same k (vLLM).
    if (r.echo)
      r.sampling.params.prompt_logprobs =
          std::max(r.sampling.params.prompt_logprobs, static_cast<int>(*lp));
  }
  std::vector<std::string_view> known(std::begin(kSamplingFields), std::end(kSamplingFields));
  known.insert(known.end(), std::begin(kCompletionFields), std::end(kCompletionFields));
  log_ignored_fields(body, known);
  const ojson* prompt = present_field(body, "prompt");
  if (!prompt) bad_request("'prompt' is required", "prompt");
  const char* shape =
      "'prompt' must be a string, a list of strings, a list of token ids or a list of token-id "
      "lists";
  const auto ids_of = [&](const ojson& list) {
    PromptInput in;
    for (const ojson& e : list) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 ||
          e.get<int64_t>() > std::numeric_limits<int32_t>::max())
        bad_request(shape, "prompt");
      in.ids.push_back(static_cast<int32_t>(e.get<int64_t>()));
    }
    return in;
  };
  if (prompt->is_string()) {
    r.prompts.push_back({prompt->get<std::string>(), {}});
  } else if (prompt->is_array() && !prompt->empty()) {
    if ((*prompt)[0].is_number()) {
      r.prompts.push_back(ids_of(*prompt));
    } else {
      for (const ojson& p : *prompt) {
        if (p.is_string())
          r.prompts.push_back({p.get<std::string>(), {}});
        else if (p.is_array() && !p.empty())
          r.prompts.push_back(ids_of(p));
        else
          bad_request(shape, "prompt");
      }
    }
  } else {
    bad_request(shape, "prompt");
  }
  for (const PromptInput& p : r.prompts)
    if (p.text && p.text->empty()) bad_request("'prompt' must not be empty", "prompt");
  return r;
}

}  // namespace mls::server
