// Conformance against Hugging Face transformers (float64 goldens in tests/data/<fixture>).
// Tolerance (DESIGN.md): relative L2 error of logits ≤ 1e-4 on the CPU, identical greedy tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "engine/simple_generator.h"
#include "golden.h"
#include "io/safetensors.h"
#include "model/model.h"

namespace mls {
namespace {

constexpr double kTol = 1e-4;

const std::string kData = MLASERVE_TEST_DATA;

using golden::as_f32;
using golden::as_i32;

double rel_l2(const float* got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = kData + "/" + GetParam();
    model_ = Model::load(dir_, {});
    golden_ = std::make_unique<io::SafetensorsFile>(
        io::SafetensorsFile::open(dir_ + "/golden.safetensors"));
  }
  const io::TensorInfo& g(const std::string& name) {
    const io::TensorInfo* t = golden_->find(name);
    EXPECT_NE(t, nullptr) << name;
    return *t;
  }
  Tensor prefill(const std::vector<int32_t>& ids, const ForwardObserver& obs = nullptr) {
    KvCache kv = KvCache::allocate(model_->config(), 1, static_cast<int64_t>(ids.size()),
                                   DType::kF32, model_->allocator());
    ForwardBatch b;
    b.token_ids = ids;
    b.seqs.push_back({.num_cached = 0,
                      .num_new = static_cast<int64_t>(ids.size()),
                      .block_table = {0},
                      .logits = SequenceChunk::Logits::kAll});
    return model_->forward(b, kv, obs);
  }

  std::string dir_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<io::SafetensorsFile> golden_;
};

TEST_P(Conformance, PrefillLogits) {
  for (int i = 0; i < 4; ++i) {
    const auto ids = as_i32(g(fmt::format("prefill.{}.input_ids", i)));
    const auto want = as_f32(g(fmt::format("prefill.{}.logits", i)));
    Tensor logits = prefill(ids);
    ASSERT_EQ(logits.numel(), static_cast<int64_t>(want.size()));
    const double err = rel_l2(logits.data<float>(), want);
    RecordProperty(fmt::format("prefill{}_rel_err", i), fmt::format("{:.3e}", err));
    std::printf("%s prefill.%d (T=%zu) rel_err %.3e\n", GetParam().c_str(), i, ids.size(), err);
    EXPECT_LE(err, kTol) << "prefill." << i;
  }
}

TEST_P(Conformance, HiddenStatesLayerByLayer) {
  const auto ids = as_i32(g("prefill.2.input_ids"));
  const int64_t L = model_->config().num_hidden_layers;
  std::map<std::string, std::vector<float>> got;
  prefill(ids, [&](std::string_view name, const Tensor& t) {
    got[std::string(name)] = std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
  });
  for (int64_t k = 0; k <= L; ++k) {
    const std::string ours = k == 0   ? "embed"
                             : k == L ? "final_norm"
                                      : fmt::format("layer.{}", k - 1);
    const auto want = as_f32(g(fmt::format("prefill.2.hidden.{}", k)));
    ASSERT_EQ(got[ours].size(), want.size()) << ours;
    EXPECT_LE(rel_l2(got[ours].data(), want), kTol) << "hidden." << k << " (" << ours << ")";
  }
}

TEST_P(Conformance, GreedyGenerationWithKvCache) {
  const auto prompt = as_i32(g("generate.prompt_ids"));
  const auto want_ids = as_i32(g("generate.output_ids"));
  const auto want_logits = as_f32(g("generate.step_logits"));
  ModelRunner runner({.model = dir_});
  GreedyResult r = generate_greedy(runner, prompt, static_cast<int64_t>(want_ids.size()), {}, true);
  EXPECT_EQ(r.output_ids, want_ids);
  ASSERT_EQ(r.step_logits.size(), want_ids.size());
  std::vector<float> flat;
  for (const auto& row : r.step_logits) flat.insert(flat.end(), row.begin(), row.end());
  ASSERT_EQ(flat.size(), want_logits.size());
  const double err = rel_l2(flat.data(), want_logits);
  std::printf("%s generate step_logits rel_err %.3e\n", GetParam().c_str(), err);
  EXPECT_LE(err, kTol);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Conformance, golden::kFixtures, golden::test_name);

}  // namespace
}  // namespace mls
