#include "engine/simple_generator.h"

#include <algorithm>

#include "core/error.h"

namespace mls {

static int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

GreedyResult generate_greedy(ModelRunner& runner, std::span<const int32_t> prompt,
                             int64_t max_tokens, std::span<const int64_t> stop_ids,
                             bool keep_logits) {
  if (prompt.empty()) raise<InvalidArgument>("the prompt must hold at least one token");
  const int64_t vocab = runner.config().vocab_size;
  const int64_t capacity = static_cast<int64_t>(prompt.size()) + std::max<int64_t>(max_tokens, 1);
  runner.allocate_kv_cache(1, capacity);

  GreedyResult r;
  ForwardBatch batch;
  batch.token_ids.assign(prompt.begin(), prompt.end());
  const auto n = static_cast<int64_t>(prompt.size());
  batch.seqs.push_back({.num_cached = 0, .num_new = n, .block_table = {0}, .prompt_len = n});
  for (int64_t step = 0; step < max_tokens; ++step) {
    Tensor logits = runner.forward(batch);
    const float* row = logits.data<float>();
    const int32_t next = argmax(row, vocab);
    r.output_ids.push_back(next);
    if (keep_logits) r.step_logits.emplace_back(row, row + vocab);
    if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) break;
    SequenceChunk& sc = batch.seqs[0];
    sc.num_cached += sc.num_new;
    sc.num_new = 1;
    batch.token_ids.assign(1, next);
  }
  return r;
}

}  // namespace mls
