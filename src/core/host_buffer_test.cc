// HostBuffer: plain host memory on the CPU, page-locked on a CUDA device (skipped without one).
#include "core/host_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

#ifdef MLASERVE_CUDA_RUNTIME
#include "core/cuda_allocator.h"
#include "core/cuda_context.h"
#endif

namespace mls {
namespace {

TEST(HostBuffer, PlainMemoryMovesWithItsOwner) {
  HostBuffer a(1000, /*pinned=*/false);
  ASSERT_NE(a.data<void>(), nullptr);
  EXPECT_EQ(a.bytes(), 1000);
  EXPECT_FALSE(a.pinned());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data<void>()) % 64, 0u);
  a.data<int32_t>()[249] = 7;
  const void* p = a.data<void>();
  HostBuffer b = std::move(a);
  EXPECT_EQ(b.data<void>(), p);
  EXPECT_EQ(b.data<int32_t>()[249], 7);
  EXPECT_EQ(a.data<void>(), nullptr);  // the moved-from buffer is empty
  // Nothing was queued: marking and waiting are no-ops on plain memory.
  b.mark_read_by_stream();
  b.wait_writable();
  EXPECT_EQ(HostBuffer().data<void>(), nullptr);
}

TEST(HostBuffer, GpuPinnedMemoryIsPageLocked) {
#ifdef MLASERVE_CUDA_RUNTIME
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device here";
  cuda::bind(0);
  HostBuffer buf(1 << 20, /*pinned=*/true);
  ASSERT_NE(buf.data<void>(), nullptr);
  cudaPointerAttributes attr{};
  cuda::check(cudaPointerGetAttributes(&attr, buf.data<void>()), "cudaPointerGetAttributes");
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  // A copy from it, then the host waits before rewriting it.
  void* dev = nullptr;
  cuda::check(cudaMalloc(&dev, 1 << 20), "cudaMalloc");
  buf.data<int32_t>()[0] = 42;
  cuda::check(
      cudaMemcpyAsync(dev, buf.data<void>(), 1 << 20, cudaMemcpyHostToDevice, cuda::stream()),
      "cudaMemcpyAsync");
  buf.mark_read_by_stream();
  buf.wait_writable();
  buf.data<int32_t>()[0] = 0;
  int32_t back = 0;
  cuda::check(cudaMemcpy(&back, dev, 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  EXPECT_EQ(back, 42);
  cudaFree(dev);
#else
  GTEST_SKIP() << "no CUDA device here";
#endif
}

}  // namespace
}  // namespace mls
