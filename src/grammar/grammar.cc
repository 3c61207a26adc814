#include "grammar/grammar.h"

#include <map>
#include <unordered_map>

#include "grammar/grammar_error.h"
#include "grammar/utf8_ranges.h"

namespace mls::grammar {
namespace {

using Element = Grammar::Element;
using Seq = std::vector<Element>;

// Lowers expressions into rules of element sequences, adding helper rules for nested
// alternatives, repetitions and multi-byte character classes.
class Lowering {
 public:
  explicit Lowering(const RuleSet& rs) {
    for (const auto& [name, body] : rs.rules) {
      if (ids_.count(name)) raise<GrammarError>("grammar: rule '{}' is defined twice", name);
      ids_[name] = static_cast<int32_t>(rules_.size());
      rules_.emplace_back();
      names_.push_back(name);
    }
    const auto root = ids_.find(rs.root);
    if (root == ids_.end()) raise<GrammarError>("grammar: no '{}' rule", rs.root);
    root_ = root->second;
    for (size_t i = 0; i < rs.rules.size(); ++i) rules_[i] = alternatives_of(rs.rules[i].second);
  }

  std::vector<std::vector<Seq>> rules_;
  std::vector<std::string> names_;
  std::vector<ByteSet> sets_;
  int32_t root_ = 0;

 private:
  int32_t set_index(const ByteSet& s) {
    for (size_t i = 0; i < sets_.size(); ++i)
      if (sets_[i] == s) return static_cast<int32_t>(i);
    sets_.push_back(s);
    return static_cast<int32_t>(sets_.size() - 1);
  }

  int32_t new_rule(std::vector<Seq> alts, const std::string& name) {
    rules_.push_back(std::move(alts));
    names_.push_back(name);
    return static_cast<int32_t>(rules_.size() - 1);
  }

  std::vector<Seq> alternatives_of(const Expr& e) {
    std::vector<Seq> alts;
    if (e.kind == Expr::Kind::kAlt) {
      for (const Expr& item : e.items) {
        alts.emplace_back();
        lower(item, alts.back());
      }
    } else {
      alts.emplace_back();
      lower(e, alts.back());
    }
    return alts;
  }

  void lower_class(const Expr& e, Seq& seq) {
    const auto ranges = normalise_ranges(e.ranges, e.negated);
    if (ranges.empty()) raise<GrammarError>("grammar: a character class that matches nothing");
    ByteSet ascii;
    std::vector<ByteSequence> multi;
    for (const auto& [lo, hi] : ranges)
      for (ByteSequence& bs : utf8_sequences(lo, hi)) {
        if (bs.size() == 1) {
          for (int b = bs[0].lo; b <= bs[0].hi; ++b) ascii.set(static_cast<uint8_t>(b));
        } else {
          multi.push_back(std::move(bs));
        }
      }
    if (multi.empty()) {
      seq.push_back({Grammar::kSet, set_index(ascii)});
      return;
    }
    std::vector<Seq> alts;
    if (ascii != ByteSet{}) alts.push_back({{Grammar::kSet, set_index(ascii)}});
    for (const ByteSequence& bs : multi) {
      Seq s;
      for (const ByteRange& r : bs) {
        ByteSet set;
        for (int b = r.lo; b <= r.hi; ++b) set.set(static_cast<uint8_t>(b));
        s.push_back({Grammar::kSet, set_index(set)});
      }
      alts.push_back(std::move(s));
    }
    seq.push_back({Grammar::kRef, new_rule(std::move(alts), "class")});
  }

  void lower(const Expr& e, Seq& seq) {
    switch (e.kind) {
      case Expr::Kind::kEmpty:
        return;
      case Expr::Kind::kBytes:
        for (char c : e.bytes) {
          ByteSet s;
          s.set(static_cast<uint8_t>(c));
          seq.push_back({Grammar::kSet, set_index(s)});
        }
        return;
      case Expr::Kind::kClass:
        return lower_class(e, seq);
      case Expr::Kind::kRef: {
        const auto it = ids_.find(e.name);
        if (it == ids_.end()) raise<GrammarError>("grammar: rule '{}' is not defined", e.name);
        seq.push_back({Grammar::kRef, it->second});
        return;
      }
      case Expr::Kind::kSeq:
        for (const Expr& item : e.items) lower(item, seq);
        return;
      case Expr::Kind::kAlt:
        seq.push_back({Grammar::kRef, new_rule(alternatives_of(e), "alt")});
        return;
      case Expr::Kind::kRepeat:
        return lower_repeat(e, seq);
    }
  }

