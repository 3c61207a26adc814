#include "server/openai_protocol.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "server/errors.h"

namespace mls::server {
namespace {

using ojson = nlohmann::ordered_json;

// Deeply nested input would later recurse (template rendering, dumps) until the stack runs out;
// no legitimate request comes near this depth.
constexpr int kMaxJsonDepth = 256;

// A present, non-null field, or nullptr (OpenAI clients send null for "unset").
const ojson* field(const ojson& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> opt_number(const ojson& obj, const char* key) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad_request(fmt::format("'{}' must be a number", key), key);
  return v->get<double>();
}

std::optional<int64_t> opt_int(const ojson& obj, const char* key) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  if (v->is_number_integer()) return v->get<int64_t>();
  // 1.0 is an integer to Python's pydantic too; 1.5 is not.
  if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
      std::abs(v->get<double>()) < 9e15)
    return static_cast<int64_t>(v->get<double>());
  bad_request(fmt::format("'{}' must be an integer", key), key);
}

std::optional<bool> opt_bool(const ojson& obj, const char* key) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad_request(fmt::format("'{}' must be a boolean", key), key);
  return v->get<bool>();
}

std::optional<std::string> opt_string(const ojson& obj, const char* key) {
  const ojson* v = field(obj, key);
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

// response_format, structured_outputs and the older guided_* fields: at most one constraint.
StructuredOutput parse_structured(const ojson& body) {
  using Kind = StructuredOutput::Kind;
  std::vector<StructuredOutput> found;
  const auto add = [&](Kind kind, std::string field) -> StructuredOutput& {
    found.push_back({});
    found.back().kind = kind;
    found.back().field = std::move(field);
    return found.back();
  };
  if (const ojson* rf = field(body, "response_format")) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      bad_request("'response_format' must be an object with a 'type'", "response_format");
    const std::string type = (*rf)["type"].get<std::string>();
    if (type == "json_object") {
      add(Kind::kJsonObject, "response_format");
    } else if (type == "json_schema") {
      const ojson* js = field(*rf, "json_schema");
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
  if (const ojson* so = field(body, "structured_outputs")) {
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
      } else {
        bad_request(fmt::format("'{}' is not supported (json, regex, choice, grammar, "
                                "json_object are)",
                                param),
                    param);
      }
    }
  }
  if (const ojson* v = field(body, "guided_json"))
    add(Kind::kJsonSchema, "guided_json").schema = schema_field(*v, "guided_json");
  if (const ojson* v = field(body, "guided_regex"))
    add(Kind::kRegex, "guided_regex").text = text_field(*v, "guided_regex");
  if (const ojson* v = field(body, "guided_choice"))
    add(Kind::kChoice, "guided_choice").choices = choice_field(*v, "guided_choice");
  if (const ojson* v = field(body, "guided_grammar"))
    add(Kind::kGrammar, "guided_grammar").text = text_field(*v, "guided_grammar");
  if (found.size() > 1)
    bad_request(fmt::format("'{}' and '{}' both constrain the output; give only one",
                            found[0].field, found[1].field),
                found[1].field);
  return found.empty() ? StructuredOutput{} : std::move(found[0]);
}

// Fields shared by both endpoints.
SamplingOptions parse_sampling(const ojson& body, const GenerationDefaults& d) {
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
    check_range(*max_tokens >= 1,
                field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens",
                "must be at least 1");
    p.max_tokens = *max_tokens;
  }
  p.min_tokens = opt_int(body, "min_tokens").value_or(0);
  check_range(p.min_tokens >= 0, "min_tokens", "must be at least 0");
  if (p.max_tokens > 0)
    check_range(p.min_tokens <= p.max_tokens, "min_tokens", "must not exceed max_tokens");
  p.ignore_eos = opt_bool(body, "ignore_eos").value_or(false);
  if (const ojson* ids = field(body, "stop_token_ids"))
    p.stop_token_ids = int_list(*ids, "stop_token_ids");
  if (const ojson* stop = field(body, "stop")) {
    if (stop->is_string()) {
      o.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const ojson& s : *stop) {
        if (!s.is_string()) bad_request("'stop' must be a string or a list of strings", "stop");
        o.stop.push_back(s.get<std::string>());
      }
    } else {
      bad_request("'stop' must be a string or a list of strings", "stop");
    }
    for (const std::string& s : o.stop)
      if (s.empty()) bad_request("'stop' strings must not be empty", "stop");
  }
  o.skip_special_tokens = opt_bool(body, "skip_special_tokens").value_or(true);
  o.stream = opt_bool(body, "stream").value_or(false);
  if (const ojson* so = field(body, "stream_options")) {
    if (!so->is_object()) bad_request("'stream_options' must be an object", "stream_options");
    if (!o.stream)
      bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
    o.include_usage = opt_bool(*so, "include_usage").value_or(false);
  }
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

