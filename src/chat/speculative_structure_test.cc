// Structure-aware speculative decoding on the demo model (with its trained MTP layer): with a
// JSON Schema and with the GLM tool-call grammar (tools present, a call required), greedy output
// with MTP equals the serving engine's plain constrained output token for token, whether the
// drafts are the MTP layer's own, forced right, or forced wrong (tokens the grammar refuses,
// which end the draft before verification, and tokens it allows that the target does not
// choose); and the tool call parses the same. ~10 s.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "chat/reasoning_parser.h"
#include "chat/tool_call_grammar.h"
#include "chat/tool_parser.h"
#include "engine/engine.h"
#include "engine/speculative_generator.h"
#include "grammar/grammar_compiler.h"
#include "grammar/grammar_matcher.h"
#include "grammar/test_support.h"
#include "tokenizer/tokenizer_config.h"

namespace mls {
namespace {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

const fs::path kDemo = fs::path(MLASERVE_SOURCE_DIR) / "models/demo-glm5";
constexpr int64_t kMaxTokens = 200;

// The demo model with its trained MTP layer, loaded twice: plainly for the serving engine (the
// reference) and with its MTP layer for the speculative loop.
struct Demo {
  std::unique_ptr<ModelRunner> runner;
  std::unique_ptr<Model> mtp;
  tok::Tokenizer tok = tok::Tokenizer::from_dir(kDemo.string());
  Demo() {
    runner = std::make_unique<ModelRunner>(RunnerOptions{.model = kDemo, .device = Device::cpu()});
    LoadOptions opts;
    opts.mtp = true;
    mtp = Model::load(kDemo, opts);
  }
};

Demo& demo() {
  static Demo d;
  return d;
}

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = kMaxTokens;
  return p;
}

// Plain constrained greedy decoding through the serving engine (host sampler).
std::vector<int32_t> plain(const std::vector<int32_t>& prompt,
                           std::shared_ptr<const TokenConstraint> c) {
  ModelRunner& r = *demo().runner;
  r.allocate_kv_cache(64, 16);
  Engine engine(r, {.limits = {}, .device_sampling = false});
  std::vector<int32_t> out;
  engine.add_request({.id = "r",
                      .prompt_ids = prompt,
                      .params = greedy(),
                      .on_token =
                          [&](const TokenEvent& ev) {
                            if (ev.token_id >= 0) out.push_back(ev.token_id);
                            return Verdict::kContinue;
                          },
                      .constraint = std::move(c)});
  while (engine.step()) {
  }
  return out;
}

// Checks every kind of draft against the plain output; returns it.
std::vector<int32_t> check_drafts(const std::vector<int32_t>& prompt,
                                  const std::shared_ptr<const TokenConstraint>& c) {
  const std::vector<int32_t> ref = plain(prompt, c);
  EXPECT_FALSE(ref.empty());
  const std::vector<int64_t> stop_ids(demo().runner->config().eos_token_ids.begin(),
                                      demo().runner->config().eos_token_ids.end());
  EXPECT_TRUE(std::find(stop_ids.begin(), stop_ids.end(), ref.back()) != stop_ids.end())
      << "the grammar completes within max_tokens";
  // Per output index, a token the grammar refuses there and one it allows that is not plain
  // decoding's (none: -1), from the matcher walked along the plain output.
  const int64_t vocab = demo().runner->config().vocab_size;
  std::vector<int32_t> refused, allowed_other;
  std::unique_ptr<TokenConstraint> walk = c->clone();
  std::vector<uint32_t> mask(static_cast<size_t>((vocab + 31) / 32));
  auto is_stop = [&](int32_t t) {
    return std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end();
  };
  for (int32_t t : ref) {
    walk->fill_mask(mask);
    int32_t no = -1, other = -1;
    for (int32_t id = 0; id < vocab; ++id) {
      const bool bit = (mask[static_cast<size_t>(id >> 5)] >> (id & 31)) & 1u;
      if (is_stop(id)) continue;
      if (!bit && no < 0) no = id;
      if (bit && id != t && other < 0) other = id;
    }
    refused.push_back(no);
    allowed_other.push_back(other);
    if (!is_stop(t)) {
      EXPECT_TRUE(walk->advance(t));
    }
  }
  const auto P = static_cast<int64_t>(prompt.size());
  auto index = [&](int64_t position) { return position - P; };
  auto in_ref = [&](int64_t position) {
    return index(position) < static_cast<int64_t>(ref.size());
  };
  const DraftOverride right = [&](int64_t position, int32_t drafted) {
    return in_ref(position) ? ref[static_cast<size_t>(index(position))] : drafted;
  };
  // Right, allowed but wrong, refused, right, in turn (every kind reached for k = 1 too).
  const DraftOverride mixed = [&](int64_t position, int32_t drafted) {
    if (!in_ref(position)) return drafted;
    const auto i = static_cast<size_t>(index(position));
    const int64_t phase = position % 4;
    const int32_t other = phase == 1 ? allowed_other[i] : phase == 2 ? refused[i] : -1;
    return other < 0 ? ref[i] : other;
  };
  enum Drafts { kOwn, kRight, kMixed };
  for (int64_t k : {1, 3}) {
    for (Drafts kind : {kOwn, kRight, kMixed}) {
      const DraftOverride forced = kind == kRight ? right : kind == kMixed ? mixed : nullptr;
      SpeculativeOptions o;
      o.num_speculative_tokens = k;
      o.max_tokens = kMaxTokens;
      o.stop_ids = stop_ids;
      o.constraint = c;
      o.draft_override = forced;
      const SpeculativeResult r = generate_speculative(*demo().mtp, prompt, o);
      EXPECT_EQ(r.output_ids, ref) << "k " << k << ", drafts " << kind;
      // The MTP layer's own drafts are drawn under the grammar's mask: never refused.
      if (kind == kOwn) {
        EXPECT_EQ(r.stats.num_structure_rejected, 0);
      }
      if (kind == kRight) {
        EXPECT_EQ(r.stats.num_structure_rejected, 0);
        EXPECT_EQ(r.stats.num_accepted_tokens, r.stats.num_draft_tokens);
      }
      if (kind == kMixed) {
        EXPECT_GT(r.stats.num_structure_rejected, 0);
        EXPECT_GT(r.stats.num_accepted_tokens, 0);
        EXPECT_LT(r.stats.num_accepted_tokens, r.stats.num_draft_tokens);
      }
    }
  }
  return ref;
}

TEST(SpeculativeStructure, JsonSchemaOutputEqualsPlainDecoding) {
  grammar::GrammarCompiler gc(grammar::test::demo_vocab());
  const ojson schema = ojson::parse(
      R"({"type":"object","properties":{"city":{"type":"string","maxLength":12},
          "population":{"type":"integer"},"rating":{"enum":["good","great"]}},
          "required":["city","population","rating"]})");
  const auto c = std::make_shared<grammar::GrammarMatcher>(gc.json_schema(schema));
  const std::vector<int32_t> prompt =
      demo().tok.encode("[gMASK]<sop><|user|>Describe Paris as JSON.<|assistant|></think>", false);
  const std::vector<int32_t> out = check_drafts(prompt, c);
  const std::string text = demo().tok.decode(out, true);
  EXPECT_FALSE(ojson::parse(text, nullptr, false).is_discarded()) << text;
}

