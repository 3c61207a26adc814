#include "parallel/in_process_communicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <thread>

#include "core/error.h"

namespace mls {
namespace {

// Runs fn(rank, comm) on `n` threads, one per rank.
void run_ranks(int n, const std::function<void(int, Communicator&)>& fn) {
  auto group = make_in_process_group(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { fn(r, *group[r]); });
  for (auto& t : threads) t.join();
}

float value(int rank, int64_t i) {
  return static_cast<float>(rank * 1000 + i) * 0.5f;
}

class Collectives : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(Collectives, AllReduceAllGatherReduceScatterBroadcast) {
  const auto [n, dtype] = GetParam();
  const int64_t len = 7;  // an odd size: nothing divides evenly
  run_ranks(n, [&, n = n, dtype = dtype](int r, Communicator& c) {
    auto make = [&](int64_t count, auto f) {
      Tensor t = Tensor::empty({count}, dtype, MemTag::kActivation);
      std::vector<float> v(count);
      for (int64_t i = 0; i < count; ++i) v[i] = f(i);
      convert_from_f32(v.data(), t.raw(), dtype, count);
      return t;
    };
    auto read = [&](const Tensor& t, int64_t i) {
      float f;
      convert_to_f32(static_cast<const char*>(t.raw()) + i * dtype_size(dtype), dtype, &f, 1);
      return f;
    };
    // all_reduce
    Tensor x = make(len, [&](int64_t i) { return value(r, i); });
    c.all_reduce(x);
    for (int64_t i = 0; i < len; ++i) {
      // Inputs are rounded to the dtype, summed in fp32 in rank order, rounded once more.
      auto round = [&](float f) {
        uint8_t buf[4];
        convert_from_f32(&f, buf, dtype, 1);
        convert_to_f32(buf, dtype, &f, 1);
        return f;
      };
      float want = 0;
      for (int k = 0; k < n; ++k) want += round(value(k, i));
      const float rounded = round(want);
      EXPECT_EQ(read(x, i), rounded) << "rank " << r << " i " << i;
    }
    // all_gather
    Tensor in = make(len, [&](int64_t i) { return static_cast<float>(r * 10 + i); });
    Tensor out = Tensor::empty({n * len}, dtype, MemTag::kActivation);
    c.all_gather(in, out);
    for (int k = 0; k < n; ++k)
      for (int64_t i = 0; i < len; ++i) EXPECT_EQ(read(out, k * len + i), k * 10 + i);
    // reduce_scatter: rank r gets Σ_k rows [r·len, (r+1)·len) of rank k's input
    Tensor big = make(n * len, [&](int64_t i) { return static_cast<float>(r + i); });
    Tensor part = Tensor::empty({len}, dtype, MemTag::kActivation);
    c.reduce_scatter(big, part);
    for (int64_t i = 0; i < len; ++i) {
      float want = 0;
      for (int k = 0; k < n; ++k) want += static_cast<float>(k + r * len + i);
      EXPECT_EQ(read(part, i), want);
    }
    // broadcast from the last rank
    Tensor b = make(len, [&](int64_t i) { return static_cast<float>(r == n - 1 ? i : -1); });
    c.broadcast(b, n - 1);
    for (int64_t i = 0; i < len; ++i) EXPECT_EQ(read(b, i), i);
    c.barrier();
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, Collectives,
                         ::testing::Combine(::testing::Values(1, 2, 3, 8),
                                            ::testing::Values(DType::kF32, DType::kBF16)));

TEST(Collectives, MismatchedSizesAreReportedOnEveryRank) {
  std::atomic<int> errors = 0;
  run_ranks(2, [&](int r, Communicator& c) {
    Tensor x = Tensor::zeros({r == 0 ? 4 : 5}, DType::kF32, MemTag::kActivation);
    try {
      c.all_reduce(x);
    } catch (const ShapeError&) {
      ++errors;
    }
  });
  EXPECT_EQ(errors.load(), 2);
}

// The contract is checked before anything moves, whatever the group's size (a breach that a
// 1-rank group let through would surface only at tensor-parallel sizes > 1).
TEST(Collectives, ContractBreachesAreRejectedAtAnySize) {
  for (const int n : {1, 2}) {
    std::atomic<int> rejected = 0;
    run_ranks(n, [&](int, Communicator& c) {
      const auto expect = [&](const std::function<void()>& call, bool invalid_argument = false) {
        try {
          call();
        } catch (const ShapeError&) {
          rejected += !invalid_argument;
        } catch (const InvalidArgument&) {
          rejected += invalid_argument;
        }
      };
      Tensor f = Tensor::zeros({4, 6}, DType::kF32, MemTag::kActivation);
      Tensor i = Tensor::zeros({4, 6}, DType::kI32, MemTag::kActivation);
      Tensor cols = f.narrow(1, 0, 3);  // not contiguous
      Tensor b = Tensor::zeros({4 * n, 6}, DType::kBF16, MemTag::kActivation);
      Tensor short_out = Tensor::zeros({4 * n - 1, 6}, DType::kF32, MemTag::kActivation);
      expect([&] { c.all_reduce(i); });
      expect([&] { c.all_reduce(cols); });
      expect([&] { c.all_gather(f, b); });  // dtypes differ
      expect([&] { c.all_gather(f, short_out); });
      expect([&] { c.all_gather(cols, short_out); });
      expect([&] { c.reduce_scatter(short_out, f); });
      expect([&] { c.reduce_scatter(b, f); });
      expect([&] { c.broadcast(cols, 0); });
      expect([&] { c.broadcast(f, n); }, true);
      expect([&] { c.broadcast(f, -1); }, true);
    });
    EXPECT_EQ(rejected.load(), 10 * n) << n << " ranks";
  }
}

}  // namespace
}  // namespace mls
