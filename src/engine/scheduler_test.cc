#include "engine/scheduler.h"

#include <gtest/gtest.h>

namespace mls {
namespace {

// A step has at most max_logit_rows(cfg) logits rows (what the memory planner profiles): a
// prompt-scoring sequence's chunks are shortened to fit beside the others' one row each, and it
// still advances every step.
TEST(Scheduler, PromptScoringChunksStayWithinThePlannedLogitsRows) {
  KvBlockManager blocks(64, 16, true);
  const SchedulerConfig cfg{.max_num_batched_tokens = 64, .max_num_seqs = 4};
  Scheduler sched(cfg, blocks, false);
  Sequence a, b, scored;
  for (Sequence* s : {&a, &b, &scored}) {
    s->tokens.assign(s == &scored ? 50 : 10, 7);
    s->prompt_len = static_cast<int64_t>(s->tokens.size());
    sched.add(s);
  }
  scored.prompt_logits = true;
  int steps = 0;
  while (scored.num_computed < scored.prompt_len) {
    ASSERT_LT(++steps, 100);
    const std::vector<ScheduledChunk> chunks = sched.schedule();
    int64_t rows = 0, scored_new = 0;
    for (const ScheduledChunk& c : chunks) {
      const bool ends =
          c.seq->num_computed + c.num_new == static_cast<int64_t>(c.seq->tokens.size());
      rows += c.seq->chunk_has_all_logits() ? c.num_new : ends ? 1 : 0;
      if (c.seq == &scored) scored_new = c.num_new;
    }
    EXPECT_LE(rows, max_logit_rows(cfg)) << "step " << steps;
    EXPECT_GE(scored_new, 1) << "step " << steps;
    sched.commit();
    for (const ScheduledChunk& c : chunks)  // decode: each finished chunk gets its next token
      if (c.seq->num_computed == static_cast<int64_t>(c.seq->tokens.size()))
        c.seq->tokens.push_back(7);
  }
  EXPECT_GT(steps, 12);  // 50 positions at no more than 4 rows a step, others decoding beside
}

}  // namespace
}  // namespace mls
