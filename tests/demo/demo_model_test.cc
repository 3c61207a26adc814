// The bundled demo model (models/demo-glm5, built by tools/demo-model): mlaserve on the CPU must
// reproduce transformers' greedy output (float32, eager, CPU) for the 20 golden chat prompts
// exactly, and rendering those chats with the model's template then tokenizing must give the
// golden prompt ids. HeldOutAccuracy decodes the first 100 held-out samples and prints the
// exact-match accuracy (tool name + arguments, arithmetic answers, ...) by category.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "engine/model_runner.h"
#include "engine/simple_generator.h"
#include "tokenizer/tokenizer.h"

namespace mls {
namespace {

using nlohmann::ordered_json;

const std::string kModel = std::string(MLASERVE_SOURCE_DIR) + "/models/demo-glm5";

const ordered_json& golden() {
  static const ordered_json g = [] {
    std::ifstream f(kModel + "/golden.json");
    return ordered_json::parse(f);
  }();
  return g;
}

ordered_json chat_request(const ordered_json& sample) {
  ordered_json r;
  r["messages"] = sample["messages"];
  if (!sample["tools"].is_null()) r["tools"] = sample["tools"];
  r["add_generation_prompt"] = true;
  r["chat_template_kwargs"] = {{"enable_thinking", sample["enable_thinking"].get<bool>()}};
  return r;
}

std::vector<int32_t> ids_of(const ordered_json& a) {
  return a.get<std::vector<int32_t>>();
}

TEST(DemoModel, TemplateAndTokenizerGiveGoldenPromptIds) {
  const auto tmpl = chat::ChatTemplate::from_dir(kModel);
  const auto tok = tok::Tokenizer::from_dir(kModel);
  ASSERT_EQ(golden()["prompts"].size(), 20u);
  for (const auto& p : golden()["prompts"]) {
    const std::string text = chat::render_chat(tmpl, chat_request(p));
    EXPECT_EQ(text, p["prompt_text"].get<std::string>()) << p["id"];
    EXPECT_EQ(tok.encode(text, false), ids_of(p["prompt_ids"])) << p["id"];
  }
}

TEST(DemoModel, GreedyOutputEqualsTransformers) {
  ModelRunner runner({.model = kModel});
  const auto& eos = runner.config().eos_token_ids;
  const std::vector<int64_t> want_eos = golden()["eos_token_ids"].get<std::vector<int64_t>>();
  for (int64_t e : want_eos) EXPECT_NE(std::find(eos.begin(), eos.end(), e), eos.end()) << e;
  int same = 0;
  for (const auto& p : golden()["prompts"]) {
    const auto out = generate_greedy(runner, ids_of(p["prompt_ids"]), 64, eos).output_ids;
    EXPECT_EQ(out, ids_of(p["output_ids"])) << p["id"] << " (" << p["category"] << ")";
    same += out == ids_of(p["output_ids"]);
  }
  std::printf("demo-glm5: %d/%zu golden greedy sequences identical to transformers\n", same,
              golden()["prompts"].size());
}

TEST(DemoModel, HeldOutAccuracy) {
  const auto tmpl = chat::ChatTemplate::from_dir(kModel);
  const auto tok = tok::Tokenizer::from_dir(kModel);
  ModelRunner runner({.model = kModel});
  const auto& eos = runner.config().eos_token_ids;
  std::map<std::string, std::pair<int, int>> cats;  // category -> (correct, total)
  int correct = 0, total = 0, agree_torch = 0;
  for (const auto& s : golden()["heldout_eval"]) {
    const auto prompt = tok.encode(chat::render_chat(tmpl, chat_request(s)), false);
    EXPECT_EQ(prompt, ids_of(s["prompt_ids"])) << s["id"];
    const auto target = ids_of(s["target_ids"]);
    const auto out =
        generate_greedy(runner, prompt, static_cast<int64_t>(target.size()) + 8, eos).output_ids;
    const bool ok = out == target;
    auto& c = cats[s["category"].get<std::string>()];
    c.first += ok;
    c.second += 1;
    correct += ok;
    total += 1;
    agree_torch += ok == s["torch_exact"].get<bool>();
  }
  for (const auto& [name, c] : cats)
    std::printf("demo-glm5 held-out %-12s %3d/%3d = %.3f\n", name.c_str(), c.first, c.second,
                static_cast<double>(c.first) / c.second);
  std::printf("demo-glm5 held-out all          %3d/%3d = %.3f (agrees with PyTorch on %d/%d)\n",
              correct, total, static_cast<double>(correct) / total, agree_torch, total);
  EXPECT_GE(static_cast<double>(correct) / total, 0.8);
}

}  // namespace
}  // namespace mls
