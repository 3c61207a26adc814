#include "grammar/utf8_ranges.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace mls::grammar {
namespace {

constexpr char32_t kMaxCp = 0x10FFFF;
constexpr char32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

int encoded_len(char32_t cp) {
  return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

std::string encode(char32_t cp) {
  std::string s;
  tok::append_utf8(s, cp);
  return s;
}

// [lo, hi] of one encoded length, split until every byte position spans a plain range (the
// method of Rust's regex-syntax Utf8Sequences).
void split_same_len(char32_t lo, char32_t hi, std::vector<ByteSequence>& out) {
  const int n = encoded_len(lo);
  for (int i = 1; i < n; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_same_len(lo, lo | m, out);
        split_same_len((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split_same_len(lo, (hi & ~m) - 1, out);
        split_same_len(hi & ~m, hi, out);
        return;
      }
    }
  }
  const std::string a = encode(lo), b = encode(hi);
  ByteSequence seq;
  for (size_t i = 0; i < a.size(); ++i)
    seq.push_back({static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i])});
  out.push_back(std::move(seq));
}

}  // namespace

std::vector<std::pair<char32_t, char32_t>> normalise_ranges(
    std::vector<std::pair<char32_t, char32_t>> ranges, bool negated) {
  for (auto& [lo, hi] : ranges) {
    if (lo > hi) std::swap(lo, hi);
    hi = std::min(hi, kMaxCp);
  }
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<char32_t, char32_t>> merged;
  for (const auto& r : ranges) {
    if (r.first > kMaxCp) continue;
    if (!merged.empty() && r.first <= merged.back().second + 1)
      merged.back().second = std::max(merged.back().second, r.second);
    else
      merged.push_back(r);
  }
  if (negated) {
    std::vector<std::pair<char32_t, char32_t>> comp;
    char32_t next = 0;
    for (const auto& [lo, hi] : merged) {
      if (lo > next) comp.emplace_back(next, lo - 1);
      next = hi + 1;
    }
    if (next <= kMaxCp) comp.emplace_back(next, kMaxCp);
    merged = std::move(comp);
  }
  std::vector<std::pair<char32_t, char32_t>> out;
  for (const auto& [lo, hi] : merged) {
    if (hi < kSurrogateLo || lo > kSurrogateHi) {
      out.emplace_back(lo, hi);
      continue;
    }
    if (lo < kSurrogateLo) out.emplace_back(lo, kSurrogateLo - 1);
    if (hi > kSurrogateHi) out.emplace_back(kSurrogateHi + 1, hi);
  }
  return out;
}

std::vector<ByteSequence> utf8_sequences(char32_t lo, char32_t hi) {
  std::vector<ByteSequence> out;
  constexpr char32_t kLenEnds[] = {0x7F, 0x7FF, 0xFFFF, kMaxCp};
  char32_t start = lo;
  for (char32_t end : kLenEnds) {
    if (start > hi) break;
    if (start > end) continue;
    split_same_len(start, std::min(hi, end), out);
    start = end + 1;
  }
  return out;
}

}  // namespace mls::grammar
