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

}  // namespace
}  // namespace mls
