// Per-request sampling and stopping parameters (OpenAI / vLLM field names and semantics).
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace mls {

struct SamplingParams {
  int n = 1;                     // parallel samples of one prompt
  int64_t max_tokens = 0;        // 0: up to max_model_len
  int64_t min_tokens = 0;        // EOS and stop ids are suppressed before this many tokens
  double temperature = 1.0;      // 0: greedy
  int64_t top_k = 0;             // 0 or -1: all tokens
  double top_p = 1.0;            // nucleus mass in (0, 1]
  double min_p = 0.0;            // drop tokens below min_p · p(max)
  std::optional<uint64_t> seed;  // fixed seed: the same tokens whatever else is batched
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  double repetition_penalty = 1.0;
  std::vector<int64_t> stop_token_ids;
  bool ignore_eos = false;
  int logprobs = -1;  // -1: none; k >= 0: the sampled token's logprob plus the top k
  // -1: none; k >= 0: each prompt token's logprob (positions 1..) plus the top k.
  int prompt_logprobs = -1;
  // Added to the logits before sampling (OpenAI's logit_bias: token id -> [-100, 100]).
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::vector<int32_t> allowed_token_ids;  // empty: every token; otherwise only these
  // vLLM's bad_words as token sequences: the last token of a sequence is banned whenever the
  // output ends with the tokens before it (a one-token sequence is always banned).
  std::vector<std::vector<int32_t>> bad_words_token_ids;

  bool greedy() const { return temperature < 1e-5; }
  // Throws InvalidArgument naming the first bad field and why.
  void validate(int64_t vocab_size) const;
};

}  // namespace mls
