#include "engine/model_runner.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "core/error.h"
#include "test_data.h"

namespace mls {
namespace {

// A failed load must surface as the loader's error, with every rank thread shut down.
TEST(ModelRunner, LoadErrorsPropagateFromEveryRankCount) {
  for (int tp : {1, 4})
    EXPECT_THROW(ModelRunner({.model = "/nonexistent/model", .tensor_parallel_size = tp}),
                 ConfigError);
  EXPECT_THROW(ModelRunner({.model = kTestData.string() + "/tiny-glm5", .tensor_parallel_size = 3}),
               ConfigError);  // 8 heads do not split over 3 ranks
}

TEST(ModelRunner, ForwardNeedsACacheAndValidIds) {
  ModelRunner runner({.model = kTestData.string() + "/tiny-dsv3"});
  ForwardBatch b;
  b.token_ids = {5};
  b.seqs.push_back({.num_new = 1, .block_table = {0}});
  EXPECT_THROW(runner.forward(b), InternalError);
  runner.allocate_kv_cache(1, 4);
  b.token_ids = {5000};
  EXPECT_THROW(runner.forward(b), InvalidArgument);
  b.token_ids = {5};
  EXPECT_EQ(runner.forward(b).dim(1), 1024);
}

// Batch invariance loads where every kernel a token meets keeps its bits whatever the step: the
// CPU, and a GPU's bf16 models. A GPU's block-FP8 model is refused at load, naming the reason
// (meta runners of the GPU kind need no GPU).
TEST(ModelRunner, BatchInvarianceRefusesBlockFp8OnTheGpu) {
  const std::string fp8 = kTestData.string() + "/tiny-glm5-fp8";
  EXPECT_TRUE(ModelRunner({.model = fp8, .batch_invariant = true}).batch_invariant());
  EXPECT_TRUE(ModelRunner({.model = kTestData.string() + "/tiny-glm5",
                           .device = Device::cuda(0),
                           .meta = true,
                           .batch_invariant = true})
                  .batch_invariant());
  try {
    ModelRunner({.model = fp8, .device = Device::cuda(0), .meta = true, .batch_invariant = true});
    ADD_FAILURE() << "a block-FP8 model loaded with batch invariance on the GPU";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("block-FP8"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(
      ModelRunner({.model = fp8, .device = Device::cuda(0), .meta = true}).batch_invariant());
}

// forward_sample's `meanwhile` runs once a step on the calling thread, and what it throws reaches
// the caller after every rank is done with the step (the ranks hold the job by reference): the
// runner then steps as before.
TEST(ModelRunner, MeanwhileRunsOnTheCallerAndItsErrorWaitsForTheRanks) {
  for (int tp : {1, 2}) {
    ModelRunner runner({.model = kTestData.string() + "/tiny-dsv3", .tensor_parallel_size = tp});
    runner.allocate_kv_cache(1, 4);
    ForwardBatch b;
    b.token_ids = {5};
    b.seqs.push_back({.num_new = 1, .block_table = {0}});
    const std::vector<ops::RowSampling> rows(1);
    const std::thread::id caller = std::this_thread::get_id();
    int calls = 0;
    const SampledRows first = runner.forward_sample(b, rows, nullptr, nullptr, false, [&] {
      ++calls;
      EXPECT_EQ(std::this_thread::get_id(), caller);
    });
    EXPECT_EQ(calls, 1) << "tp " << tp;
    EXPECT_THROW(runner.forward_sample(b, rows, nullptr, nullptr, false,
                                       [] { throw InvalidArgument("from meanwhile"); }),
                 InvalidArgument);
    EXPECT_EQ(runner.forward_sample(b, rows).ids, first.ids) << "tp " << tp;
  }
}

}  // namespace
}  // namespace mls
