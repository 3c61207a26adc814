#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <span>
#include <string>

#include "core/error.h"
#include "io/safetensors_writer.h"
#include "io/test_dir.h"

namespace mls::io {
namespace {

namespace fs = std::filesystem;
using testing::TestDir;

std::vector<std::byte> pattern_bytes(size_t n, int seed) {
  std::vector<std::byte> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i * 31 + seed * 7 + 1) & 0xff);
  return b;
}

// A file of the 8-byte length `header_len`, then `header`, then `data`, unchecked: for malformed
// inputs the writer refuses to produce.
void write_raw(const fs::path& path, uint64_t header_len, const std::string& header,
               size_t data_bytes) {
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((header_len >> (8 * i)) & 0xff));
  out << header;
  out << std::string(data_bytes, '\x01');
}
void write_raw(const fs::path& path, const std::string& header, size_t data_bytes) {
  write_raw(path, header.size(), header, data_bytes);
}

// Opening `path` throws E whose message contains the path and every one of `parts`.
template <class E = CheckpointError>
void expect_open_error(const fs::path& path, std::initializer_list<std::string> parts) {
  try {
    SafetensorsFile::open(path);
    ADD_FAILURE() << "no error opening " << path;
  } catch (const E& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg;
  }
}

TEST(Safetensors, RoundTripsEveryDtype) {
  TestDir dir;
  struct Spec {
    std::string name, dtype;
    std::vector<int64_t> shape;
    size_t elem;
    std::optional<DType> expect;
  };
  const std::vector<Spec> specs = {
      {"f32", "F32", {2, 3}, 4, DType::kF32},   {"bf16", "BF16", {4}, 2, DType::kBF16},
      {"f16", "F16", {2, 2}, 2, DType::kF16},   {"fp8", "F8_E4M3", {3, 1}, 1, DType::kFP8E4M3},
      {"i32", "I32", {2}, 4, DType::kI32},      {"i64", "I64", {1, 2}, 8, DType::kI64},
      {"i8", "I8", {3}, 1, std::nullopt},       {"u8", "U8", {2}, 1, std::nullopt},
      {"bool", "BOOL", {1}, 1, std::nullopt},   {"f64", "F64", {2}, 8, std::nullopt},
      {"empty", "F32", {0, 4}, 4, DType::kF32}, {"scalar", "F32", {}, 4, DType::kF32},
  };
  std::vector<std::vector<std::byte>> payloads;
  std::vector<TensorData> tensors;
  for (size_t i = 0; i < specs.size(); ++i) {
    size_t numel = 1;
    for (int64_t d : specs[i].shape) numel *= static_cast<size_t>(d);
    payloads.push_back(pattern_bytes(numel * specs[i].elem, static_cast<int>(i)));
  }
  for (size_t i = 0; i < specs.size(); ++i)
    tensors.push_back({specs[i].name, specs[i].dtype, specs[i].shape, payloads[i]});
  const fs::path path = dir / "all.safetensors";
  write_safetensors(path, tensors, {{"format", "pt"}});

  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  ASSERT_EQ(f.size(), specs.size());
  size_t index = 0;
  for (const TensorInfo& t : f) {  // iteration follows the data offsets, i.e. write order
    EXPECT_EQ(t.name, specs[index++].name);
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorInfo* t = f.find(specs[i].name);
    ASSERT_NE(t, nullptr) << specs[i].name;
    EXPECT_EQ(t->dtype, specs[i].expect) << specs[i].name;
    EXPECT_EQ(t->stored_dtype, specs[i].dtype);
    EXPECT_EQ(t->shape, specs[i].shape);
    EXPECT_EQ(t->file, path.string());
    ASSERT_EQ(t->nbytes, payloads[i].size());
    // Compared as spans: the empty tensor's payload has no data pointer, which memcmp may not
    // be given even for zero bytes (UBSan).
    EXPECT_TRUE(std::ranges::equal(std::span(t->data, t->nbytes), payloads[i])) << specs[i].name;
  }
  EXPECT_EQ(f.find("scalar")->numel(), 1);
  EXPECT_EQ(f.find("empty")->numel(), 0);
  EXPECT_EQ(f.find("missing"), nullptr);
}

TEST(Safetensors, MoveKeepsTheMappingAlive) {
  TestDir dir;
  const std::vector<std::byte> bytes = pattern_bytes(8, 3);
  const TensorData t{"w", "F32", {2}, bytes};
  write_safetensors(dir / "m.safetensors", std::span(&t, 1));
  SafetensorsFile a = SafetensorsFile::open(dir / "m.safetensors");
  const std::byte* data = a.find("w")->data;
  SafetensorsFile b = std::move(a);
  EXPECT_EQ(b.find("w")->data, data);
  SafetensorsFile c = SafetensorsFile::open(dir / "m.safetensors");
  c = std::move(b);
  EXPECT_EQ(std::memcmp(c.find("w")->data, bytes.data(), 8), 0);
}

TEST(Safetensors, WriterRejectsSizeMismatch) {
  TestDir dir;
  const std::vector<std::byte> bytes(6);
  const TensorData t{"w", "F32", {2}, bytes};
  EXPECT_THROW(write_safetensors(dir / "x.safetensors", std::span(&t, 1)), InvalidArgument);
}

TEST(Safetensors, MissingFileIsIoError) {
  TestDir dir;
  expect_open_error<IoError>(dir / "absent.safetensors", {"cannot open"});
}

