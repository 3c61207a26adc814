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
  Scheduler sched({.max_num_batched_tokens = 64, .max_num_seqs = 4}, blocks, false);
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
  Scheduler sched({.max_num_batched_tokens = 64, .max_num_seqs = 4}, blocks, false);
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

}  // namespace
}  // namespace mls
