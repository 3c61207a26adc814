#include "core/tensor.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace mls {
namespace {

TEST(Tensor, EmptyIsContiguousAndTracked) {
  CpuAllocator alloc;
  {
    Tensor t = Tensor::empty({3, 4}, DType::kF32, MemTag::kActivation, alloc);
    EXPECT_EQ(t.numel(), 12);
    EXPECT_EQ(t.nbytes(), 48u);
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_EQ(t.stride(0), 4);
    EXPECT_EQ(alloc.stats().cur(MemTag::kActivation), 48);
  }
  EXPECT_EQ(alloc.stats().cur(MemTag::kActivation), 0);
  EXPECT_EQ(alloc.stats().pk(MemTag::kActivation), 48);
}

TEST(Tensor, NarrowSharesStorageAndKeepsItAlive) {
  CpuAllocator alloc;
  Tensor col;
  {
    Tensor t = Tensor::zeros({2, 3}, DType::kF32, MemTag::kActivation, alloc);
    for (int i = 0; i < 6; ++i) t.data<float>()[i] = static_cast<float>(i);
    col = t.narrow(1, 1, 2);
  }
  EXPECT_FALSE(col.is_contiguous());
  EXPECT_EQ(col.stride(0), 3);
  EXPECT_EQ(col.data<float>()[0], 1.0f);
  EXPECT_EQ(col.data<float>()[col.stride(0)], 4.0f);
  EXPECT_EQ(alloc.stats().cur(MemTag::kActivation), 24);
}

TEST(Tensor, ViewAndSelect) {
  Tensor t = Tensor::zeros({2, 3, 4}, DType::kF32, MemTag::kActivation);
  Tensor v = t.view({6, 4});
  EXPECT_EQ(v.dim(0), 6);
  Tensor s = t.select(0, 1);
  EXPECT_EQ(s.shape(), Shape({3, 4}));
  EXPECT_EQ(s.data<float>(), t.data<float>() + 12);
  Tensor m = t.select(1, 2);
  EXPECT_EQ(m.shape(), Shape({2, 4}));
  EXPECT_EQ(m.stride(0), 12);
  EXPECT_EQ(m.data<float>(), t.data<float>() + 8);
  Tensor u = t.narrow(2, 1, 2).unsqueeze(1);
  EXPECT_EQ(u.shape(), Shape({2, 1, 3, 2}));
  EXPECT_EQ(u.stride(0), 12);
  EXPECT_EQ(u.stride(2), 4);
  EXPECT_THROW(t.view({5, 5}), ShapeError);
  EXPECT_THROW(t.narrow(0, 1, 2), ShapeError);
  EXPECT_THROW(t.data<uint16_t>(), ShapeError);
}

}  // namespace
}  // namespace mls
