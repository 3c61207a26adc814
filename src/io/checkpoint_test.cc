#include "io/checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors_writer.h"
#include "io/test_dir.h"
#include "test_data.h"

namespace mls::io {
namespace {

namespace fs = std::filesystem;
using testing::TestDir;

const std::string kQb = "model.layers.0.self_attn.q_b_proj.weight";   // [384, 96]
const std::string kOProj = "model.layers.1.self_attn.o_proj.weight";  // [256, 256]

TensorData as_data(const TensorInfo& t) {
  return {t.name, t.stored_dtype, t.shape, std::span(t.data, t.nbytes)};
}

std::vector<float> read_all(const Checkpoint& ck, const std::string& name) {
  const TensorInfo& t = ck.info(name);
  std::vector<float> out(static_cast<size_t>(t.numel()));
  ck.read_f32(name, t.shape, out.data());
  return out;
}

// The part [r0, r0 + nr) x [c0, c0 + nc) of a row-major matrix with `cols` columns.
std::vector<float> sub_block(const std::vector<float>& full, int64_t cols, int64_t r0, int64_t nr,
                             int64_t c0, int64_t nc) {
  std::vector<float> out;
  for (int64_t i = r0; i < r0 + nr; ++i)
    for (int64_t j = c0; j < c0 + nc; ++j) out.push_back(full[static_cast<size_t>(i * cols + j)]);
  return out;
}

template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

void write_index(const fs::path& path, const nlohmann::json& weight_map) {
  std::ofstream(path)
      << nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump();
}

// The fixture split over two files, tensors alternating between them, with an index.
void write_sharded_copy(const fs::path& fixture, const fs::path& out) {
  const Checkpoint single = Checkpoint::open(fixture);
  std::vector<TensorData> shards[2];
  nlohmann::json weight_map;
  size_t i = 0;
  for (const std::string& name : single.names()) {
    const int shard = static_cast<int>(i++ % 2);
    shards[shard].push_back(as_data(single.info(name)));
    weight_map[name] = fmt::format("model-0000{}-of-00002.safetensors", shard + 1);
  }
  write_safetensors(out / "model-00001-of-00002.safetensors", shards[0], {{"format", "pt"}});
  write_safetensors(out / "model-00002-of-00002.safetensors", shards[1], {{"format", "pt"}});
  write_index(out / "model.safetensors.index.json", weight_map);
}

TEST(Checkpoint, ShardedIndexReadsLikeTheSingleFile) {
  TestDir dir;
  write_sharded_copy(kTestData / "tiny-glm5", dir.path());
  const Checkpoint single = Checkpoint::open(kTestData / "tiny-glm5");
  const Checkpoint sharded = Checkpoint::open(dir.path());
  EXPECT_EQ(sharded.files().size(), 2u);
  EXPECT_EQ(single.files().size(), 1u);
  ASSERT_EQ(sharded.names(), single.names());
  for (const std::string& name : single.names()) {
    const TensorInfo& a = single.info(name);
    const TensorInfo& b = sharded.info(name);
    EXPECT_EQ(a.shape, b.shape) << name;
    EXPECT_EQ(a.dtype, b.dtype) << name;
    ASSERT_EQ(a.nbytes, b.nbytes) << name;
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0) << name;
  }
  EXPECT_EQ(read_all(sharded, kQb), read_all(single, kQb));
  EXPECT_EQ(read_all(sharded, "model.norm.weight"), read_all(single, "model.norm.weight"));

