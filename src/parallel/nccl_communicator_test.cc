// The NCCL backend on real GPUs, one thread per device. Skipped, visibly, without two GPUs.
#include "parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "core/cuda_allocator.h"

namespace mls {
namespace {

std::vector<float> to_host(const Tensor& t) {
  std::vector<float> f32(t.numel());
  std::vector<uint8_t> raw(t.nbytes());
  EXPECT_EQ(cudaMemcpy(raw.data(), t.raw(), t.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  convert_to_f32(raw.data(), t.dtype(), f32.data(), f32.size());
  return f32;
}

Tensor to_device(const std::vector<float>& v, DType dtype, Allocator& a) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, dtype, MemTag::kActivation, a);
  std::vector<uint8_t> raw(t.nbytes());
  convert_from_f32(v.data(), raw.data(), dtype, v.size());
  EXPECT_EQ(cudaMemcpy(t.raw(), raw.data(), t.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
  return t;
}

class NcclCollectives : public ::testing::TestWithParam<DType> {};

TEST_P(NcclCollectives, MatchTheDefinitionOnEveryRank) {
  const int n = cuda_device_count();
  if (n < 2) GTEST_SKIP() << "needs 2 GPUs, found " << n << " (runs on the GPU machine)";
  const DType dtype = GetParam();
  std::vector<std::unique_ptr<CudaAllocator>> allocs;
  std::vector<Allocator*> ptrs;
  std::vector<int> devices;
  for (int r = 0; r < n; ++r) {
    allocs.push_back(std::make_unique<CudaAllocator>(r));
    ptrs.push_back(allocs.back().get());
    devices.push_back(r);
  }
  auto comms = make_nccl_group(devices, ptrs);
  const int64_t len = 1001;  // not a multiple of anything NCCL likes
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
      Communicator& c = *comms[r];
      Allocator& a = *ptrs[r];
      std::vector<float> v(len);
      for (int64_t i = 0; i < len; ++i) v[i] = static_cast<float>((r + 1) * (i % 13));
      Tensor x = to_device(v, dtype, a);
      c.all_reduce(x);
      const auto sum = to_host(x);
      for (int64_t i = 0; i < len; ++i)
        EXPECT_EQ(sum[i], static_cast<float>(n * (n + 1) / 2 * (i % 13))) << i;
      Tensor g = Tensor::empty({n * len}, dtype, MemTag::kActivation, a);
      c.all_gather(to_device(v, dtype, a), g);
      const auto gathered = to_host(g);
      for (int k = 0; k < n; ++k) EXPECT_EQ(gathered[k * len + 5], static_cast<float>((k + 1) * 5));
      std::vector<float> big(n * len, static_cast<float>(r + 1));
      Tensor part = Tensor::empty({len}, dtype, MemTag::kActivation, a);
      c.reduce_scatter(to_device(big, dtype, a), part);
      EXPECT_EQ(to_host(part)[len - 1], static_cast<float>(n * (n + 1) / 2));
      Tensor b = to_device(std::vector<float>(len, static_cast<float>(r)), dtype, a);
      c.broadcast(b, n - 1);
      EXPECT_EQ(to_host(b)[0], static_cast<float>(n - 1));
      c.barrier();
    });
  for (auto& t : threads) t.join();
}

INSTANTIATE_TEST_SUITE_P(DTypes, NcclCollectives, ::testing::Values(DType::kF32, DType::kBF16));

}  // namespace
}  // namespace mls
