#include "model/model_weights.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "io/test_dir.h"
#include "model/mtp_test_checkpoint.h"
#include "ops/copy.h"
#include "test_data.h"
#ifdef MLASERVE_CUDA_RUNTIME
#include "core/cuda_allocator.h"
#include "core/cuda_context.h"
#endif

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

Loaded load(const fs::path& dir, bool mtp, ParallelContext par = {}, Allocator* on = nullptr) {
  static CpuAllocator cpu;
  Allocator& alloc = on ? *on : cpu;
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

// A copy of tiny-glm5-fp8 whose q_lora_rank is 128, one whole scale block: q_a_proj gains zero
// rows, q_a_layernorm ones, q_b_proj and the indexer's wq_b zero columns (their FP8 scales keep
// their shapes), so that both members of [q_a_proj | kv_a_proj_with_mqa] start on a block.
// q_a_bf16: q_a_proj stored as bf16 zeros without scales instead.
void write_q_lora_128(const fs::path& out, bool q_a_bf16 = false) {
  const fs::path from = kTestData / "tiny-glm5-fp8";
  nlohmann::json config = nlohmann::json::parse(std::ifstream(from / "config.json"));
  const int64_t q_lora = config["q_lora_rank"].get<int64_t>(), wide = 128;
  config["q_lora_rank"] = wide;
  std::ofstream(out / "config.json") << config.dump(2);
  const io::SafetensorsFile file = io::SafetensorsFile::open(from / "model.safetensors");
  std::vector<std::vector<std::byte>> bytes;
  std::vector<io::TensorData> tensors;
  for (const io::TensorInfo& t : file) {
    std::vector<int64_t> shape = t.shape;
    const auto es = static_cast<int64_t>(t.nbytes) / std::max<int64_t>(t.numel(), 1);
    std::vector<std::byte> b(t.data, t.data + t.nbytes);
    std::string dtype = t.stored_dtype;
    if (q_a_bf16 && t.name.ends_with("q_a_proj.weight_scale_inv")) continue;
    if (t.name.ends_with("q_a_proj.weight")) {
      shape[0] = wide;
      if (q_a_bf16) {
        dtype = "BF16";
        b.assign(static_cast<size_t>(wide * shape[1] * 2), std::byte{0});
      } else {
        b.resize(static_cast<size_t>(wide * shape[1] * es));
      }
    } else if (t.name.ends_with("q_a_layernorm.weight")) {
      ASSERT_EQ(t.stored_dtype, "BF16");
      shape[0] = wide;
      for (int64_t i = q_lora; i < wide; ++i) {
        const std::byte one[2] = {std::byte{0x80}, std::byte{0x3f}};  // bf16 1.0, little-endian
        b.insert(b.end(), one, one + 2);
      }
    } else if (t.name.ends_with("q_b_proj.weight") || t.name.ends_with("indexer.wq_b.weight")) {
      shape[1] = wide;
      b.assign(static_cast<size_t>(shape[0] * wide * es), std::byte{0});
      for (int64_t r = 0; r < shape[0]; ++r)
        std::copy_n(t.data + r * q_lora * es, q_lora * es, b.begin() + r * wide * es);
    }
    bytes.push_back(std::move(b));
    tensors.push_back({t.name, dtype, shape, {}});
  }
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].bytes = bytes[i];
  io::write_safetensors(out / "model.safetensors", tensors);
}