  // Without the index every *.safetensors file of the directory is taken.
  fs::remove(dir / "model.safetensors.index.json");
  const Checkpoint globbed = Checkpoint::open(dir.path());
  EXPECT_EQ(globbed.names(), single.names());
  EXPECT_EQ(read_all(globbed, kOProj), read_all(single, kOProj));
}

TEST(Checkpoint, SlicesEqualThePartsOfTheFullRead) {
  const Checkpoint ck = Checkpoint::open(kTestData / "tiny-glm5");
  const std::vector<float> full = read_all(ck, kQb);
  std::vector<float> part(50 * 40);
  ck.read_f32(kQb, {384, 96}, part.data(), {100, 50}, {10, 40});
  EXPECT_EQ(part, sub_block(full, 96, 100, 50, 10, 40));

  std::vector<float> tail(4 * 96);  // len -1: to the end
  ck.read_f32(kQb, {384, 96}, tail.data(), {380, -1});
  EXPECT_EQ(tail, sub_block(full, 96, 380, 4, 0, 96));

  std::vector<float> right(384 * 16);
  ck.read_f32(kQb, {384, 96}, right.data(), {}, {80, -1});
  EXPECT_EQ(right, sub_block(full, 96, 0, 384, 80, 16));

  const std::vector<float> norm = read_all(ck, "model.norm.weight");
  std::vector<float> norm_part(10);
  ck.read_f32("model.norm.weight", {256}, norm_part.data(), {5, 10});
  EXPECT_EQ(norm_part, std::vector<float>(norm.begin() + 5, norm.begin() + 15));

  float unused[1];
  EXPECT_THROW(ck.read_f32("model.norm.weight", {256}, unused, {}, {0, 1}), ShapeError);
  const std::string msg = error_of<ShapeError>([&] {
    ck.read_f32(kQb, {384, 96}, unused, {380, 5});
  });
  EXPECT_NE(msg.find(kQb), std::string::npos) << msg;
  EXPECT_NE(msg.find("row slice (start 380, len 5) is outside its extent 384"), std::string::npos)
      << msg;
  EXPECT_THROW(ck.read_f32(kQb, {384, 96}, unused, {-1, 1}), ShapeError);
  EXPECT_THROW(ck.read_f32(kQb, {384, 96}, unused, {0, 1}, {97, -1}), ShapeError);
}

// The dequantisation W[i, j] = q[i, j] * s[i / 128, j / 128] computed here from the raw codes.
std::vector<float> manual_dequant(const Checkpoint& ck, const std::string& name) {
  const TensorInfo& q = ck.info(name);
  const TensorInfo& s = ck.info(name + "_scale_inv");
  const int64_t rows = q.shape[0], cols = q.shape[1], scale_cols = s.shape[1];
  EXPECT_EQ(s.dtype, DType::kF32);
  std::vector<float> out;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const auto code = std::to_integer<uint8_t>(q.data[i * cols + j]);
      float scale;
      std::memcpy(&scale, s.data + 4 * ((i / 128) * scale_cols + j / 128), 4);
      out.push_back(fp8e4m3_to_f32(code) * scale);
    }
  }
  return out;
}

TEST(Checkpoint, Fp8BlockDequantisation) {
  const Checkpoint ck = Checkpoint::open(kTestData / "tiny-glm5-fp8");
  const Checkpoint bf16 = Checkpoint::open(kTestData / "tiny-glm5");
  for (const std::string& name : {kQb, kOProj}) {
    SCOPED_TRACE(name);
    const std::vector<float> full = read_all(ck, name);
    ASSERT_EQ(full, manual_dequant(ck, name));
    // The quantised weights stay close to the bf16 originals (e4m3 keeps 3 mantissa bits).
    const std::vector<float> original = read_all(bf16, name);
    double err = 0, norm = 0;
    for (size_t i = 0; i < full.size(); ++i) {
      err += (full[i] - original[i]) * (full[i] - original[i]);
      norm += original[i] * original[i];
    }
    EXPECT_LT(std::sqrt(err / norm), 0.05);
  }
  // Slices straddling the 128 boundaries use the global block of every element.
  const std::vector<float> qb = read_all(ck, kQb);
  std::vector<float> part(60 * 30);
  ck.read_f32(kQb, {384, 96}, part.data(), {100, 60}, {50, 30});
  EXPECT_EQ(part, sub_block(qb, 96, 100, 60, 50, 30));
  const std::vector<float> o = read_all(ck, kOProj);
  std::vector<float> o_part(20 * 60);
  ck.read_f32(kOProj, {256, 256}, o_part.data(), {120, 20}, {100, 60});
  EXPECT_EQ(o_part, sub_block(o, 256, 120, 20, 100, 60));

  // Raw access gives the codes and the scales of the same sub-block.
  std::vector<uint8_t> codes(20 * 60);
  ck.read_raw(kOProj, DType::kFP8E4M3, std::vector<int64_t>{256, 256}, codes.data(), {120, 20},
              {100, 60});
  EXPECT_EQ(
      fp8e4m3_to_f32(codes[0]) *
          [&] {
            float s;
            std::memcpy(&s, ck.info(kOProj + "_scale_inv").data, 4);  // block (0, 0)
            return s;
          }(),
      o_part[0]);
  EXPECT_THROW(ck.read_raw(kOProj, DType::kBF16, std::vector<int64_t>{256, 256}, codes.data()),
               CheckpointError);
}

