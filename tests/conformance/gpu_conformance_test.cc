// Conformance of the CUDA backend (DESIGN.md: bf16 activations, fp32 accumulation, FP8 GEMMs for
// FP8 checkpoints), by the criterion decided in issue 14:
//   1. Random-weight fixtures, teacher-forced (every row of logits computed from the golden's
//      own tokens, so one early difference cannot cascade): per fixture and row — each prefill
//      and the decode steps — the relative L2 error against the transformers float64 golden is
//      at most 1.25 × that of transformers itself in the same precision on the same GPU, and at
//      most 2e-2 where transformers is within 2e-2. Transformers' own error on a row is the
//      largest over its equally valid runs (eager and SDPA attention; a batch of two): random
//      weights put near-ties in MoE routing and the DSA top-k that bf16 rounding tips either
//      way, transformers' included (tiny-dsv3 prefill.2: 1.19e-2 eager, 2.34e-2 SDPA), so one
//      run of it is one draw of a coin the criterion would otherwise ask us to match. The
//      yardstick is checked in beside each
//      fixture (tests/data/<fixture>/transformers_error.json, written on the GPU by
//      bench/hf_fixture_error.py --write): bf16 for bf16 fixtures; for FP8 fixtures bf16 over
//      the block-dequantised weights with DeepSeek-style FP8 activation quantisation emulated
//      (transformers' fine-grained FP8 path does not run there; ../shared/GPU-NOTES.md).
//   2. The trained demo model: greedy output on the GPU equals the CPU's, token for token, on
//      the 20 golden prompts and the first 100 held-out samples.
// Skips visibly without a GPU.
// The GPU has one DSA tie order, the serving one (ops/indexer_topk.h): bf16 noise moves near-tied
// keys across the cut anyway; the CPU suite counts the exact ties (conformance_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "engine/simple_generator.h"
#include "golden.h"
#include "io/safetensors.h"
#include "test_data.h"
#include "test_gpu.h"

namespace mls {
namespace {

using golden::as_f32;
using golden::as_i32;

class GpuConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device here";
    dir_ = kTestData.string() + "/" + GetParam();
    yardstick_ = golden::yardstick(dir_);
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
  void expect_row(const std::string& row, const float* got, const std::vector<float>& want) {
    ASSERT_TRUE(yardstick_["rows"].contains(row)) << "the yardstick has no row " << row;
    const double hf = yardstick_["rows"][row].get<double>();
    const double bound = golden::gpu_bound(hf);
    const double err = golden::rel_l2(got, want);
    std::printf("%s %s: rel_err %.3e, transformers %.3e (%s), bound %.3e\n", GetParam().c_str(),
                row.c_str(), err, hf, yardstick_["precision"].get<std::string>().c_str(), bound);
    EXPECT_LE(err, bound) << row << ": transformers' own error is " << hf;
  }

  std::string dir_;
  nlohmann::json yardstick_;
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
    expect_row(fmt::format("prefill.{}", i), logits.data<float>(),
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
  expect_row("decode", got.data(), want);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GpuConformance, golden::kFixtures, golden::test_name);

// The trained demo model: the GPU's greedy tokens are the CPU's.
TEST(GpuConformanceDemo, GreedyEqualsTheCpuOnGoldenPromptsAndHeldOutSamples) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device here";
  const std::string model = std::string(MLASERVE_SOURCE_DIR) + "/models/demo-glm5";
  std::ifstream f(model + "/golden.json");
  const nlohmann::json golden = nlohmann::json::parse(f);
  ModelRunner cpu({.model = model});
  ModelRunner gpu({.model = model, .device = Device::cuda(0)});
  const auto& eos = cpu.config().eos_token_ids;
  int same = 0, total = 0;
  const auto compare = [&](const nlohmann::json& s, int64_t max_tokens) {
    const auto prompt = s["prompt_ids"].get<std::vector<int32_t>>();
    const auto want = generate_greedy(cpu, prompt, max_tokens, eos).output_ids;
    const auto got = generate_greedy(gpu, prompt, max_tokens, eos).output_ids;
    EXPECT_EQ(got, want) << s["id"];
    same += got == want;
    ++total;
  };
  for (const auto& p : golden["prompts"]) compare(p, 64);
  int held_out = 0;
  for (const auto& s : golden["heldout_eval"]) {
    if (held_out++ == 100) break;
    compare(s, static_cast<int64_t>(s["target_ids"].size()) + 8);
  }
  EXPECT_EQ(total, 120);
  std::printf("demo-glm5: GPU greedy equals the CPU's on %d/%d sequences\n", same, total);
}

}  // namespace
}  // namespace mls
