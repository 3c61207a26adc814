// The entry point for structured outputs: compiles a JSON Schema, JSON-object mode, a regex, a
// choice list or GBNF text into a CompiledGrammar over one vocabulary (its token classification
// included, the costly part: on the caller's thread, a request handler's, never the engine's),
// and keeps the most recently used ones (keyed by kind and canonical text: a schema's grammar
// text), so that requests repeating a schema share its classification, states and cached masks.
// Errors are GrammarError naming the construct. Thread-safe.
#pragma once

#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/rule_set.h"
#include "grammar/vocabulary.h"

namespace mls::grammar {

class GrammarCompiler {
 public:
  static constexpr size_t kDefaultCapacity = 64;

  explicit GrammarCompiler(std::shared_ptr<const Vocabulary> vocab,
                           size_t capacity = kDefaultCapacity);

  const Vocabulary& vocab() const { return *vocab_; }

  // `whitespace_pattern`: see json_rules ("" keeps the default whitespace).
  std::shared_ptr<CompiledGrammar> json_schema(const nlohmann::ordered_json& schema,
                                               std::string_view whitespace_pattern = "");
  std::shared_ptr<CompiledGrammar> json_object(std::string_view whitespace_pattern = "");
  std::shared_ptr<CompiledGrammar> regex(std::string_view pattern);
  // Exactly one of the strings (at least one, each non-empty).
  std::shared_ptr<CompiledGrammar> choice(const std::vector<std::string>& choices);
  std::shared_ptr<CompiledGrammar> gbnf(std::string_view text);

 private:
  std::shared_ptr<CompiledGrammar> cached(const std::string& key,
                                          const std::function<RuleSet()>& make);
  std::shared_ptr<CompiledGrammar> json(const std::string& gbnf,
                                        std::string_view whitespace_pattern);

  std::shared_ptr<const Vocabulary> vocab_;
  size_t capacity_;
  std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<CompiledGrammar>>> lru_;
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
};

}  // namespace mls::grammar
