#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <ctime>

#include "core/error.h"
#include "test_data.h"
#include "tokenizer/byte_level.h"

namespace mls::tok {
namespace {

// Callers keep the result in a local: a range-for over a member of the temporary would read
// freed memory (the temporary dies before the loop body runs; ASan found it).
nlohmann::json load_golden(const std::string& name) {
  return nlohmann::json::parse(read_text_file(kTestData / name / "golden.json"));
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, EncodeMatchesHuggingFace) {
  const Tokenizer tok = Tokenizer::from_dir(kTestData / GetParam());
  const nlohmann::json golden = load_golden(GetParam());
  for (const auto& c : golden["cases"]) {
    const std::string text = c["text"];
    SCOPED_TRACE(text.substr(0, 80));
    EXPECT_EQ(tok.encode(text, false), c["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(tok.encode(text, true), c["ids_add_special"].get<std::vector<int32_t>>());
  }
}

TEST_P(GoldenTest, DecodeMatchesHuggingFace) {
  const Tokenizer tok = Tokenizer::from_dir(kTestData / GetParam());
  const nlohmann::json golden = load_golden(GetParam());
  for (const auto& c : golden["cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    SCOPED_TRACE(c["text"].get<std::string>().substr(0, 80));
    EXPECT_EQ(tok.decode(ids, false), c["decode"].get<std::string>());
    EXPECT_EQ(tok.decode(ids, true), c["decode_skip_special"].get<std::string>());
  }
}

TEST_P(GoldenTest, TokensSpellLikeHuggingFace) {
  const Tokenizer tok = Tokenizer::from_dir(kTestData / GetParam());
  const nlohmann::json golden = load_golden(GetParam());
  for (const auto& c : golden["cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const auto tokens = c["tokens"].get<std::vector<std::string>>();
    ASSERT_EQ(ids.size(), tokens.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(tok.id_to_token(ids[i]), tokens[i]);
      EXPECT_EQ(tok.token_to_id(tokens[i]), ids[i]);
    }
  }
}

// Encodes ~1 MB of mixed-script text and reports throughput; the merge loop and the word cache
// must keep this far below a second.
TEST_P(GoldenTest, ThroughputOnOneMegabyte) {
  const Tokenizer tok = Tokenizer::from_dir(kTestData / GetParam());
  std::string doc;
  const auto golden = load_golden(GetParam());
  while (doc.size() < (1u << 20))
    for (const auto& c : golden["cases"]) doc += c["text"].get<std::string>() + "\n";
  // CPU time (encoding is single-threaded): wall time on a busy machine also counts other
  // processes' turns.
  const std::clock_t t0 = std::clock();
  const auto ids = tok.encode(doc, false);
  const double s = static_cast<double>(std::clock() - t0) / CLOCKS_PER_SEC;
  std::printf("[%s] %zu bytes -> %zu tokens in %.3f CPU s: %.0f tokens/s\n", GetParam().c_str(),
              doc.size(), ids.size(), s, ids.size() / s);
  EXPECT_LT(s, 3.0);
  EXPECT_EQ(tok.decode(ids, false), doc);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTest, ::testing::Values("tok-glm", "tok-ds"),
                         [](const auto& info) { return info.param == "tok-glm" ? "glm" : "ds"; });

TEST(Tokenizer, SpecialTokenAccessors) {
  const Tokenizer ds = Tokenizer::from_dir(kTestData / "tok-ds");
  const auto bos = ds.token_to_id("<｜begin▁of▁sentence｜>");
  ASSERT_TRUE(bos);
  EXPECT_TRUE(ds.is_special(*bos));
  EXPECT_FALSE(ds.is_special(*ds.token_to_id("<think>")));
  EXPECT_EQ(ds.encode("hi", true).front(), *bos);
  EXPECT_EQ(ds.vocab_size(), 1000);
}

TEST(Tokenizer, ConfigOverridesBos) {
  const auto j = nlohmann::json::parse(read_text_file(kTestData / "tok-ds" / "tokenizer.json"));
  TokenizerConfig cfg;
  cfg.bos_token = "<｜begin▁of▁sentence｜>";
  cfg.add_bos_token = false;
  const Tokenizer tok = Tokenizer::from_json(j, cfg);
  EXPECT_EQ(tok.encode("hi", true), tok.encode("hi", false));
  EXPECT_EQ(tok.bos_id(), tok.token_to_id(cfg.bos_token));
}

TEST(Tokenizer, StringMergesAndGpt2Regex) {
  // A hand-made GPT-2 style tokenizer: ByteLevel with its own regex, merges as "a b" strings.
  nlohmann::json j = {
      {"model",
       {{"type", "BPE"},
        {"vocab", nlohmann::json::object()},
        {"merges", {"h e", "l l", "he ll", "Ġ w"}}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens", {{{"id", 300}, {"content", "<eot>"}, {"special", true}}}}};
  int32_t id = 0;
  for (int b = 0; b < 256; ++b) j["model"]["vocab"][byte_to_symbol(b)] = id++;
  for (const char* t : {"he", "ll", "hell", "Ġw"}) j["model"]["vocab"][t] = id++;
  const Tokenizer tok = Tokenizer::from_json(j);
  const auto ids = tok.encode("hello world<eot>", false);
  std::vector<std::string> spelled;
  for (int32_t i : ids) spelled.push_back(tok.id_to_token(i));
  EXPECT_EQ(spelled, (std::vector<std::string>{"hell", "o", "Ġw", "o", "r", "l", "d", "<eot>"}));
  EXPECT_EQ(tok.decode(ids, true), "hello world");
}

// tokenizer.json ids index the tokenizer's tables: negative, huge, fractional or non-numeric ids
// are a ConfigError naming where they are, never an out-of-bounds write or a huge allocation.
TEST(Tokenizer, RejectsBadIds) {
  const auto base = nlohmann::json::parse(read_text_file(kTestData / "tok-glm" / "tokenizer.json"));
  const nlohmann::json bad_ids[] = {-1,  int64_t{1} << 31, uint64_t{1} << 63, 4194304, 1.5,
                                    "7", nullptr};
  for (const auto& id : bad_ids) {
    SCOPED_TRACE(id.dump());
    const auto expect_rejected = [&](nlohmann::json j, const char* where) {
      try {
        Tokenizer::from_json(j);
        ADD_FAILURE() << "accepted";
      } catch (const ConfigError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(std::string(where) + ": token id " + id.dump() +
                            " is not an integer in [0, 4194304)"),
                  std::string::npos)
            << what;
      }
    };
    nlohmann::json j = base;
    j["added_tokens"][0]["id"] = id;
    expect_rejected(j, "added_tokens");
    j = base;
    j["model"]["vocab"]["zzz-new"] = id;
    expect_rejected(j, "model.vocab");
  }
  nlohmann::json j = base;
  j["model"]["vocab"] = nlohmann::json::array();
  EXPECT_THROW(Tokenizer::from_json(j), ConfigError);
}

// fuzz_tokenizer: a post-processor's special token id that no token has; encode emitted it and
// decode of encode's own output threw.
TEST(Tokenizer, RejectsPostProcessorIdsOutsideTheVocabulary) {
  auto j = nlohmann::json::parse(read_text_file(kTestData / "tok-glm" / "tokenizer.json"));
  const int32_t n = Tokenizer::from_json(j).vocab_size();
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {n - 1}}, {"tokens", {"<s>"}}}}}}};
  EXPECT_EQ(Tokenizer::from_json(j).encode("", true), (std::vector<int32_t>{n - 1}));
  for (int32_t id : {n, n + 315}) {
    j["post_processor"]["special_tokens"]["<s>"]["ids"] = {id};
    try {
      Tokenizer::from_json(j);
      ADD_FAILURE() << "accepted id " << id;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(
                    fmt::format("special token id {} is not in the vocabulary (size {})", id, n)),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(Tokenizer, RejectsBadInput) {
  const Tokenizer tok = Tokenizer::from_dir(kTestData / "tok-glm");
  EXPECT_THROW(tok.encode("\xff\xfe", false), InvalidArgument);
  const int32_t bad[] = {123456};
  EXPECT_THROW(tok.decode(bad, false), InvalidArgument);
  EXPECT_THROW(Tokenizer::from_dir(kTestData / "no-such-dir"), IoError);
}

}  // namespace
}  // namespace mls::tok
