#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace mls::tok {
namespace {

TEST(Utf8, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(utf8_lossy("a\xF0\x9F"
                       "b"),
            "a\xEF\xBF\xBD"
            "b");                                                 // truncated 4-byte: one U+FFFD
  EXPECT_EQ(utf8_lossy("\xC0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong: two
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(utf8_lossy("h\xC3\xA9"), "h\xC3\xA9");
}

TEST(Utf8, SettledPrefixHoldsOnlyCompletableTails) {
  EXPECT_EQ(utf8_settled_prefix("ab\xF0\x9F\x9A"), 2u);
  EXPECT_EQ(utf8_settled_prefix("ab\xF0\x41"), 4u);  // already invalid: settled
  EXPECT_EQ(utf8_settled_prefix("\xE4\xB8\xAD"), 3u);
}

TEST(Utf8, CodePointRoundTrip) {
  const std::string s = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x9A\x80";
  const std::u32string u = utf8_to_u32(s);
  EXPECT_EQ(u, (std::u32string{U'a', U'\u00e9', U'\u4e2d', U'\U0001F680'}));
  EXPECT_EQ(u32_to_utf8(u), s);
  EXPECT_TRUE(is_valid_utf8(s));
  EXPECT_FALSE(is_valid_utf8("\x80"));
}

TEST(Utf8, ReadsOneWellFormedCodePoint) {
  const CodePoint e = read_utf8("\xC3\xA9x");
  EXPECT_EQ(e.cp, U'\u00e9');
  EXPECT_EQ(e.len, 2u);
  EXPECT_EQ(read_utf8("\xF0\x9F\x9A\x80").len, 4u);
  EXPECT_EQ(read_utf8("").len, 0u);
  for (const char* bad : {"\xC0\x80", "\xED\xA0\x80", "\x80", "\xF0\x9F", "\xF4\x90\x80\x80"})
    EXPECT_EQ(read_utf8(bad).len, 0u) << bad;
}

}  // namespace
}  // namespace mls::tok
