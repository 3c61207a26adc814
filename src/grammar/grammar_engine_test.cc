// Structured output through the engine on the CPU with the trained demo model: a constrained
// request's text always parses and validates, on the host sampler and on the op path
// (ops::apply_token_mask before ops::sample_rows), for greedy, seeded sampling and n > 1 (each
// sample its own matcher), and the request ends with "stop" once the grammar is complete. ~5 s.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "grammar/grammar_compiler.h"
#include "grammar/grammar_matcher.h"
#include "grammar/test_support.h"

namespace mls::grammar {
namespace {

using ojson = nlohmann::ordered_json;

const std::string kDemo = std::string(MLASERVE_SOURCE_DIR) + "/models/demo-glm5";

ModelRunner& demo_runner() {
  static ModelRunner r(RunnerOptions{.model = kDemo, .device = Device::cpu()});
  return r;
}

struct Sample {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
};

std::vector<Sample> generate(std::shared_ptr<const TokenConstraint> c, SamplingParams p,
                             bool device_sampling) {
  ModelRunner& r = demo_runner();
  r.allocate_kv_cache(256, 16);
  Engine engine(r, {.limits = {}, .device_sampling = device_sampling});
  const auto tok = tok::Tokenizer::from_dir(kDemo);
  std::vector<Sample> out(static_cast<size_t>(p.n));
  engine.add_request(
      {.id = "r",
       .prompt_ids =
           tok.encode("[gMASK]<sop><|user|>Describe Paris as JSON.<|assistant|></think>", false),
       .params = p,
       .on_token =
           [&](const TokenEvent& ev) {
             if (ev.token_id >= 0) out[ev.sample_index].tokens.push_back(ev.token_id);
             out[ev.sample_index].finish = ev.finish;
             return Verdict::kContinue;
           },
       .constraint = std::move(c)});
  while (engine.step()) {
  }
  return out;
}

TEST(GrammarEngine, ConstrainedOutputsParseAndValidate) {
  const auto v = test::demo_vocab();
  GrammarCompiler gc(v);
  const ojson schema = ojson::parse(
      R"({"type":"object","properties":{"city":{"type":"string","maxLength":12},
          "population":{"type":"integer"},"rating":{"enum":["good","great"]},
          "tags":{"type":"array","items":{"type":"string","maxLength":6},"maxItems":3}},
          "required":["city","population","rating","tags"]})");
  const test::SchemaValidator validator(schema);
  const auto tok = tok::Tokenizer::from_dir(kDemo);
  auto proto = std::make_shared<GrammarMatcher>(gc.json_schema(schema));
  for (bool device : {false, true}) {
    SamplingParams greedy;
    greedy.temperature = 0;
    greedy.max_tokens = 300;
    SamplingParams sampled;
    sampled.temperature = 1.0;
    sampled.seed = 7;
    sampled.n = 3;
    sampled.max_tokens = 300;
    for (const SamplingParams& p : {greedy, sampled}) {
      for (const Sample& s : generate(proto, p, device)) {
        const std::string text = tok.decode(s.tokens, true);  // without the stop token
        const ojson doc = ojson::parse(text, nullptr, false);
        ASSERT_FALSE(doc.is_discarded()) << "device " << device << ": " << text;
        EXPECT_TRUE(validator.valid(doc)) << text;
        // Complete: the grammar allowed the stop token, or ended the sample itself.
        EXPECT_EQ(s.finish, FinishReason::kStop) << text;
      }
    }
  }
}

TEST(GrammarEngine, ChoiceEndsTheRequestWhenComplete) {
  GrammarCompiler gc(test::demo_vocab());
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 50;
  p.ignore_eos = true;  // only the grammar can end it
  const auto out =
      generate(std::make_shared<GrammarMatcher>(gc.choice({"Paris", "Rome", "London"})), p, true);
  const auto tok = tok::Tokenizer::from_dir(kDemo);
  const std::string text = tok.decode(out[0].tokens, false);
  EXPECT_TRUE(text == "Paris" || text == "Rome" || text == "London") << text;
  EXPECT_EQ(out[0].finish, FinishReason::kStop);
}

}  // namespace
}  // namespace mls::grammar