ojson normalise_messages(const ojson& messages) {
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
      if (const ojson* calls = field(m, "tool_calls")) {
        n["tool_calls"] = normalise_tool_calls(*calls, i);
        if (n["tool_calls"].empty()) n.erase("tool_calls");
      }
    }
    out.push_back(std::move(n));
    ++i;
  }
  return out;
}

void parse_tools(const ojson& body, ChatRequest& r) {
  if (const ojson* tools = field(body, "tools")) {
    if (!tools->is_array()) bad_request("'tools' must be a list", "tools");
    for (const ojson& t : *tools) {
      if (!t.is_object() || !t.contains("function") || !t["function"].is_object() ||
          !t["function"].contains("name") || !t["function"]["name"].is_string())
        bad_request("each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                    "tools");
      if (t.contains("type") && t["type"] != "function")
        bad_request("only tools of type 'function' are supported", "tools");
    }
    r.tools = *tools;
  }
  const ojson* choice = field(body, "tool_choice");
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

GenerationDefaults GenerationDefaults::load(const std::filesystem::path& model_dir,
                                            const std::string& mode) {
  GenerationDefaults d;
  if (mode == "vllm") return d;
  if (mode != "auto")
    raise<InvalidArgument>("--generation-config '{}': expected auto or vllm", mode);
  const std::filesystem::path path = model_dir / "generation_config.json";
  std::ifstream in(path);
  if (!in) return d;
  const ojson j = ojson::parse(in, nullptr, false);
  if (!j.is_object()) return d;
  const auto num = [&](const char* k) -> std::optional<double> {
    return j.contains(k) && j[k].is_number() ? std::optional(j[k].get<double>()) : std::nullopt;
  };
  d.temperature = num("temperature");
  d.top_p = num("top_p");
  d.min_p = num("min_p");
  d.repetition_penalty = num("repetition_penalty");
  if (const auto k = num("top_k")) d.top_k = static_cast<int64_t>(*k);
  if (const auto m = num("max_new_tokens")) d.max_tokens = static_cast<int64_t>(*m);
  return d;
}

nlohmann::ordered_json parse_json_body(const std::string& body) {
  const ojson::parser_callback_t limit_depth = [](int depth, ojson::parse_event_t, ojson&) {
    if (depth > kMaxJsonDepth)
      bad_request(fmt::format("the request body nests JSON deeper than {} levels", kMaxJsonDepth));
    return true;
  };
  ojson j = ojson::parse(body, limit_depth, false);
  if (j.is_discarded()) bad_request("the request body is not valid JSON");
  if (!j.is_object()) bad_request("the request body must be a JSON object");
  return j;
}

ChatRequest parse_chat_request(const nlohmann::ordered_json& body,
                               const GenerationDefaults& defaults) {
  ChatRequest r;
  r.model = check_model(body);
  if (!body.contains("messages")) bad_request("'messages' is required", "messages");
  r.sampling = parse_sampling(body, defaults);
  parse_tools(body, r);
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
  t["messages"] = normalise_messages(body["messages"]);
  if (!r.tools.empty()) t["tools"] = r.tools;
  t["add_generation_prompt"] = opt_bool(body, "add_generation_prompt").value_or(true);
  if (const ojson* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object())
      bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    t["chat_template_kwargs"] = *kw;
  }
  if (const ojson* docs = field(body, "documents")) t["documents"] = *docs;
  return r;
}

CompletionRequest parse_completion_request(const nlohmann::ordered_json& body,
                                           const GenerationDefaults& defaults) {
  CompletionRequest r;
  r.model = check_model(body);
  r.sampling = parse_sampling(body, defaults);
  r.echo = opt_bool(body, "echo").value_or(false);
  r.add_special_tokens = opt_bool(body, "add_special_tokens").value_or(true);
  if (const std::optional<int64_t> lp = opt_int(body, "logprobs")) {
    check_range(*lp >= 0 && *lp <= 20, "logprobs", "must be in [0, 20]");
    r.sampling.params.logprobs = static_cast<int>(*lp);
  }
  const ojson* prompt = field(body, "prompt");
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
