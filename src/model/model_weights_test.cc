#include "model/model_weights.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "io/test_dir.h"
#include "model/mtp_test_checkpoint.h"
#include "test_data.h"

namespace mls {
namespace {

namespace fs = std::filesystem;
std::vector<float> values(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

struct Loaded {
  io::ModelConfig config;
  ModelWeights weights;
};

Loaded load(const fs::path& dir, bool mtp, ParallelContext par = {}) {
  static CpuAllocator alloc;
  Loaded l{io::ModelConfig::load(dir), {}};
  io::Checkpoint ckpt = io::Checkpoint::open(dir);
  if (l.config.quant.fp8) ckpt.set_fp8_block_size(l.config.quant.block_n, l.config.quant.block_k);
  l.weights = load_weights(l.config, par, &ckpt, LoadFormat::kAuto, alloc, {}, mtp);
  return l;
}

// Checkpoint errors name the tensor and say what was expected.
void expect_checkpoint_error(const fs::path& dir, const std::vector<std::string>& parts) {
  try {
    load(dir, true);
    ADD_FAILURE() << "no error for " << dir;
  } catch (const CheckpointError& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(MtpWeights, LoadedForEveryFamilyOnlyWhenAsked) {
  for (const char* name : {"tiny-dsv3", "tiny-dsv32", "tiny-glm5", "tiny-glm5-fp8"}) {
    SCOPED_TRACE(name);
    io::testing::TestDir dir;
    testing::write_mtp_checkpoint(kTestData / name, dir.path(), 7);
    const Loaded without = load(dir.path(), false);
    EXPECT_TRUE(without.weights.mtp.empty());
    const Loaded with = load(dir.path(), true);
    const io::ModelConfig& c = with.config;
    ASSERT_EQ(with.weights.mtp.size(), 1u);
    const MtpWeights& m = with.weights.mtp[0];
    const LayerWeights& last = with.weights.layers.back();
    EXPECT_EQ(m.eh_proj_e.shape(), Shape({c.hidden_size, c.hidden_size}));
    EXPECT_EQ(m.eh_proj_h.shape(), Shape({c.hidden_size, c.hidden_size}));
    // eh_proj's first H input columns multiply the embedding, the last H the hidden state.
    std::vector<float> eh(static_cast<size_t>(2 * c.hidden_size * c.hidden_size));
    io::Checkpoint::open(dir.path())
        .read_f32(fmt::format("model.layers.{}.eh_proj.weight", c.num_hidden_layers),
                  {c.hidden_size, 2 * c.hidden_size}, eh.data());
    for (int64_t row : {int64_t{0}, c.hidden_size - 1}) {
      const float* stored = eh.data() + row * 2 * c.hidden_size;
      EXPECT_EQ(std::vector<float>(stored, stored + c.hidden_size),
                values(m.eh_proj_e.narrow(0, row, 1)));
      EXPECT_EQ(std::vector<float>(stored + c.hidden_size, stored + 2 * c.hidden_size),
                values(m.eh_proj_h.narrow(0, row, 1)));
    }
    EXPECT_EQ(m.enorm.shape(), Shape({c.hidden_size}));
    EXPECT_NE(values(m.enorm), values(m.hnorm));
    EXPECT_NE(values(m.hnorm), values(m.head_norm));
    // The block is a copy of the last layer, so it loads to the same values, FP8 dequantised.
    EXPECT_EQ(values(m.block.kv_b_proj), values(last.kv_b_proj));
    EXPECT_EQ(values(m.block.o_proj), values(last.o_proj));
    // The projections of the layer input; past them the block's own indexer (tiny-glm5's last
    // layer shares one, so its fused_a is narrower).
    EXPECT_EQ(values(m.block.fused_a.narrow(0, 0, last.fused_a.dim(0))), values(last.fused_a));
    ASSERT_EQ(m.block.experts.size(), last.experts.size());
    EXPECT_EQ(values(m.block.experts.back().down), values(last.experts.back().down));
    EXPECT_EQ(values(m.block.router_bias), values(last.router_bias));
    // Its own indexer on DSA models, even where the last main layer shares one (tiny-glm5).
    EXPECT_EQ(m.block.idx_wq_b.defined(), c.has_indexer);
    EXPECT_EQ(m.block.idx_k_norm_b.defined(), c.has_indexer);
  }
}

TEST(MtpWeights, ShardedLikeTheMainLayers) {
  io::testing::TestDir dir;
  testing::write_mtp_checkpoint(kTestData / "tiny-glm5", dir.path(), 7);
  const Loaded full = load(dir.path(), true);
  for (int rank = 0; rank < 2; ++rank) {
    const Loaded part = load(dir.path(), true, {.tp_size = 2, .rank = rank});
    const MtpWeights& m = part.weights.mtp[0];
    EXPECT_EQ(m.block.o_proj.shape(), part.weights.layers.back().o_proj.shape());
    EXPECT_EQ(m.block.o_proj.dim(1) * 2, full.weights.mtp[0].block.o_proj.dim(1));
    EXPECT_EQ(values(m.eh_proj_h), values(full.weights.mtp[0].eh_proj_h));  // replicated
  }
}

TEST(MtpWeights, MissingOrIllShapedTensorsAreNamed) {
  {
    io::testing::TestDir dir;  // the fixture as is: config says 1 MTP layer, the weights none
    fs::copy_file(kTestData / "tiny-dsv3" / "config.json", dir / "config.json");
    fs::copy_file(kTestData / "tiny-dsv3" / "model.safetensors", dir / "model.safetensors");
    expect_checkpoint_error(
        dir.path(), {"MTP tensor model.layers.4.", "not found", "num_nextn_predict_layers 1"});
  }
  {
    io::testing::TestDir dir;
    testing::write_mtp_checkpoint(kTestData / "tiny-dsv32", dir.path(), 7, [](auto& tensors) {
      std::erase_if(tensors, [](const auto& t) { return t.name == "model.layers.4.hnorm.weight"; });
    });
    expect_checkpoint_error(dir.path(), {"MTP tensor model.layers.4.hnorm.weight not found"});
  }
  {
    io::testing::TestDir dir;
    testing::write_mtp_checkpoint(kTestData / "tiny-dsv32", dir.path(), 7, [](auto& tensors) {
      for (auto& t : tensors)
        if (t.name == "model.layers.4.eh_proj.weight") t.shape = {512, 256};
    });
    expect_checkpoint_error(dir.path(), {"model.layers.4.eh_proj.weight",
                                         "expected shape [256, 512]", "found [512, 256]"});
  }
  {
    io::testing::TestDir dir;  // no MTP layer in the config at all
    fs::copy_file(kTestData / "tiny-dsv32" / "config.json", dir / "config.json");
    fs::copy_file(kTestData / "tiny-dsv32" / "model.safetensors", dir / "model.safetensors");
    EXPECT_THROW(load(dir.path(), true), ConfigError);
    EXPECT_TRUE(load(dir.path(), false).weights.mtp.empty());
  }
}

TEST(MtpWeights, DummyWeightsCountedInMetaMode) {
  io::ModelConfig c = io::ModelConfig::load(kTestData / "tiny-glm5");
  c.num_nextn_predict_layers = 1;
  MetaAllocator without(Device::cpu()), with(Device::cpu());
  const ModelWeights a = load_weights(c, {}, nullptr, LoadFormat::kDummy, without, {}, false);
  const ModelWeights b = load_weights(c, {}, nullptr, LoadFormat::kDummy, with, {}, true);
  ASSERT_EQ(b.mtp.size(), 1u);
  const int64_t base = without.stats().cur(MemTag::kWeights);
  // One more decoder layer (a MoE layer with its indexer, as the last main layer) plus three
  // norms and eh_proj, all f32 on the CPU.
  ModelWeights w;
  int64_t mtp_values = 0;
  for (const WeightSpec& s : weight_table(c, {}, w, true))
    if (s.name.starts_with("model.layers.4.")) {
      int64_t n = 1;
      for (int64_t d : s.local_shape) n *= d;
      mtp_values += n;
    }
  const int64_t H = c.hidden_size;
  EXPECT_GT(mtp_values, 2 * H * H + 3 * H);
  EXPECT_EQ(with.stats().cur(MemTag::kWeights) - base, mtp_values * 4);
}

}  // namespace
}  // namespace mls