  void lower_repeat(const Expr& e, Seq& seq) {
    Seq one;
    lower(e.items[0], one);
    if (one.empty()) return;  // repeating the empty string
    // A multi-element item is referenced through one rule, so each copy is one element.
    const Element item = one.size() == 1 ? one[0] : Element{Grammar::kRef, new_rule({one}, "item")};
    for (int i = 0; i < e.min; ++i) seq.push_back(item);
    if (e.max < 0) {
      // R ::= item R | ""   (right recursion: the matcher's stack does not grow with it)
      const int32_t r = new_rule({}, "star");
      rules_[r] = {{item, {Grammar::kRef, r}}, {}};
      seq.push_back({Grammar::kRef, r});
    } else if (e.max > e.min) {
      // (item (item (...)?)?)?: nested, so that each count has one parse.
      int32_t inner = -1;
      for (int k = 0; k < e.max - e.min; ++k) {
        Seq alt = {item};
        if (inner >= 0) alt.push_back({Grammar::kRef, inner});
        inner = new_rule({std::move(alt), {}}, "opt");
      }
      seq.push_back({Grammar::kRef, inner});
    }
  }

  std::unordered_map<std::string, int32_t> ids_;
};

}  // namespace

Grammar Grammar::from_rules(const RuleSet& rs) {
  Lowering low(rs);
  auto& rules = low.rules_;
  const size_t n = rules.size();

  // Productive rules (can derive a finite string): a fixpoint; alternatives using an
  // unproductive rule are dropped.
  std::vector<bool> productive(n, false);
  const auto alt_productive = [&](const Seq& s) {
    for (const Element& el : s)
      if (el.kind == kRef && !productive[el.arg]) return false;
    return true;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (productive[r]) continue;
      for (const Seq& s : rules[r])
        if (alt_productive(s)) {
          productive[r] = changed = true;
          break;
        }
    }
  }
  if (!productive[low.root_])
    raise<GrammarError>("grammar: '{}' matches no finite string", low.names_[low.root_]);
  for (size_t r = 0; r < n; ++r)
    std::erase_if(rules[r], [&](const Seq& s) { return !alt_productive(s); });

  // Nullable rules, then left recursion: a rule reachable from itself through references that
  // only nullable elements precede.
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Seq& s : rules[r]) {
        bool all = true;
        for (const Element& el : s) all = all && el.kind == kRef && nullable[el.arg];
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  std::vector<std::vector<int32_t>> left(n);
  for (size_t r = 0; r < n; ++r)
    for (const Seq& s : rules[r])
      for (const Element& el : s) {
        if (el.kind != kRef) break;
        left[r].push_back(el.arg);
        if (!nullable[el.arg]) break;
      }
  std::vector<int> color(n, 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<int32_t, size_t>> stack;
  for (size_t start = 0; start < n; ++start) {
    if (color[start]) continue;
    stack.push_back({static_cast<int32_t>(start), 0});
    color[start] = 1;
    while (!stack.empty()) {
      auto& [r, i] = stack.back();
      if (i == left[r].size()) {
        color[r] = 2;
        stack.pop_back();
        continue;
      }
      const int32_t next = left[r][i++];
      if (color[next] == 1)
        raise<GrammarError>(
            "grammar: left recursion through rule '{}' (a rule that can start with itself, or a "
            "repetition of something that can be empty)",
            low.names_[next]);
      if (color[next] == 0) {
        color[next] = 1;
        stack.push_back({next, 0});
      }
    }
  }

  Grammar g;
  g.sets_ = std::move(low.sets_);
  g.root_ = low.root_;
  g.rules_.resize(n);
  for (size_t r = 0; r < n; ++r)
    for (const Seq& s : rules[r]) {
      g.rules_[r].push_back(static_cast<int32_t>(g.elems_.size()));
      g.elems_.insert(g.elems_.end(), s.begin(), s.end());
      g.elems_.push_back({kEnd, 0});
    }
  return g;
}

}  // namespace mls::grammar