TEST(Checkpoint, Fp8ScaleShapeIsChecked) {
  Checkpoint ck = Checkpoint::open(kTestData / "tiny-glm5-fp8");
  ck.set_fp8_block_size(64, 64);
  std::vector<float> out(384 * 96);
  const std::string msg = error_of<CheckpointError>([&] {
    ck.read_f32(kQb, {384, 96}, out.data());
  });
  EXPECT_NE(msg.find(kQb + "_scale_inv"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected shape [6, 2], found [3, 1]"), std::string::npos) << msg;
  EXPECT_THROW(ck.set_fp8_block_size(0, 128), ConfigError);
}

TEST(Checkpoint, WrongExpectedShapeNamesBoth) {
  const Checkpoint ck = Checkpoint::open(kTestData / "tiny-glm5");
  std::vector<float> out(384 * 96);
  const std::string msg = error_of<CheckpointError>([&] {
    ck.read_f32(kQb, {384, 95}, out.data());
  });
  const std::string file = (kTestData / "tiny-glm5" / "model.safetensors").string();
  EXPECT_EQ(msg, kQb + " in " + file + ": expected shape [384, 95], found [384, 96]");
  EXPECT_THROW(ck.read_f32(kQb, {384}, out.data()), CheckpointError);
}

TEST(Checkpoint, MissingTensor) {
  const Checkpoint ck = Checkpoint::open(kTestData / "tiny-glm5");
  EXPECT_FALSE(ck.has("model.layers.9.mlp.gate.weight"));
  EXPECT_TRUE(ck.has(kQb));
  const std::string msg =
      error_of<CheckpointError>([&] { ck.info("model.layers.9.mlp.gate.weight"); });
  EXPECT_NE(msg.find("model.layers.9.mlp.gate.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find((kTestData / "tiny-glm5").string()), std::string::npos) << msg;
  float out[1];
  EXPECT_THROW(ck.read_f32("nope", {1}, out), CheckpointError);
}

TEST(Checkpoint, IndexNamingAMissingFile) {
  TestDir dir;
  const std::vector<std::byte> bytes(8);
  const TensorData t{"a", "F32", {2}, bytes};
  write_safetensors(dir / "one.safetensors", std::span(&t, 1));
  write_index(dir / "model.safetensors.index.json",
              {{"a", "one.safetensors"}, {"b", "two.safetensors"}});
  const std::string msg = error_of<CheckpointError>([&] { Checkpoint::open(dir.path()); });
  EXPECT_NE(msg.find("two.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;

  write_index(dir / "model.safetensors.index.json",
              {{"a", "one.safetensors"}, {"b", "one.safetensors"}});
  const std::string absent = error_of<CheckpointError>([&] { Checkpoint::open(dir.path()); });
  EXPECT_NE(absent.find("maps b to"), std::string::npos) << absent;
  EXPECT_NE(absent.find("no such tensor"), std::string::npos) << absent;

  std::ofstream(dir / "model.safetensors.index.json") << "{\"weight_map\": [1]}";
  EXPECT_THROW(Checkpoint::open(dir.path()), CheckpointError);
  std::ofstream(dir / "model.safetensors.index.json") << "{ broken";
  EXPECT_THROW(Checkpoint::open(dir.path()), CheckpointError);
}

TEST(Checkpoint, DirectoryErrors) {
  TestDir dir;
  EXPECT_THROW(Checkpoint::open(dir / "absent"), CheckpointError);
  const std::string msg = error_of<CheckpointError>([&] { Checkpoint::open(dir.path()); });
  EXPECT_NE(msg.find("no model.safetensors.index.json"), std::string::npos) << msg;

  const std::vector<std::byte> bytes(8);
  const TensorData t{"a", "F32", {2}, bytes};
  write_safetensors(dir / "x.safetensors", std::span(&t, 1));
  write_safetensors(dir / "y.safetensors", std::span(&t, 1));
  const std::string dup = error_of<CheckpointError>([&] { Checkpoint::open(dir.path()); });
  EXPECT_NE(dup.find("tensor a is in both"), std::string::npos) << dup;
}

TEST(Checkpoint, DtypesThatAreNotWeights) {
  TestDir dir;
  const std::vector<std::byte> bytes(16);
  const std::vector<TensorData> tensors = {{"f64", "F64", {2}, bytes},
                                           {"i64", "I64", {2}, bytes},
                                           {"fp8", "F8_E4M3", {4}, std::span(bytes).first(4)}};
  write_safetensors(dir / "model.safetensors", tensors);
  const Checkpoint ck = Checkpoint::open(dir.path());
  float out[4];
  const std::string f64 = error_of<Unsupported>([&] { ck.read_f32("f64", {2}, out); });
  EXPECT_NE(f64.find("F64"), std::string::npos) << f64;
  EXPECT_THROW(ck.read_f32("i64", {2}, out), CheckpointError);
  int64_t ids[2];
  ck.read_raw("i64", DType::kI64, std::vector<int64_t>{2}, ids);
  EXPECT_EQ(ids[1], 0);
  // An FP8 tensor without its scale cannot be dequantised.
  const std::string fp8 = error_of<CheckpointError>([&] { ck.read_f32("fp8", {4}, out); });
  EXPECT_NE(fp8.find("fp8_scale_inv"), std::string::npos) << fp8;
}

}  // namespace
}  // namespace mls::io
