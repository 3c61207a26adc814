// What one forward step computes: new tokens of several sequences, laid out sequence after
// sequence, each continuing from `num_cached` tokens already in the paged cache.
#pragma once

#include <cstdint>
#include <vector>

namespace mls {

struct SequenceChunk {
  int64_t num_cached = 0;            // tokens of this sequence already in the cache
  int64_t num_new = 0;               // tokens of this sequence in this step
  std::vector<int32_t> block_table;  // cache blocks covering positions [0, num_cached + num_new)
  // Length of the request's original prompt (0: num_cached + num_new). DSA top-k rows of prompt
  // tokens span the whole prompt, as in the reference's one-pass prefill, whatever the chunking.
  int64_t prompt_len = 0;
  // Which new tokens produce logits: none, the last one (generation) or all (scoring).
  enum class Logits { kNone, kLast, kAll } logits = Logits::kLast;
};

struct ForwardBatch {
  std::vector<int32_t> token_ids;  // Σ num_new, sequence-major
  std::vector<SequenceChunk> seqs;

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int64_t num_logit_rows() const;
};

}  // namespace mls
