// Conformance of the CUDA backend against the transformers float64 goldens (DESIGN.md: bf16
// activations, fp32 accumulation, FP8 GEMMs for FP8 checkpoints). Teacher-forced: every row of
// logits is computed from the golden's own tokens, so one early difference cannot cascade.
// Per row: relative L2 error ≤ 2e-2 over the whole batch of rows, and the golden's top-1 token
// wherever its top-two gap exceeds 0.05 × that row's standard deviation (smaller gaps are within
// bf16 noise). Skips visibly without a GPU.
// Measured on an H200 (bench/RESULTS.md): rows up to T = 5 and the dense-attention fixture meet
// it; once the DSA indexer (top-8 of up to 70 keys) and MoE routing make discrete choices on
// bf16 inputs, and with FP8 activation quantisation, they do not — and transformers' own bf16
// run on the same GPU (bench/hf_fixture_error.py) misses it by the same margin.
// The GPU has one DSA tie order, the serving one (ops/indexer_topk.h): bf16 noise moves near-tied
// keys across the cut anyway; the CPU suite counts the exact ties (conformance_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "golden.h"
#include "io/safetensors.h"
#ifdef MLASERVE_CUDA_RUNTIME
#include "core/cuda_allocator.h"
#endif

namespace mls {
namespace {

constexpr double kTol = 2e-2;
constexpr double kGapFraction = 0.05;

const std::string kData = MLASERVE_TEST_DATA;

bool have_gpu() {
#ifdef MLASERVE_CUDA_RUNTIME
  return cuda_device_count() > 0;
#else
  return false;
#endif
}

using golden::as_f32;
using golden::as_i32;

struct RowCheck {
  double rel_err = 0;
  int checked = 0, agree = 0;
  std::vector<int> mismatched_rows;
};

// got and want hold `rows` rows of `vocab` logits.
RowCheck check_rows(const float* got, const std::vector<float>& want, int64_t vocab) {
  RowCheck r;
  double num = 0, den = 0;
  const int64_t rows = static_cast<int64_t>(want.size()) / vocab;
  for (int64_t i = 0; i < rows; ++i) {
    const float* g = got + i * vocab;
    const float* w = want.data() + i * vocab;
    double mean = 0, sq = 0;
    int64_t best = 0, second = -1;
    for (int64_t v = 0; v < vocab; ++v) {
      num += (static_cast<double>(g[v]) - w[v]) * (static_cast<double>(g[v]) - w[v]);
      den += static_cast<double>(w[v]) * w[v];
      mean += w[v];
      if (w[v] > w[best]) best = v;
    }
    mean /= static_cast<double>(vocab);
    for (int64_t v = 0; v < vocab; ++v) {
      sq += (w[v] - mean) * (w[v] - mean);
      if (v != best && (second < 0 || w[v] > w[second])) second = v;
    }
    const double stddev = std::sqrt(sq / static_cast<double>(vocab));
    if (w[best] - w[second] <= kGapFraction * stddev) continue;
    ++r.checked;
    const int64_t got_best = std::max_element(g, g + vocab) - g;
    if (got_best == best)
      ++r.agree;
    else
      r.mismatched_rows.push_back(static_cast<int>(i));
  }
  r.rel_err = std::sqrt(num / den);
  return r;
}

class GpuConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device here";
    dir_ = kData + "/" + GetParam();
    golden_ = std::make_unique<io::SafetensorsFile>(
        io::SafetensorsFile::open(dir_ + "/golden.safetensors"));
    runner_ = std::make_unique<ModelRunner>(RunnerOptions{
        .model = dir_, .device = Device::cuda(0), .topk_tie_order = ops::TopkTieOrder::kServing});
    vocab_ = runner_->config().vocab_size;
  }
  const io::TensorInfo& g(const std::string& name) {
    const io::TensorInfo* t = golden_->find(name);
    if (!t) raise<InvalidArgument>("{} has no {}", dir_, name);
    return *t;
  }
  void expect_rows(const std::string& what, const float* got, const std::vector<float>& want) {
    const RowCheck r = check_rows(got, want, vocab_);
    std::printf("%s %s: rel_err %.3e, top-1 %d/%d rows with a clear gap\n", GetParam().c_str(),
                what.c_str(), r.rel_err, r.agree, r.checked);
    EXPECT_LE(r.rel_err, kTol) << what;
    EXPECT_EQ(r.agree, r.checked) << what << ": first mismatched row "
                                  << (r.mismatched_rows.empty() ? -1 : r.mismatched_rows[0]);
  }

  std::string dir_;
  std::unique_ptr<io::SafetensorsFile> golden_;
  std::unique_ptr<ModelRunner> runner_;
  int64_t vocab_ = 0;
};

TEST_P(GpuConformance, PrefillLogits) {
  for (int i = 0; i < 4; ++i) {
    const auto ids = as_i32(g(fmt::format("prefill.{}.input_ids", i)));
    const int64_t T = static_cast<int64_t>(ids.size());
    runner_->allocate_kv_cache(1, T);
    ForwardBatch b;
    b.token_ids = ids;
    b.seqs.push_back(
        {.num_cached = 0, .num_new = T, .block_table = {0}, .logits = SequenceChunk::Logits::kAll});
    const Tensor logits = runner_->forward(b);
    expect_rows(fmt::format("prefill.{} (T={})", i, T), logits.data<float>(),
                as_f32(g(fmt::format("prefill.{}.logits", i))));
  }
}

// The golden's greedy continuation fed back one token per step through the paged cache (block
// size 16): every step runs the decode path, and its logits are compared with the golden's.
TEST_P(GpuConformance, TeacherForcedDecodeSteps) {
  const auto prompt = as_i32(g("generate.prompt_ids"));
  const auto out = as_i32(g("generate.output_ids"));
  const auto want = as_f32(g("generate.step_logits"));
  const int64_t bs = 16, total = static_cast<int64_t>(prompt.size() + out.size());
  const int64_t blocks = (total + bs - 1) / bs;
  runner_->allocate_kv_cache(blocks, bs);
  std::vector<int32_t> table(blocks);
  for (int64_t i = 0; i < blocks; ++i) table[i] = static_cast<int32_t>(blocks - 1 - i);
  std::vector<float> got;
  ForwardBatch b;
  b.token_ids = prompt;
  b.seqs.push_back({.num_cached = 0,
                    .num_new = static_cast<int64_t>(prompt.size()),
                    .block_table = table,
                    .logits = SequenceChunk::Logits::kLast});
  for (size_t step = 0; step < out.size(); ++step) {
    const Tensor logits = runner_->forward(b);
    got.insert(got.end(), logits.data<float>(), logits.data<float>() + vocab_);
    SequenceChunk& sc = b.seqs[0];
    sc.num_cached += sc.num_new;
    sc.num_new = 1;
    sc.prompt_len = static_cast<int64_t>(prompt.size());
    b.token_ids = {out[step]};
  }
  expect_rows(fmt::format("{} decode steps", out.size()), got.data(), want);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GpuConformance, golden::kFixtures, golden::test_name);

}  // namespace
}  // namespace mls
