#include "engine/sampling_params.h"

#include "core/error.h"

namespace mls {

void SamplingParams::validate(int64_t vocab_size) const {
  if (n < 1) raise<InvalidArgument>("n must be >= 1 (got {})", n);
  if (max_tokens < 0)
    raise<InvalidArgument>("max_tokens must be >= 1, or 0 for up to max_model_len (got {})",
                           max_tokens);
  if (min_tokens < 0) raise<InvalidArgument>("min_tokens must be >= 0 (got {})", min_tokens);
  if (max_tokens > 0 && min_tokens > max_tokens)
    raise<InvalidArgument>("min_tokens ({}) must not exceed max_tokens ({})", min_tokens,
                           max_tokens);
  if (!(temperature >= 0.0))
    raise<InvalidArgument>("temperature must be >= 0 (got {})", temperature);
  if (top_k < -1) raise<InvalidArgument>("top_k must be -1, 0 or >= 1 (got {})", top_k);
  if (!(top_p > 0.0 && top_p <= 1.0))
    raise<InvalidArgument>("top_p must be in (0, 1] (got {})", top_p);
  if (!(min_p >= 0.0 && min_p <= 1.0))
    raise<InvalidArgument>("min_p must be in [0, 1] (got {})", min_p);
  if (!(presence_penalty >= -2.0 && presence_penalty <= 2.0))
    raise<InvalidArgument>("presence_penalty must be in [-2, 2] (got {})", presence_penalty);
  if (!(frequency_penalty >= -2.0 && frequency_penalty <= 2.0))
    raise<InvalidArgument>("frequency_penalty must be in [-2, 2] (got {})", frequency_penalty);
  if (!(repetition_penalty > 0.0))
    raise<InvalidArgument>("repetition_penalty must be > 0 (got {})", repetition_penalty);
  for (int64_t id : stop_token_ids)
    if (id < 0 || id >= vocab_size)
      raise<InvalidArgument>("stop_token_ids: {} is outside the vocabulary of {}", id, vocab_size);
  if (logprobs < -1 || logprobs > vocab_size)
    raise<InvalidArgument>("logprobs must be in [0, {}] (got {})", vocab_size, logprobs);
  if (prompt_logprobs < -1 || prompt_logprobs > vocab_size)
    raise<InvalidArgument>("prompt_logprobs must be in [0, {}] (got {})", vocab_size,
                           prompt_logprobs);
  const auto in_vocab = [&](int64_t id) { return id >= 0 && id < vocab_size; };
  for (const auto& [id, bias] : logit_bias) {
    if (!in_vocab(id))
      raise<InvalidArgument>("logit_bias: token id {} is outside the vocabulary of {}", id,
                             vocab_size);
    if (!(bias >= -100.0f && bias <= 100.0f))
      raise<InvalidArgument>("logit_bias: the bias of token {} must be in [-100, 100] (got {})", id,
                             bias);
  }
  for (int32_t id : allowed_token_ids)
    if (!in_vocab(id))
      raise<InvalidArgument>("allowed_token_ids: {} is outside the vocabulary of {}", id,
                             vocab_size);
  for (const std::vector<int32_t>& word : bad_words_token_ids) {
    if (word.empty()) raise<InvalidArgument>("bad_words: a word produced no tokens");
    for (int32_t id : word)
      if (!in_vocab(id))
        raise<InvalidArgument>("bad_words: token {} is outside the vocabulary of {}", id,
                               vocab_size);
  }
}

}  // namespace mls
