// Parsing and validation of OpenAI request bodies (/v1/completions, /v1/chat/completions) into
// typed requests. Every malformed input becomes an ApiError 400 that names the field, so that
// nothing downstream sees an unchecked value; the engine re-validates ranges it owns. Every
// field is honoured, rejected with a 400 when set to what the server cannot do, or (unknown
// fields) ignored and logged once; docs/server.md lists them all.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampling_params.h"
#include "engine/token_constraint.h"
#include "tokenizer/tokenizer.h"

namespace mls::server {

// A present, non-null field of a request object, or nullptr (OpenAI clients send null for
// "unset").
const nlohmann::ordered_json* present_field(const nlohmann::ordered_json& obj, const char* key);

// Sampling defaults from the model's generation_config.json (`--generation-config auto`), used
// when a request leaves the field out, as vLLM does.
struct GenerationDefaults {
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int64_t> top_k, max_tokens;

  // `mode` "auto" reads DIR/generation_config.json when present; "vllm" uses none.
  static GenerationDefaults load(const std::filesystem::path& model_dir, const std::string& mode);
};

// A structured-output request as the client wrote it (response_format, structured_outputs or
// guided_*), compiled by the handler into the request's token constraint.
struct StructuredOutput {
  enum class Kind { kNone, kJsonObject, kJsonSchema, kRegex, kChoice, kGrammar };
  Kind kind = Kind::kNone;
  nlohmann::ordered_json schema;     // kJsonSchema
  std::string text;                  // kRegex, kGrammar (GBNF)
  std::vector<std::string> choices;  // kChoice
  std::string field;                 // the request field it came from (named in errors)
  std::string whitespace;  // kJsonObject, kJsonSchema: guided_whitespace_pattern ("": default)
};

struct SamplingOptions {
  SamplingParams params;  // max_tokens 0: up to max_model_len
  std::vector<std::string> stop;
  std::vector<std::string> bad_words;  // tokenized into params.bad_words_token_ids on submit
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool continuous_usage = false;  // stream_options.continuous_usage_stats (with include_usage)
  StructuredOutput structured;
  std::shared_ptr<const TokenConstraint> constraint;  // set by the handler from `structured`
};

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ChatRequest {
  std::string model;  // "" when the client left it out
  // messages (normalised: text parts joined, reasoning -> reasoning_content), tools,
  // chat_template_kwargs and add_generation_prompt, ready for chat::render_chat.
  nlohmann::ordered_json template_request;
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  ToolChoice tool_choice = ToolChoice::kNone;
  std::string tool_name;  // kNamed
  bool parallel_tool_calls = true;
  bool include_reasoning = true;
  bool logprobs = false;
  bool add_special_tokens = false;  // vLLM's default for chat: the template adds them
  SamplingOptions sampling;
};

struct PromptInput {
  std::optional<std::string> text;  // tokenized by the server when set
  std::vector<int32_t> ids;         // otherwise the client's token ids
};

struct CompletionRequest {
  std::string model;
  std::vector<PromptInput> prompts;
  bool echo = false;
  bool add_special_tokens = true;
  bool prompt_logprobs = false;  // asked explicitly (echo with logprobs scores the prompt too)
  // vLLM's return_token_ids (choices carry prompt_token_ids and token_ids); unset: the server's
  // default (on without a tokenizer, where ids are the whole output).
  std::optional<bool> return_token_ids;
  SamplingOptions sampling;
};

// A JSON object from a request body (400 on malformed JSON or a non-object).
nlohmann::ordered_json parse_json_body(const std::string& body);

ChatRequest parse_chat_request(const nlohmann::ordered_json& body,
                               const GenerationDefaults& defaults);
CompletionRequest parse_completion_request(const nlohmann::ordered_json& body,
                                           const GenerationDefaults& defaults);

// The sampling fields every endpoint shares (temperature, top_p, stop, logit_bias, ...).
SamplingOptions parse_sampling(const nlohmann::ordered_json& body,
                               const GenerationDefaults& defaults);
// Chat messages normalised for the template (400 naming messages[i].field).
nlohmann::ordered_json normalise_messages(const nlohmann::ordered_json& messages);

// Fields of `body` outside `known` are ignored: each name is logged once per process (vLLM).
void log_ignored_fields(const nlohmann::ordered_json& body,
                        std::span<const std::string_view> known);

// bad_words as vLLM tokenizes them: each word with and without a leading space, without special
// tokens; duplicates once.
std::vector<std::vector<int32_t>> bad_words_token_ids(const tok::Tokenizer& tokenizer,
                                                      const std::vector<std::string>& words);

}  // namespace mls::server
