#include "tokenizer/incremental_detokenizer.h"

#include <gtest/gtest.h>

#include "test_data.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace mls::tok {
namespace {

class IncrementalTest : public ::testing::TestWithParam<std::string> {};

TEST_P(IncrementalTest, ConcatenationEqualsFullDecode) {
  const Tokenizer tok = Tokenizer::from_dir(kTestData / GetParam());
  const auto golden = nlohmann::json::parse(read_text_file(kTestData / GetParam() / "golden.json"));
  for (const auto& c : golden["cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    for (bool skip : {false, true}) {
      IncrementalDetokenizer detok(tok, skip);
      std::string all;
      for (int32_t id : ids) {
        const std::string piece = detok.push(id);
        ASSERT_TRUE(is_valid_utf8(piece));
        all += piece;
      }
      all += detok.flush();
      EXPECT_EQ(all, tok.decode(ids, skip)) << c["text"].get<std::string>().substr(0, 80);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, IncrementalTest, ::testing::Values("tok-glm", "tok-ds"),
                         [](const auto& info) { return info.param == "tok-glm" ? "glm" : "ds"; });

// Feeds an emoji one byte-token at a time: nothing may come out until the character is whole.
TEST(IncrementalDetokenizer, HoldsPartialCharacters) {
  const Tokenizer tok = Tokenizer::from_dir(kTestData / "tok-glm");
  const std::string rocket = "\xF0\x9F\x9A\x80";
  std::vector<int32_t> ids;
  for (unsigned char b : rocket)
    ids.push_back(*tok.token_to_id(byte_level_encode(std::string(1, b))));
  IncrementalDetokenizer detok(tok, false);
  EXPECT_EQ(detok.push(ids[0]), "");
  EXPECT_EQ(detok.push(ids[1]), "");
  EXPECT_EQ(detok.push(ids[2]), "");
  EXPECT_EQ(detok.push(ids[3]), rocket);
  EXPECT_EQ(detok.flush(), "");
  // A truncated character at the end becomes one replacement character, as in decode().
  EXPECT_EQ(detok.push(ids[0]), "");
  EXPECT_EQ(detok.flush(), "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace mls::tok
