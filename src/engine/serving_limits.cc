#include "engine/serving_limits.h"

#include <fmt/format.h>

#include "core/error.h"
#include "engine/speculative_config.h"

namespace mls {

std::string ServingLimits::str() const {
  return fmt::format(
      "max_num_batched_tokens {}, max_num_seqs {}, max_model_len {}, block_size {}, "
      "num_speculative_tokens {}",
      max_num_batched_tokens, max_num_seqs, max_model_len, block_size, num_speculative_tokens);
}

ServingLimits resolve_serving_limits(const ServingLimits& requested, const io::ModelConfig& c) {
  ServingLimits l = requested;
  if (l.max_num_batched_tokens < 1)
    raise<InvalidArgument>("--max-num-batched-tokens must be >= 1 (got {})",
                           l.max_num_batched_tokens);
  if (l.max_num_seqs < 1)
    raise<InvalidArgument>("--max-num-seqs must be >= 1 (got {})", l.max_num_seqs);
  if (l.block_size < 1) raise<InvalidArgument>("--block-size must be >= 1 (got {})", l.block_size);
  if (l.num_speculative_tokens < 0 || l.num_speculative_tokens > kMaxSpeculativeTokens)
    raise<InvalidArgument>("num_speculative_tokens must be in [0, {}] (got {})",
                           kMaxSpeculativeTokens, l.num_speculative_tokens);
  if (l.max_model_len < 0)
    raise<InvalidArgument>("--max-model-len must be >= 1 (got {})", l.max_model_len);
  if (l.max_model_len > c.max_position_embeddings)
    raise<InvalidArgument>("--max-model-len {} exceeds the model's max_position_embeddings {}",
                           l.max_model_len, c.max_position_embeddings);
  if (l.max_model_len == 0) l.max_model_len = c.max_position_embeddings;
  return l;
}

}  // namespace mls
