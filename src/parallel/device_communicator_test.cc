// Ranks sharing one GPU: every collective on 1, 2, 4 and 8 ranks of GPU 0 gives bitwise what
// the in-process host communicator gives (the same rank-ordered fp32 sums). Skipped, visibly,
// without a GPU.
#include "parallel/device_communicator.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "core/cuda_allocator.h"
#include "core/cuda_context.h"
#include "parallel/in_process_communicator.h"

namespace mls {
namespace {

Tensor to_device(const Tensor& host, Allocator& a) {
  Tensor t = Tensor::empty(host.shape(), host.dtype(), MemTag::kActivation, a);
  EXPECT_EQ(cudaMemcpy(t.raw(), host.raw(), t.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
  return t;
}

Tensor to_host(const Tensor& dev) {
  cuda::synchronize();
  Tensor t = Tensor::empty(dev.shape(), dev.dtype(), MemTag::kActivation);
  EXPECT_EQ(cudaMemcpy(t.raw(), dev.raw(), t.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  return t;
}

Tensor random_host(int64_t n, DType dtype, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  Tensor t = Tensor::empty({n}, dtype, MemTag::kActivation);
  convert_from_f32(v.data(), t.raw(), dtype, n);
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

class DeviceCollectives : public ::testing::TestWithParam<std::tuple<DType, int>> {};

TEST_P(DeviceCollectives, EqualTheHostCommunicatorBitwise) {
  if (cuda_device_count() < 1) GTEST_SKIP() << "no CUDA device here";
  const auto [dtype, n] = GetParam();
  const int64_t len = 1001 * n;
  std::vector<std::unique_ptr<CudaAllocator>> allocs;
  std::vector<Allocator*> ptrs;
  for (int r = 0; r < n; ++r) {
    allocs.push_back(std::make_unique<CudaAllocator>(0));
    ptrs.push_back(allocs.back().get());
  }
  auto dev = make_device_group(n, 0, ptrs);
  auto host = make_in_process_group(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      cuda::bind(0, ptrs[r]);
      Allocator& a = *ptrs[r];
      const Tensor in = random_host(len, dtype, 100 + r);
      Tensor hx = random_host(len, dtype, 100 + r);
      Tensor dx = to_device(in, a);
      host[r]->all_reduce(hx);
      dev[r]->all_reduce(dx);
      EXPECT_TRUE(same_bits(to_host(dx), hx)) << "all_reduce rank " << r;

      Tensor hg = Tensor::empty({len * n}, dtype, MemTag::kActivation);
      Tensor dg = Tensor::empty({len * n}, dtype, MemTag::kActivation, a);
      host[r]->all_gather(in, hg);
      dev[r]->all_gather(to_device(in, a), dg);
      EXPECT_TRUE(same_bits(to_host(dg), hg)) << "all_gather rank " << r;

      Tensor hs = Tensor::empty({len / n}, dtype, MemTag::kActivation);
      Tensor ds = Tensor::empty({len / n}, dtype, MemTag::kActivation, a);
      host[r]->reduce_scatter(in, hs);
      dev[r]->reduce_scatter(to_device(in, a), ds);
      EXPECT_TRUE(same_bits(to_host(ds), hs)) << "reduce_scatter rank " << r;

      Tensor hb = random_host(len, dtype, 7 + r);
      Tensor db = to_device(hb, a);
      host[r]->broadcast(hb, n - 1);
      dev[r]->broadcast(db, n - 1);
      EXPECT_TRUE(same_bits(to_host(db), hb)) << "broadcast rank " << r;
      dev[r]->barrier();
    });
  for (auto& t : threads) t.join();
}

INSTANTIATE_TEST_SUITE_P(DTypesAndRanks, DeviceCollectives,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16),
                                            ::testing::Values(1, 2, 4, 8)));

}  // namespace
}  // namespace mls
