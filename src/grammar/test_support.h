// Helpers shared by the grammar tests: a byte-level vocabulary, a random multi-byte one, the
// demo model's vocabulary, compiling GBNF against them, whole-string matching, the reference
// mask, the shortest distance to a complete output, and a JSON Schema validator.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/gbnf_parser.h"
#include "grammar/grammar.h"
#include "grammar/vocabulary.h"
#include "tokenizer/tokenizer.h"

namespace mls::grammar::test {

// Every byte as a token (ids 0..255), then `extra` tokens, then one special token ("<eos>").
inline std::shared_ptr<const Vocabulary> byte_vocab(const std::vector<std::string>& extra = {}) {
  std::vector<Vocabulary::Token> t;
  for (int b = 0; b < 256; ++b) t.push_back({std::string(1, static_cast<char>(b)), true});
  for (const std::string& e : extra) t.push_back({e, true});
  t.push_back({"<eos>", false});
  return std::make_shared<const Vocabulary>(std::move(t));
}

// Every byte, then `n` random distinct multi-byte tokens in the manner of a byte-level BPE
// vocabulary for JSON and text: word pieces (with a leading space or not), digits, runs of JSON
// punctuation glued to words or quotes (so that tokens run across string ends, members and
// nesting levels), whitespace runs, escapes, and UTF-8 (whole characters and cut ones); then one
// special token.
inline std::shared_ptr<const Vocabulary> random_vocab(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::set<std::string> seen;
  std::vector<Vocabulary::Token> t;
  for (int b = 0; b < 256; ++b) t.push_back({std::string(1, static_cast<char>(b)), true});
  const char* pieces[] = {"\"",  ":",  ",",   "{",  "}",  "[",  "]",    " ",    "\n",    "  ",
                          "\\n", "\\", "\\u", "-",  ".",  "e",  "true", "null", "false", "0",
                          "12",  "5",  "\"",  "\"", "\t", ": ", ", ",   "\n  "};
  const char* utf8[] = {"\xC3\xA9", "\xE6\x97\xA5", "\xF0\x9F\x98\x80", "\xD0\xBF"};
  const std::string letters = "etaoinsrlcdxyz";
  while (static_cast<int>(t.size()) < 256 + n) {
    std::string s;
    const int parts = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < parts; ++i) {
      const int kind = static_cast<int>(rng() % 4);
      if (kind == 0) {
        if (rng() % 2) s += ' ';
        for (int k = 1 + static_cast<int>(rng() % 5); k > 0; --k)
          s += letters[rng() % letters.size()];
      } else if (kind == 1) {
        s += std::to_string(rng() % 1000);
      } else if (kind == 2) {
        s += pieces[rng() % std::size(pieces)];
      } else {
        s += utf8[rng() % std::size(utf8)];
        if (rng() % 3 == 0) s.pop_back();
      }
    }
    if (s.size() > 1 && seen.insert(s).second) t.push_back({s, true});
  }
  t.push_back({"<eos>", false});
  return std::make_shared<const Vocabulary>(std::move(t));
}

inline std::shared_ptr<const Vocabulary> demo_vocab() {
  static const auto v = [] {
    const auto tok =
        tok::Tokenizer::from_dir(std::string(MLASERVE_SOURCE_DIR) + "/models/demo-glm5");
    return std::make_shared<const Vocabulary>(Vocabulary::from_tokenizer(tok, 1400));
  }();
  return v;
}

inline std::shared_ptr<CompiledGrammar> compile(std::string_view gbnf,
                                                std::shared_ptr<const Vocabulary> v = nullptr) {
  return std::make_shared<CompiledGrammar>(Grammar::from_rules(parse_gbnf(gbnf)),
                                           v ? std::move(v) : byte_vocab());
}

inline bool matches(CompiledGrammar& g, std::string_view s) {
  const int32_t st = g.next(g.initial_state(), s);
  return st != CompiledGrammar::kDead && g.accepting(st);
}

inline bool is_prefix(CompiledGrammar& g, std::string_view s) {
  return g.next(g.initial_state(), s) != CompiledGrammar::kDead;
}

inline bool allowed(const std::vector<uint32_t>& mask, int32_t t) {
  return (mask[static_cast<size_t>(t) >> 5] >> (t & 31)) & 1u;
}

// The mask by definition, the oracle of CompiledGrammar::fill_mask: token t is allowed exactly
// when it is matchable and its bytes lead from `state` to a live state.
inline std::vector<uint32_t> reference_mask(CompiledGrammar& g, int32_t state) {
  const Vocabulary& v = g.vocab();
  std::vector<uint32_t> mask(static_cast<size_t>(v.mask_words()), 0u);
  for (int32_t t = 0; t < v.size(); ++t)
    if (v.token(t).matchable && g.next(state, v.token(t).bytes) != CompiledGrammar::kDead)
      mask[static_cast<size_t>(t) >> 5] |= 1u << (t & 31);
  return mask;
}

