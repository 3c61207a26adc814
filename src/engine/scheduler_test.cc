#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <numeric>

namespace mls {
namespace {

Sequence make_seq(int num_tokens, uint64_t order) {
  Sequence s;
  s.tokens.resize(num_tokens);
  std::iota(s.tokens.begin(), s.tokens.end(), 0);
  s.prompt_len = num_tokens;
  s.arrival_order = order;
  return s;
}

// A sequence that alone needs more blocks than the pool holds is dropped, not requeued: before
// this rule it went back to the head of the queue each step and blocked everyone behind it.
TEST(Scheduler, DropsAWaitingSequenceThatCanNeverFit) {
  KvBlockManager blocks(2, 4, false);  // 8 tokens in all
  Scheduler sched({.max_num_batched_tokens = 64, .max_num_seqs = 4}, blocks);
  Sequence huge = make_seq(9, 0), small = make_seq(3, 1);
  sched.add(&huge);
  sched.add(&small);
  const auto& chunks = sched.schedule();
  ASSERT_EQ(sched.unschedulable().size(), 1u);
  EXPECT_EQ(sched.unschedulable()[0], &huge);
  ASSERT_EQ(chunks.size(), 1u);  // the one behind it runs at once
  EXPECT_EQ(chunks[0].seq, &small);
  EXPECT_EQ(sched.num_waiting(), 0);
  EXPECT_EQ(sched.num_running(), 1);
}

TEST(Scheduler, DropsARunningSequenceThatOutgrowsThePool) {
  KvBlockManager blocks(2, 4, false);
  Scheduler sched({.max_num_batched_tokens = 64, .max_num_seqs = 4}, blocks);
  Sequence s = make_seq(8, 0);
  sched.add(&s);
  ASSERT_EQ(sched.schedule().size(), 1u);
  sched.commit();
  s.tokens.push_back(8);  // the next token would need a third block
  EXPECT_TRUE(sched.schedule().empty());
  ASSERT_EQ(sched.unschedulable().size(), 1u);
  EXPECT_TRUE(sched.empty());
  EXPECT_EQ(blocks.num_available(), 2);  // its blocks are back in the pool
  EXPECT_EQ(sched.preemptions(), 0);
}

// A step has at most max_logit_rows(cfg) logits rows (what the memory planner profiles): a
// prompt-scoring sequence's chunks are shortened to fit beside the others' one row each, and it
// still advances every step.
TEST(Scheduler, PromptScoringChunksStayWithinThePlannedLogitsRows) {
  KvBlockManager blocks(64, 16, true);
  const SchedulerConfig cfg{.max_num_batched_tokens = 64, .max_num_seqs = 4};
  Scheduler sched(cfg, blocks);
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
