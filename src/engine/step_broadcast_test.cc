#include "engine/step_broadcast.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace mls {
namespace {

bool same(const ForwardBatch& a, const ForwardBatch& b) {
  if (a.token_ids != b.token_ids || a.seqs.size() != b.seqs.size()) return false;
  for (size_t i = 0; i < a.seqs.size(); ++i) {
    const SequenceChunk &x = a.seqs[i], &y = b.seqs[i];
    if (x.num_cached != y.num_cached || x.num_new != y.num_new || x.prompt_len != y.prompt_len ||
        x.logits != y.logits || x.block_table != y.block_table)
      return false;
  }
  return true;
}

TEST(StepBroadcast, ForwardCommandsRoundTrip) {
  RunnerCommand in{.op = RunnerOp::kForward, .batch = {}, .observe = true, .args = {}};
  in.batch.token_ids = {0, 151000, 7, 1023, 5};
  // Block tables out of order and far apart (prefix cache reuse, preemption).
  in.batch.seqs.push_back({.num_cached = 0,
                           .num_new = 3,
                           .block_table = {9, 3, 2147483647, 0},
                           .prompt_len = 3,
                           .logits = SequenceChunk::Logits::kAll});
  in.batch.seqs.push_back({.num_cached = 100000, .num_new = 0, .block_table = {}});
  in.batch.seqs.push_back({.num_cached = 64,
                           .num_new = 2,
                           .block_table = {5, 6},
                           .prompt_len = 0,
                           .logits = SequenceChunk::Logits::kNone});
  std::vector<uint8_t> wire;
  encode(in, wire);
  RunnerCommand out;
  out.args = {1, 2};
  decode(wire, out);
  EXPECT_EQ(out.op, RunnerOp::kForward);
  EXPECT_TRUE(out.observe);
  EXPECT_TRUE(out.args.empty());
  EXPECT_TRUE(same(in.batch, out.batch));
}

// The MTP layer's steps carry their batch and each token's carry row; a speculative target
// step says it keeps its hidden states.
TEST(StepBroadcast, MtpAndKeepHiddenCommandsRoundTrip) {
  RunnerCommand in{.op = RunnerOp::kForwardMtp, .batch = {}, .observe = false, .args = {4, 0, 9}};
  in.batch.token_ids = {17, 2, 151000};
  in.batch.seqs.push_back({.num_cached = 30,
                           .num_new = 2,
                           .block_table = {3, 1},
                           .prompt_len = 20,
                           .logits = SequenceChunk::Logits::kLast});
  in.batch.seqs.push_back({.num_cached = 7,
                           .num_new = 1,
                           .block_table = {8},
                           .prompt_len = 7,
                           .logits = SequenceChunk::Logits::kNone});
  std::vector<uint8_t> wire;
  encode(in, wire);
  RunnerCommand out;
  decode(wire, out);
  EXPECT_EQ(out.op, RunnerOp::kForwardMtp);
  EXPECT_EQ(out.args, in.args);
  EXPECT_TRUE(same(in.batch, out.batch));
  in.op = RunnerOp::kForward;
  in.args = {1};
  in.batch.seqs[0].logits = SequenceChunk::Logits::kAll;
  encode(in, wire);
  decode(wire, out);
  EXPECT_EQ(out.op, RunnerOp::kForward);
  EXPECT_EQ(out.args, std::vector<int64_t>{1});
  EXPECT_TRUE(same(in.batch, out.batch));
}

TEST(StepBroadcast, ArgumentsRoundTripAndForwardStateIsCleared) {
  RunnerCommand in{.op = RunnerOp::kSetLimits,
                   .batch = {},
                   .observe = false,
                   .args = {-1, 0, INT64_MAX, INT64_MIN, 1 << 20}};
  std::vector<uint8_t> wire;
  encode(in, wire);
  RunnerCommand out{.op = RunnerOp::kForward, .batch = {}, .observe = true, .args = {}};
  out.batch.token_ids = {1};
  out.batch.seqs.resize(1);
  decode(wire, out);
  EXPECT_EQ(out.op, RunnerOp::kSetLimits);
  EXPECT_EQ(out.args, in.args);
  EXPECT_FALSE(out.observe);
  EXPECT_TRUE(out.batch.seqs.empty() && out.batch.token_ids.empty());
}

// The serving step at max_num_seqs: 256 decodes at 2,047 cached tokens, block size 64, ids of a
// 150k vocabulary: at most 48 bytes per sequence (its 32 block ids take one byte each).
TEST(StepBroadcast, DecodeStepOf256SequencesIsCompact) {
  RunnerCommand in{.op = RunnerOp::kForward, .batch = {}, .observe = false, .args = {}};
  for (int s = 0; s < 256; ++s) {
    SequenceChunk c{.num_cached = 2047, .num_new = 1, .block_table = {}, .prompt_len = 1000};
    for (int b = 0; b < 32; ++b) c.block_table.push_back(s * 32 + b);
    in.batch.seqs.push_back(std::move(c));
    in.batch.token_ids.push_back(150000 - s);
  }
  std::vector<uint8_t> wire;
  encode(in, wire);
  EXPECT_LE(wire.size(), 256u * 48);
  RunnerCommand out;
  decode(wire, out);
  EXPECT_TRUE(same(in.batch, out.batch));
}

TEST(StepBroadcast, MalformedBytesAreRejected) {
  RunnerCommand in{.op = RunnerOp::kForward, .batch = {}, .observe = false, .args = {}};
  in.batch.token_ids = {3, 4};
  in.batch.seqs.push_back({.num_new = 2, .block_table = {0}});
  std::vector<uint8_t> wire;
  encode(in, wire);
  RunnerCommand out;
  for (size_t n = 0; n < wire.size(); ++n)
    EXPECT_THROW(decode(std::span(wire).first(n), out), InternalError) << n;
  wire.push_back(0);
  EXPECT_THROW(decode(wire, out), InternalError);
  EXPECT_THROW(decode(std::vector<uint8_t>{200}, out), InternalError);
  in.batch.token_ids.pop_back();
  EXPECT_THROW(encode(in, wire), InternalError);
}

}  // namespace
}  // namespace mls
