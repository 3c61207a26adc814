#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

namespace mls {
namespace {

TEST(ThreadPool, CoversRangeExactlyOnce) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(1000);
  pool.parallel_for(1000, 7, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i]++;
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPool, ConcurrentCallersAndExceptions) {
  ThreadPool pool(3);
  std::vector<std::thread> callers;
  std::atomic<int64_t> sum = 0;
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int r = 0; r < 50; ++r)
        pool.parallel_for(100, 1, [&](int64_t b, int64_t e) { sum += e - b; });
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(sum.load(), 4 * 50 * 100);
  EXPECT_THROW(pool.parallel_for(10, 1, [](int64_t, int64_t) { throw std::runtime_error("x"); }),
               std::runtime_error);
}

}  // namespace
}  // namespace mls
