#include "model/forward_batch.h"

namespace mls {

int64_t ForwardBatch::num_logit_rows() const {
  int64_t n = 0;
  for (const auto& s : seqs)
    n += s.logits == SequenceChunk::Logits::kAll    ? s.num_new
         : s.logits == SequenceChunk::Logits::kLast ? 1
                                                    : 0;
  return n;
}

}  // namespace mls
