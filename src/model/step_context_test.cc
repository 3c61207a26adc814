// The step's index tables on the host: block tables at a fixed shape and address.
#include "model/step_context.h"

#include <gtest/gtest.h>

namespace mls {
namespace {

ForwardBatch decode_batch(int64_t seqs, int64_t context, int64_t bs) {
  ForwardBatch b;
  for (int64_t s = 0; s < seqs; ++s) {
    SequenceChunk c;
    c.num_cached = context - 1;
    c.num_new = 1;
    for (int64_t i = 0; i < (context + bs - 1) / bs; ++i)
      c.block_table.push_back(static_cast<int32_t>(100 * s + i));
    b.seqs.push_back(std::move(c));
    b.token_ids.push_back(1);
  }
  return b;
}

// With serving limits the block tables have one shape and one address (the step workspace's
// start) whatever the batch, what CUDA graph replay needs; the rows and columns in use hold the
// batch's tables.
TEST(StepContext, BlockTablesKeepTheirShapeAndAddressAcrossBatchSizes) {
  CpuAllocator alloc;
  alloc.reserve_step_workspace(int64_t{1} << 20);
  const int64_t bs = 4;
  const StepContext::TableShape fixed{.rows = 8, .cols = 16};  // 8 seqs, max_model_len 64
  const void* address = nullptr;
  for (const auto& [seqs, context] : {std::pair<int64_t, int64_t>{1, 3}, {8, 64}, {3, 17}}) {
    SCOPED_TRACE(seqs);
    const ForwardBatch b = decode_batch(seqs, context, bs);
    Allocator::StepScope scope(alloc);
    {
      const StepContext step(b, bs, fixed, 0, seqs, alloc);
      EXPECT_EQ(step.block_tables.shape(), (Shape{8, 16}));
      if (!address) address = step.block_tables.raw();
      EXPECT_EQ(step.block_tables.raw(), address);
      const int64_t blocks = (context + bs - 1) / bs;
      for (int64_t s = 0; s < seqs; ++s)
        for (int64_t i = 0; i < blocks; ++i)
          EXPECT_EQ(step.block_tables.data<int32_t>()[s * 16 + i], 100 * s + i);
    }
    scope.close();
  }
  // A batch past the fixed shape is a bug of the scheduler above: refused.
  Allocator::StepScope scope(alloc);
  EXPECT_THROW(StepContext(decode_batch(9, 3, bs), bs, fixed, 0, 9, alloc), InternalError);
  EXPECT_THROW(StepContext(decode_batch(1, 65, bs), bs, fixed, 0, 1, alloc), InternalError);
  scope.close();
}

// Without limits (tools, tests) the tables are the batch's own size.
TEST(StepContext, BlockTablesSizedToTheBatchWithoutLimits) {
  CpuAllocator alloc;
  Allocator::StepScope scope(alloc);
  {
    const StepContext step(decode_batch(3, 17, 4), 4, {}, 0, 3, alloc);
    EXPECT_EQ(step.block_tables.shape(), (Shape{3, 5}));
  }
  scope.close();
}

// The host staging a rank binds (sized once from the limits) is the memory every step writes:
// its addresses never change across steps of any size within the limits, and the device tables
// hold what it staged.
TEST(StepContext, StepsReuseTheBoundStagingAtFixedAddresses) {
  CpuAllocator alloc;
  alloc.reserve_step_workspace(int64_t{1} << 20);
  const int64_t bs = 4;
  const StepContext::TableShape fixed{.rows = 8, .cols = 16};
  StepStaging staging;
  staging.reserve(/*tokens=*/32, fixed.rows, fixed.cols, /*pinned=*/false);
  EXPECT_EQ(staging.bytes(), StepStaging::bytes_for(32, 8, 16));
  StepStaging::bind(&staging);
  const void* index = staging.index.data<void>();
  const void* tables = staging.tables.data<void>();
  for (const auto& [seqs, context] : {std::pair<int64_t, int64_t>{1, 3}, {8, 64}, {3, 17}}) {
    SCOPED_TRACE(seqs);
    const ForwardBatch b = decode_batch(seqs, context, bs);
    Allocator::StepScope scope(alloc);
    {
      const StepContext step(b, bs, fixed, 0, seqs, alloc);
      EXPECT_EQ(staging.index.data<void>(), index);
      EXPECT_EQ(staging.tables.data<void>(), tables);
      for (int64_t s = 0; s < seqs; ++s) {
        EXPECT_EQ(step.positions.data<int32_t>()[s], context - 1);
        EXPECT_EQ(step.token_seq.data<int32_t>()[s], s);
        EXPECT_EQ(staging.index.data<int32_t>()[s], context - 1);  // positions come first
      }
    }
    scope.close();
  }
  StepStaging::bind(nullptr);
}

// A graph step (StepStaging::full_reach_keys) uploads the tables' rows in use whole, zeros past
// each sequence's blocks, and plans for the given keys whatever the contexts.
TEST(StepContext, GraphStepsUploadWholeRowsAndPlanForTheFullReach) {
  CpuAllocator alloc;
  alloc.reserve_step_workspace(int64_t{1} << 20);
  const int64_t bs = 4;
  const StepContext::TableShape fixed{.rows = 8, .cols = 16};
  StepStaging staging;
  staging.reserve(32, fixed.rows, fixed.cols, false);
  StepStaging::bind(&staging);
  Allocator::StepScope scope(alloc);
  {
    const StepContext eager(decode_batch(2, 9, bs), bs, fixed, 0, 2, alloc);
    EXPECT_EQ(eager.max_keys, 9);
  }
  staging.full_reach_keys = 61;
  {
    // Poison the rows' tails: a graph step rewrites the whole row.
    std::fill_n(staging.tables.data<int32_t>(), 2 * 16, 7);
    const StepContext graph(decode_batch(2, 9, bs), bs, fixed, 0, 2, alloc);
    EXPECT_EQ(graph.max_keys, 61);
    for (int64_t s = 0; s < 2; ++s)
      for (int64_t i = 0; i < 16; ++i)
        EXPECT_EQ(graph.block_tables.data<int32_t>()[s * 16 + i], i < 3 ? 100 * s + i : 0);
  }
  staging.full_reach_keys = 0;
  scope.close();
  StepStaging::bind(nullptr);
}

// Without a bound staging (a Model driven directly) a thread's own grows to what its steps need.
TEST(StepContext, UnboundStagingGrowsWithTheSteps) {
  CpuAllocator alloc;
  StepStaging& own = StepStaging::current();
  for (const int64_t seqs : {1, 40}) {
    Allocator::StepScope scope(alloc);
    { const StepContext step(decode_batch(seqs, 17, 4), 4, {}, 0, seqs, alloc); }
    scope.close();
    EXPECT_GE(own.index.bytes(), 4 * StepContext::index_elems(decode_batch(seqs, 17, 4), seqs));
    EXPECT_GE(own.tables.bytes(), 4 * seqs * 5);
  }
}

}  // namespace
}  // namespace mls
