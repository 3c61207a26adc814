// Token logprobs in the two OpenAI shapes: chat ({"content": [{token, logprob, bytes,
// top_logprobs}]}) and legacy completions ({tokens, token_logprobs, top_logprobs, text_offset}).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/request.h"
#include "tokenizer/tokenizer.h"

namespace mls::server {

// The text of one token ("" for ids the tokenizer does not know).
std::string token_string(const tok::Tokenizer& tok, int32_t id);
// JSON cannot hold -inf; vLLM reports -9999.0 instead.
double finite_logprob(float lp);

nlohmann::json chat_logprob_entries(const tok::Tokenizer& tok, const std::vector<Logprobs>& lps);

// vLLM's prompt_logprobs: null for the first prompt token, then per position a map from token id
// (as a string) to {logprob, rank, decoded_token} holding the prompt's token and the top k.
// `lps[i]` scores prompt_ids[i + 1].
nlohmann::json prompt_logprob_entries(const tok::Tokenizer& tok,
                                      const std::vector<int32_t>& prompt_ids,
                                      const std::vector<Logprobs>& lps);

// Appends to a completions logprobs object (created on first use); `offset` is the text
// offset of the first token and advances.
void append_completion_logprobs(const tok::Tokenizer& tok, const std::vector<Logprobs>& lps,
                                nlohmann::json& obj, int64_t& offset);
// The prompt's tokens for echo with logprobs: the first has null logprob and top_logprobs, the
// others `lps[i - 1]`.
void append_completion_prompt_logprobs(const tok::Tokenizer& tok,
                                       const std::vector<int32_t>& prompt_ids,
                                       const std::vector<Logprobs>& lps, nlohmann::json& obj,
                                       int64_t& offset);

}  // namespace mls::server
