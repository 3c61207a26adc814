// The probe hears each op once it has run, by name, in order; ops in meta mode compute nothing and
// are not named; without a probe, nothing is called.
#include "ops/op_probe.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/allocator.h"
#include "ops/copy.h"
#include "ops/norm.h"
#include "ops/test_inputs.h"

namespace mls::ops {
namespace {

TEST(OpProbe, NamesEachOpAfterItRuns) {
  const Tensor x = test::random({3, 8}, 1), w = test::random({8}, 2);
  Tensor y = Tensor::empty({3, 8}, DType::kF32, MemTag::kActivation);
  Tensor z = Tensor::empty({3, 8}, DType::kF32, MemTag::kActivation);
  std::vector<std::string> heard;
  std::vector<float> y_when_heard;
  const OpProbe probe = [&](const char* op) {
    heard.push_back(op);
    y_when_heard.push_back(y.data<float>()[0]);
  };
  {
    const ScopedOpProbe scoped(probe);
    rms_norm(x, w, 1e-6f, y);
    copy(y, z);
  }
  EXPECT_EQ(heard, (std::vector<std::string>{"rms_norm", "copy"}));
  ASSERT_EQ(y_when_heard.size(), 2u);
  EXPECT_EQ(y_when_heard[0], y.data<float>()[0]) << "named before the op wrote its output";

  // Out of scope: no probe.
  rms_norm(x, w, 1e-6f, y);
  EXPECT_EQ(heard.size(), 2u);
}

TEST(OpProbe, MetaOpsAreNotNamed) {
  MetaAllocator meta(Device::cpu());
  const Tensor x = Tensor::empty({3, 8}, DType::kF32, MemTag::kActivation, meta);
  const Tensor w = Tensor::empty({8}, DType::kF32, MemTag::kWeights, meta);
  Tensor y = Tensor::empty({3, 8}, DType::kF32, MemTag::kActivation, meta);
  int heard = 0;
  const OpProbe probe = [&](const char*) { ++heard; };
  const ScopedOpProbe scoped(probe);
  rms_norm(x, w, 1e-6f, y);
  EXPECT_EQ(heard, 0);
}

}  // namespace
}  // namespace mls::ops
