#include "grammar/grammar_compiler.h"

#include <fmt/format.h>

#include "grammar/gbnf_parser.h"
#include "grammar/grammar_error.h"
#include "grammar/json_schema.h"
#include "grammar/regex_parser.h"

namespace mls::grammar {

GrammarCompiler::GrammarCompiler(std::shared_ptr<const Vocabulary> vocab, size_t capacity)
    : vocab_(std::move(vocab)), capacity_(capacity) {}

std::shared_ptr<CompiledGrammar> GrammarCompiler::cached(const std::string& key,
                                                         const std::function<RuleSet()>& make) {
  {
    std::lock_guard lock(mu_);
    const auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  auto g = std::make_shared<CompiledGrammar>(Grammar::from_rules(make()), vocab_);
  std::lock_guard lock(mu_);
  if (index_.count(key)) return index_[key]->second;
  lru_.emplace_front(key, g);
  index_[key] = lru_.begin();
  if (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return g;
}

std::shared_ptr<CompiledGrammar> GrammarCompiler::json(const std::string& gbnf,
                                                       std::string_view whitespace_pattern) {
  // The GBNF text keys the default whitespace, so that GBNF requests share it.
  const std::string key =
      whitespace_pattern.empty()
          ? "gbnf:" + gbnf
          : fmt::format("json:{}:{}{}", whitespace_pattern.size(), whitespace_pattern, gbnf);
  return cached(key, [&] { return json_rules(gbnf, whitespace_pattern); });
}

std::shared_ptr<CompiledGrammar> GrammarCompiler::json_schema(const nlohmann::ordered_json& schema,
                                                              std::string_view whitespace_pattern) {
  return json(json_schema_gbnf(schema), whitespace_pattern);
}

std::shared_ptr<CompiledGrammar> GrammarCompiler::json_object(std::string_view whitespace_pattern) {
  return json(json_object_gbnf(), whitespace_pattern);
}

std::shared_ptr<CompiledGrammar> GrammarCompiler::regex(std::string_view pattern) {
  return cached("regex:" + std::string(pattern), [&] {
    RuleSet rs;
    rs.rules.emplace_back("root", parse_regex(pattern));
    return rs;
  });
}

std::shared_ptr<CompiledGrammar> GrammarCompiler::choice(const std::vector<std::string>& choices) {
  if (choices.empty()) raise<GrammarError>("choice: the list is empty");
  std::string key = "choice:";
  std::vector<Expr> alts;
  for (const std::string& c : choices) {
    if (c.empty()) raise<GrammarError>("choice: a choice is empty");
    key += std::to_string(c.size()) + ":" + c;
    alts.push_back(Expr::bytes_of(c));
  }
  return cached(key, [&] {
    RuleSet rs;
    rs.rules.emplace_back("root", Expr::group(Expr::Kind::kAlt, std::move(alts)));
    return rs;
  });
}

std::shared_ptr<CompiledGrammar> GrammarCompiler::gbnf(std::string_view text) {
  return cached("gbnf:" + std::string(text), [&] { return parse_gbnf(text); });
}

}  // namespace mls::grammar