// Loaded on a GPU's meta allocator (sizes only; no GPU needed): a fused group is block-FP8 only
// where each member is and starts on a 128-row scale block, its scales its members' stacked.
TEST(FusedProjections, BlockFp8OnlyWhereEveryMemberStartsOnAScaleBlock) {
  MetaAllocator meta(Device::cuda(0));
  {
    // As stored: kv_a_proj starts at row 96; the indexer's weights_proj is bf16 and at row 32.
    const Loaded l = load(kTestData / "tiny-glm5-fp8", false, {}, &meta);
    const LayerWeights& w = l.weights.layers[0];
    EXPECT_EQ(w.fused_a.dtype(), DType::kBF16);
    EXPECT_EQ(w.q_a_proj.dtype(), DType::kBF16);
    EXPECT_EQ(w.fused_a_index.dtype(), DType::kBF16);
    EXPECT_EQ(w.q_b_proj.dtype(), DType::kFP8E4M3);  // alone, as before
  }
  io::testing::TestDir dir;
  write_q_lora_128(dir.path());
  const Loaded l = load(dir.path(), false, {}, &meta);
  const io::ModelConfig& c = l.config;
  for (const LayerWeights& w : l.weights.layers) {
    const int64_t rows = 128 + c.kv_lora_rank + c.qk_rope_head_dim;
    ASSERT_EQ(w.fused_a.shape(), Shape({rows, c.hidden_size}));
    EXPECT_EQ(w.fused_a.dtype(), DType::kFP8E4M3);
    ASSERT_NE(w.fused_a.block_scale(), nullptr);
    EXPECT_EQ(w.fused_a.block_scale()->shape(), Shape({(rows + 127) / 128, c.hidden_size / 128}));
    // hidden 256: two K blocks a row, padded to four for cuBLASLt.
    ASSERT_NE(w.fused_a.padded_block_scale(), nullptr);
    EXPECT_EQ(w.fused_a.padded_block_scale()->shape(), Shape({(rows + 127) / 128, 4}));
    EXPECT_EQ(w.kv_a_proj.dtype(), DType::kFP8E4M3);
    EXPECT_EQ(w.kv_a_proj.block_scale()->shape(), Shape({1, c.hidden_size / 128}));
    // The indexer's group: weights_proj is stored bf16.
    EXPECT_EQ(w.fused_a_index.defined(), w.idx_wk.defined());
    if (w.fused_a_index.defined()) {
      EXPECT_EQ(w.fused_a_index.dtype(), DType::kBF16);
    }
  }
  // q_a_proj without scales: its group is bf16, kv_a_proj with it.
  io::testing::TestDir bf16_q_a;
  write_q_lora_128(bf16_q_a.path(), true);
  const LayerWeights& w = load(bf16_q_a.path(), false, {}, &meta).weights.layers[0];
  EXPECT_EQ(w.fused_a.dtype(), DType::kBF16);
  EXPECT_EQ(w.kv_a_proj.dtype(), DType::kBF16);
  EXPECT_EQ(w.fused_a.block_scale(), nullptr);
}

// On the GPU (skipped without one): the block-FP8 group holds its members' codes and scales as
// the checkpoint stores them, q_a_proj's block above kv_a_proj's.
TEST(FusedProjections, GpuBlockFp8GroupHoldsItsMembersAsStored) {
#ifdef MLASERVE_CUDA_RUNTIME
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device here";
  io::testing::TestDir dir;
  write_q_lora_128(dir.path());
  const Loaded l = load(dir.path(), false, {}, &cuda::allocator());
  const io::SafetensorsFile file = io::SafetensorsFile::open(dir / "model.safetensors");
  const auto stored = [&](const std::string& name) {
    const io::TensorInfo* t = file.find(name);
    EXPECT_NE(t, nullptr) << name;
    return t ? std::vector<std::byte>(t->data, t->data + t->nbytes) : std::vector<std::byte>();
  };
  const auto on_host = [](const Tensor& dev) {
    Tensor host = Tensor::empty(dev.shape(), dev.dtype(), MemTag::kActivation);
    ops::copy(dev, host);
    cuda::synchronize();
    const auto* p = static_cast<const std::byte*>(host.raw());
    return std::vector<std::byte>(p,
                                  p + host.numel() * static_cast<int64_t>(dtype_size(dev.dtype())));
  };
  const LayerWeights& w = l.weights.layers[0];
  ASSERT_EQ(w.fused_a.dtype(), DType::kFP8E4M3);
  const std::string a = "model.layers.0.self_attn.";
  std::vector<std::byte> codes = stored(a + "q_a_proj.weight");
  std::vector<std::byte> scales = stored(a + "q_a_proj.weight_scale_inv");
  for (const std::byte b : stored(a + "kv_a_proj_with_mqa.weight")) codes.push_back(b);
  for (const std::byte b : stored(a + "kv_a_proj_with_mqa.weight_scale_inv")) scales.push_back(b);
  EXPECT_EQ(on_host(w.fused_a), codes);
  EXPECT_EQ(on_host(*w.fused_a.block_scale()), scales);
#else
  GTEST_SKIP() << "no CUDA device here";
#endif
}

}  // namespace
}  // namespace mls