TEST(Safetensors, ShorterThanLengthField) {
  TestDir dir;
  const fs::path p = dir / "short.safetensors";
  std::ofstream(p) << "abc";
  expect_open_error(p, {"3 bytes"});
}

TEST(Safetensors, ShorterThanHeader) {
  TestDir dir;
  const fs::path p = dir / "h.safetensors";
  write_raw(p, 100, R"({"w": {"dtype": "F32"})", 0);
  expect_open_error(p, {"header length 100 exceeds"});
}

TEST(Safetensors, AbsurdHeaderLength) {
  TestDir dir;
  const fs::path p = dir / "huge.safetensors";
  write_raw(p, ~uint64_t{0}, "{}", 0);
  expect_open_error(p, {"header length 18446744073709551615 exceeds"});
}

TEST(Safetensors, ShorterThanData) {
  TestDir dir;
  const fs::path p = dir / "d.safetensors";
  write_raw(p, R"({"model.w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8);
  expect_open_error(p, {"model.w", "run past the 8-byte data region"});
}

// The reported crash: a header whose `shape` nests ~20k levels deep (the JSON printer of the
// error message recursed once per level).
TEST(Safetensors, DeeplyNestedHeaderIsRejected) {
  TestDir dir;
  const fs::path p = dir / "deep.safetensors";
  write_raw(p,
            R"({"w": {"dtype": "F32", "shape": )" + std::string(20000, '[') + "1" +
                std::string(20000, ']') + R"(, "data_offsets": [0, 4]}})",
            4);
  expect_open_error(p, {"header: JSON nests deeper than 128 levels"});
  write_raw(p, 100'000'001, "{}", 0);
  expect_open_error(p, {"header length 100000001 exceeds the format's limit"});
}

TEST(Safetensors, BadJson) {
  TestDir dir;
  const fs::path p = dir / "j.safetensors";
  write_raw(p, R"({"w": {"dtype": )", 0);
  expect_open_error(p, {"not valid JSON"});
  write_raw(p, "[1, 2]", 0);
  expect_open_error(p, {"not a JSON object"});
}

TEST(Safetensors, UnknownDtype) {
  TestDir dir;
  const fs::path p = dir / "u.safetensors";
  write_raw(p, R"({"w": {"dtype": "F8_E5M2", "shape": [2], "data_offsets": [0, 2]}})", 2);
  expect_open_error(p, {"tensor w", "unknown dtype 'F8_E5M2'"});
}

TEST(Safetensors, MissingOrMistypedFields) {
  TestDir dir;
  const fs::path p = dir / "f.safetensors";
  write_raw(p, R"({"w": {"shape": [2], "data_offsets": [0, 8]}})", 8);
  expect_open_error(p, {"tensor w", "'dtype'"});
  write_raw(p, R"({"w": {"dtype": "F32", "data_offsets": [0, 8]}})", 8);
  expect_open_error(p, {"tensor w", "'shape'"});
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [2]}})", 8);
  expect_open_error(p, {"tensor w", "'data_offsets'"});
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", 8);
  expect_open_error(p, {"tensor w", "'data_offsets'"});
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8);
  expect_open_error(p, {"tensor w", "not a non-negative integer"});
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})", 8);
  expect_open_error(p, {"tensor w", "not a non-negative integer"});
  write_raw(p, R"({"w": 3})", 0);
  expect_open_error(p, {"tensor w", "not a JSON object"});
  write_raw(p, R"({"__metadata__": {"format": 1}})", 0);
  expect_open_error(p, {"__metadata__", "format"});
}

TEST(Safetensors, OffsetsInconsistentWithShape) {
  TestDir dir;
  const fs::path p = dir / "o.safetensors";
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}})", 16);
  expect_open_error(p, {"tensor w", "hold 12 bytes but F32 [4] needs 16"});
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 16);
  expect_open_error(p, {"tensor w", "invalid data_offsets"});
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 16);
  expect_open_error(p, {"tensor w", "invalid data_offsets"});
  write_raw(
      p, R"({"w": {"dtype": "BF16", "shape": [4611686018427387904, 4], "data_offsets": [0, 8]}})",
      8);
  expect_open_error(p, {"tensor w", "overflows"});
}

TEST(Safetensors, OverlappingTensors) {
  TestDir dir;
  const fs::path p = dir / "ov.safetensors";
  write_raw(p,
            R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
            24);
  expect_open_error(p, {"a and b overlap"});
}

TEST(Safetensors, ReadsTheFixture) {
  const fs::path p = fs::path(MLASERVE_TEST_DATA) / "tiny-glm5" / "model.safetensors";
  const SafetensorsFile f = SafetensorsFile::open(p);
  const TensorInfo* q_b = f.find("model.layers.0.self_attn.q_b_proj.weight");
  ASSERT_NE(q_b, nullptr);
  EXPECT_EQ(q_b->shape, (std::vector<int64_t>{384, 96}));
  EXPECT_EQ(q_b->dtype, DType::kBF16);
  EXPECT_EQ(q_b->nbytes, 384u * 96 * 2);
  const TensorInfo* embed = f.find("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->shape, (std::vector<int64_t>{1024, 256}));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_NE(f.find("model.layers.0.self_attn.indexer.wq_b.weight"), nullptr);
  EXPECT_EQ(f.find("model.layers.1.self_attn.indexer.wq_b.weight"), nullptr);  // a shared layer
}

}  // namespace
}  // namespace mls::io