// Fewest bytes from `state` to an accepting state (breadth-first over byte transitions), or -1
// beyond `limit`.
inline int distance_to_end(CompiledGrammar& g, int32_t state, int limit = 4096) {
  std::map<int32_t, int> dist{{state, 0}};
  std::deque<int32_t> q{state};
  while (!q.empty()) {
    const int32_t s = q.front();
    q.pop_front();
    if (g.accepting(s)) return dist[s];
    if (dist[s] >= limit) continue;
    for (int b = 0; b < 256; ++b) {
      const int32_t n = g.next(s, static_cast<uint8_t>(b));
      if (n == CompiledGrammar::kDead || dist.count(n)) continue;
      dist[n] = dist[s] + 1;
      q.push_back(n);
    }
  }
  return -1;
}

// A JSON Schema validator for the subset json_schema.h supports (the reference the generated
// outputs are checked against, written from the specification rather than from the converter).
class SchemaValidator {
 public:
  explicit SchemaValidator(const nlohmann::ordered_json& root) : root_(root) {}

  bool valid(const nlohmann::ordered_json& v) const { return check(v, root_); }

 private:
  using J = nlohmann::ordered_json;

  static int64_t code_points(const std::string& s) {
    int64_t n = 0;
    for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return n;
  }

  static bool type_ok(const J& v, const std::string& t) {
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "integer") return v.is_number_integer();
    if (t == "number") return v.is_number();
    if (t == "boolean") return v.is_boolean();
    if (t == "null") return v.is_null();
    return false;
  }

  const J& resolve(const std::string& ref) const {
    const J* t = &root_;
    size_t pos = 1;
    while (pos < ref.size()) {
      const size_t next = std::min(ref.find('/', pos + 1), ref.size());
      t = &(*t)[ref.substr(pos + 1, next - pos - 1)];
      pos = next;
    }
    return *t;
  }

  bool check(const J& v, const J& s) const {
    if (s.is_boolean()) return s.get<bool>();
    if (s.contains("$ref")) return check(v, resolve(s["$ref"].get<std::string>()));
    if (s.contains("const") && v != s["const"]) return false;
    if (s.contains("enum")) {
      bool any = false;
      for (const J& e : s["enum"]) any = any || e == v;
      if (!any) return false;
    }
    for (const char* key : {"anyOf", "oneOf"})
      if (s.contains(key)) {
        int n = 0;
        for (const J& sub : s[key]) n += check(v, sub);
        if (n == 0) return false;
      }
    if (s.contains("allOf"))
      for (const J& sub : s["allOf"])
        if (!check(v, sub)) return false;
    if (s.contains("type")) {
      const J& t = s["type"];
      bool ok = false;
      if (t.is_string()) ok = type_ok(v, t.get<std::string>());
      for (const J& one : t.is_array() ? t : J::array())
        ok = ok || type_ok(v, one.get<std::string>());
      if (!ok) return false;
    }
    if (v.is_string()) {
      const int64_t n = code_points(v.get<std::string>());
      if (s.contains("minLength") && n < s["minLength"].get<int64_t>()) return false;
      if (s.contains("maxLength") && n > s["maxLength"].get<int64_t>()) return false;
    }
    if (v.is_array()) {
      const auto n = static_cast<int64_t>(v.size());
      if (s.contains("minItems") && n < s["minItems"].get<int64_t>()) return false;
      if (s.contains("maxItems") && n > s["maxItems"].get<int64_t>()) return false;
      if (s.contains("prefixItems")) {
        const J& p = s["prefixItems"];
        if (v.size() != p.size()) return false;  // the converter writes exact tuples
        for (size_t i = 0; i < p.size(); ++i)
          if (!check(v[i], p[i])) return false;
      } else if (s.contains("items")) {
        for (const J& e : v)
          if (!check(e, s["items"])) return false;
      }
    }
    const bool object_keywords = s.contains("properties") || s.contains("required") ||
                                 s.contains("additionalProperties") ||
                                 s.value("type", J()) == "object";
    if (v.is_object() && object_keywords) {
      const J props = s.value("properties", J::object());
      for (const J& r : s.value("required", J::array()))
        if (!v.contains(r.get<std::string>())) return false;
      const J addl = s.value("additionalProperties", J());
      for (const auto& [k, e] : v.items()) {
        if (props.contains(k)) {
          if (!check(e, props[k])) return false;
        } else if (addl.is_object()) {
          if (!check(e, addl)) return false;
        } else if (!(addl.is_boolean() && addl.get<bool>())) {
          // Absent or false: the converter's closed objects.
          return false;
        }
      }
    }
    return true;
  }

  nlohmann::ordered_json root_;
};

}  // namespace mls::grammar::test
