// Model::forward_mtp: the MTP layer's cache holds what a later step reads, so one pass over n
// positions (the catch-up after a prefill or a verify) equals n single-position steps.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "io/test_dir.h"
#include "model/model.h"
#include "model/mtp_test_checkpoint.h"
#include "test_data.h"

namespace mls {
namespace {

namespace fs = std::filesystem;
double relative_l2(const float* a, const float* b, int64_t n) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff += (a[i] - b[i]) * static_cast<double>(a[i] - b[i]);
    norm += b[i] * static_cast<double>(b[i]);
  }
  return std::sqrt(diff / norm);
}

TEST(MtpForward, OnePassEqualsStepByStep) {
  for (const char* fixture : {"tiny-dsv3", "tiny-glm5"}) {
    SCOPED_TRACE(fixture);
    io::testing::TestDir dir;
    testing::write_mtp_checkpoint(kTestData / fixture, dir.path(), 3);
    LoadOptions opts;
    opts.mtp = true;
    const std::unique_ptr<Model> model = Model::load(dir.path(), opts);
    const io::ModelConfig& c = model->config();
    const std::vector<int32_t> seq = {5, 80, 3, 700, 41, 9, 256, 12, 1000, 77};
    const auto n = static_cast<int64_t>(seq.size()) - 1;
    const int64_t bs = 4, blocks = 4;
    const std::vector<int32_t> table = {0, 1, 2, 3};
    auto alloc_kv = [&] {
      return KvCache::allocate(c, blocks, bs, DType::kF32, model->allocator(), true);
    };

    // The target over positions 0..n-1 gives h_0..h_{n-1}.
    KvCache kv = alloc_kv();
    ForwardBatch target;
    target.token_ids.assign(seq.begin(), seq.begin() + n);
    target.seqs = {{.num_cached = 0, .num_new = n, .block_table = table}};
    Tensor h;
    model->forward(target, kv, nullptr, &h);
    ASSERT_EQ(h.shape(), Shape({n, c.hidden_size}));

    // One pass: position i pairs t_{i+1} with h_i.
    ForwardBatch all;
    all.token_ids.assign(seq.begin() + 1, seq.end());
    all.seqs = {{.num_cached = 0,
                 .num_new = n,
                 .block_table = table,
                 .logits = SequenceChunk::Logits::kAll}};
    Tensor out_all;
    const Tensor logits_all = model->forward_mtp(all, h, kv, out_all);
    ASSERT_EQ(logits_all.shape(), Shape({n, c.vocab_size}));

    // Step by step in a fresh MTP cache (the target's layers are not read by the MTP layer).
    KvCache kv2 = alloc_kv();
    for (int64_t i = 0; i < n; ++i) {
      ForwardBatch one;
      one.token_ids = {seq[static_cast<size_t>(i + 1)]};
      one.seqs = {{.num_cached = i, .num_new = 1, .block_table = table}};
      Tensor out;
      const Tensor logits = model->forward_mtp(one, h.narrow(0, i, 1), kv2, out);
      EXPECT_LT(relative_l2(logits.data<float>(), logits_all.data<float>() + i * c.vocab_size,
                            c.vocab_size),
                1e-5)
          << "position " << i;
      EXPECT_LT(
          relative_l2(out.data<float>(), out_all.data<float>() + i * c.hidden_size, c.hidden_size),
          1e-5)
          << "position " << i;
    }
  }
}

TEST(MtpForward, NeedsItsLayerAndCache) {
  io::testing::TestDir dir;
  testing::write_mtp_checkpoint(kTestData / "tiny-dsv32", dir.path(), 3);
  LoadOptions opts;
  opts.mtp = true;
  const std::unique_ptr<Model> model = Model::load(dir.path(), opts);
  const io::ModelConfig& c = model->config();
  ForwardBatch b;
  b.token_ids = {4};
  b.seqs = {{.num_cached = 0, .num_new = 1, .block_table = {0}}};
  const Tensor h =
      Tensor::zeros({1, c.hidden_size}, DType::kF32, MemTag::kActivation, model->allocator());
  Tensor out;
  KvCache main_only = KvCache::allocate(c, 1, 4, DType::kF32, model->allocator());
  EXPECT_THROW(model->forward_mtp(b, h, main_only, out), InvalidArgument);
  KvCache with = KvCache::allocate(c, 1, 4, DType::kF32, model->allocator(), true);
  EXPECT_THROW(model->forward_mtp(b, h, with, out, 1), InvalidArgument);
  const Tensor wrong =
      Tensor::zeros({2, c.hidden_size}, DType::kF32, MemTag::kActivation, model->allocator());
  EXPECT_THROW(model->forward_mtp(b, wrong, with, out), ShapeError);
  EXPECT_NO_THROW(model->forward_mtp(b, h, with, out));
}

}  // namespace
}  // namespace mls