TEST(SpeculativeStructure, ToolCallEqualsPlainDecoding) {
  const ojson tools = ojson::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
      "required": ["city", "days"]}}}])");
  grammar::GrammarCompiler gc(grammar::test::demo_vocab());
  const auto c = std::make_shared<grammar::GrammarMatcher>(
      gc.gbnf(chat::tool_call_gbnf("glm47", tools, "", false)));
  const std::vector<int32_t> prompt = demo().tok.encode(
      "[gMASK]<sop><|user|>What is the weather in Paris for 3 days?<|assistant|></think>", false);
  const std::vector<int32_t> out = check_drafts(prompt, c);
  // The text before the stop token, special tokens kept (<tool_call> is one).
  const std::string text =
      demo().tok.decode(std::span(out).first(out.size() - 1), /*skip_special=*/false);
  const chat::ToolParseResult call =
      chat::ToolParser(chat::tool_call_format("glm47", tools)).parse(text);
  ASSERT_EQ(call.tool_calls.size(), 1u) << text;
  EXPECT_EQ(call.tool_calls[0].name, "get_weather");
}

// tool_choice "auto" as the server builds it (chat_completions.cc: the tool-call grammar
// triggered by the format's first marker, after the reasoning gate when the prompt opens
// <think>): on the first held-out tool-call samples, with and without thinking, the plain
// constrained output is the unconstrained one (the model's calls are well-formed, so the lazy
// grammar changes nothing) and MTP's equals it for every kind of draft; drafts the grammar
// refuses inside the call end the draft before verification.
TEST(SpeculativeStructure, AutoToolChoiceEqualsPlainDecoding) {
  const ojson golden = ojson::parse(tok::read_text_file(kDemo / "golden.json"));
  grammar::GrammarCompiler gc(grammar::test::demo_vocab());
  const auto think = demo().tok.token_to_id("<think>");
  ASSERT_TRUE(think);
  int samples = 0, thinking = 0;
  for (const ojson& s : golden["heldout_eval"]) {
    if (s["category"] != "tool_call") continue;
    if (samples++ == 4) break;
    const auto prompt = s["prompt_ids"].get<std::vector<int32_t>>();
    const ojson& tools = s["tools"];
    const bool gated = prompt.back() == *think;
    thinking += gated;
    const auto c = std::make_shared<grammar::GrammarMatcher>(
        gc.gbnf(chat::tool_call_gbnf("glm47", tools, "", true)),
        gated ? std::string(chat::kReasoningEnd) : "",
        chat::tool_call_format("glm47", tools).opener());
    SCOPED_TRACE(s["id"].get<std::string>());
    const std::vector<int32_t> out = check_drafts(prompt, c);
    EXPECT_EQ(out, plain(prompt, nullptr));
    std::string text = demo().tok.decode(std::span(out).first(out.size() - 1), false);
    if (gated) text = text.substr(text.find(chat::kReasoningEnd) + chat::kReasoningEnd.size());
    const chat::ToolParseResult call =
        chat::ToolParser(chat::tool_call_format("glm47", tools)).parse(text);
    ASSERT_EQ(call.tool_calls.size(), 1u) << text;
    EXPECT_EQ(call.content, "");
  }
  EXPECT_EQ(thinking, 2);  // of the 4
}

}  // namespace
}  // namespace mls
