// Structured-output cost per generated token for JSON Schemas (nested objects, enums, arrays,
// anyOf) at the demo model's vocabulary (1,400 ids) and at a synthetic byte-level vocabulary of
// 154,880 ids (GLM-5's size). Each schema's outputs are 24 valid documents, tokenized greedily
// (longest vocabulary match) and replayed token by token through the engine's per-token calls:
// the mask, then advancing by the token, then "can it end" and "is it terminated"; the four
// together are timed per token (this thread's CPU time). Each iteration starts from a freshly
// compiled grammar, so the first document is the first request with that schema ("cold": its
// states were built at compile time, as far as the precomputation's budget reaches, or are
// built when first met) and the other 23 reuse them ("warm"), as requests repeating a schema do.
// Counters: per-token p50/p99 in µs over all 24 documents ("all"), over the first ("cold") and
// over the rest ("warm"); the worst token; the compile time of the schema (JSON Schema → grammar
// → token classification → precomputed states) in ms; positions classified and
// context-dependent tokens per position; DFA states, byte classes and the grammar's memory at
// the end. compile_cost: compile time, states and memory where the states are unbounded (JSON
// object mode, a recursive schema) and the precomputation stops at its budget. Run:
// build/bench/grammar_mask_benchmark
#include <benchmark/benchmark.h>

#include <algorithm>
#include <ctime>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar_compiler.h"
#include "tokenizer/tokenizer.h"

namespace mls::grammar {
namespace {

using ojson = nlohmann::ordered_json;

constexpr int64_t kGlmVocab = 154880;

// 256 single bytes, then word-like pieces (with and without a leading space, capitalised),
// numbers, JSON punctuation runs, indentation, and UTF-8 text (whole characters and split ones),
// then 32 special tokens the grammar never matches.
std::shared_ptr<const Vocabulary> synthetic_vocab() {
  std::mt19937 rng(154880);
  std::set<std::string> seen;
  std::vector<Vocabulary::Token> tokens;
  const auto add = [&](std::string s, bool matchable = true) {
    if (seen.insert(s).second) tokens.push_back({std::move(s), matchable});
  };
  for (int b = 0; b < 256; ++b) add(std::string(1, static_cast<char>(b)));
  const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
  const char* puncts[] = {"\":",  "\",",    "{\"",  "\"}",  "\": \"", "\", \"", "[\"",
                          "\"]",  "},",     "}]",   "\":[", "\": {",  ", ",     "\n",
                          "\n  ", "\n    ", "\": ", "null", "true",   "false",  "\\n",
                          "\\\"", ")",      "(",    "_",    "-",      ".",      "://"};
  for (const char* p : puncts) add(p);
  const char* utf8[] = {"\xC3\xA9",     "\xC3\xA8",         "\xE6\x97\xA5", "\xE6\x9C\xAC",
                        "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "\xD0\xBF",     "\xD1\x80"};
  const int64_t target = kGlmVocab - 32;
  while (static_cast<int64_t>(tokens.size()) < target) {
    const int kind = static_cast<int>(rng() % 10);
    std::string s;
    if (kind < 6) {  // a word piece
      if (rng() % 2) s += ' ';
      const int len = 2 + static_cast<int>(rng() % 9);
      for (int i = 0; i < len; ++i) s += letters[std::min<size_t>(rng() % 26, rng() % 26)];
      if (rng() % 5 == 0) s[s[0] == ' ' ? 1 : 0] = static_cast<char>(std::toupper(s[s[0] == ' ']));
    } else if (kind < 7) {  // digits
      const int len = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < len; ++i) s += static_cast<char>('0' + rng() % 10);
    } else if (kind < 8) {  // punctuation runs and words
      s = puncts[rng() % std::size(puncts)];
      s += letters.substr(rng() % 20, 1 + rng() % 5);
    } else {  // UTF-8: whole characters, sometimes cut inside the last one
      const int n = 1 + static_cast<int>(rng() % 3);
      for (int i = 0; i < n; ++i) s += utf8[rng() % std::size(utf8)];
      if (rng() % 3 == 0) s.pop_back();
    }
    add(std::move(s));
  }
  for (int i = 0; i < 32; ++i) add("<|special_" + std::to_string(i) + "|>", false);
  return std::make_shared<const Vocabulary>(std::move(tokens));
}

std::shared_ptr<const Vocabulary> demo_vocab() {
  const auto tok = tok::Tokenizer::from_dir(std::string(MLASERVE_SOURCE_DIR) + "/models/demo-glm5");
  return std::make_shared<const Vocabulary>(Vocabulary::from_tokenizer(tok, 1400));
}

struct Schema {
  const char* name;
  const char* schema;
  std::string (*doc)(std::mt19937&);
};

std::string word(std::mt19937& rng) {
  static const char* words[] = {"Paris", "alpha", "river",    "stone", "golden", "north",
                                "café",  "東京",  "blue sky", "x",     "delta",  "omega"};
  return words[rng() % std::size(words)];
}

const Schema kSchemas[] = {
    {"nested",
     R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
         "address":{"type":"object","properties":{"street":{"type":"string"},
         "city":{"type":"string"},"geo":{"type":"object","properties":{"lat":{"type":"number"},
         "lon":{"type":"number"}},"required":["lat","lon"]}},"required":["city","geo"]}},
         "required":["name","address"]})",
     [](std::mt19937& r) {
       return "{\"name\": \"" + word(r) + " " + word(r) + "\", \"address\": {\"city\": \"" +
              word(r) + "\", \"geo\": {\"lat\": " + std::to_string(r() % 90) + "." +
              std::to_string(r() % 10000) + ", \"lon\": -" + std::to_string(r() % 180) + "." +
              std::to_string(r() % 1000) + "}, \"street\": \"" + std::to_string(r() % 200) + " " +
              word(r) + "\"}, \"age\": " + std::to_string(r() % 100) + "}";
     }},
    {"enums",
     R"({"type":"object","properties":{"color":{"enum":["red","green","blue","cyan"]},
         "size":{"enum":["small","medium","large"]},"shape":{"const":"circle"},
         "ok":{"type":"boolean"}},"required":["color","size","shape","ok"]})",
     [](std::mt19937& r) {
       const char* colors[] = {"red", "green", "blue", "cyan"};
       const char* sizes[] = {"small", "medium", "large"};
       return std::string("{\"color\": \"") + colors[r() % 4] + "\", \"size\": \"" +
              sizes[r() % 3] +
              "\", \"shape\": \"circle\", \"ok\": " + (r() % 2 ? "true" : "false") + "}";
     }},
    {"arrays",
     R"({"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"},
         "minItems":1,"maxItems":8},"scores":{"type":"array","items":{"type":"number"}},
         "matrix":{"type":"array","items":{"type":"array","items":{"type":"integer"}}}},
         "required":["tags","scores","matrix"]})",
     [](std::mt19937& r) {
       std::string d = "{\"tags\": [";
       const int n = 1 + static_cast<int>(r() % 8);
       for (int i = 0; i < n; ++i) d += (i ? ", \"" : "\"") + word(r) + "\"";
       d += "], \"scores\": [";
       for (int i = 0; i < 5; ++i) d += (i ? ", " : "") + std::to_string(r() % 100) + ".5";
       d += "], \"matrix\": [[1, 2], [" + std::to_string(r() % 1000) + ", 4]]}";
       return d;
     }},
    {"anyOf",
     R"({"type":"object","properties":{"items":{"type":"array","items":{"anyOf":[
         {"type":"object","properties":{"kind":{"const":"num"},"value":{"type":"number"}},
          "required":["kind","value"]},
         {"type":"object","properties":{"kind":{"const":"text"},"value":{"type":"string"}},
          "required":["kind","value"]},{"type":"null"}]}}},"required":["items"]})",
     [](std::mt19937& r) {
       std::string d = "{\"items\": [";
       for (int i = 0; i < 4; ++i) {
         if (i) d += ", ";
         const int k = static_cast<int>(r() % 3);
         d += k == 0   ? "{\"kind\": \"num\", \"value\": " + std::to_string(r() % 1000) + "}"
              : k == 1 ? "{\"kind\": \"text\", \"value\": \"" + word(r) + " " + word(r) + "\"}"
                       : std::string("null");
       }
       return d + "]}";
     }},
};

// Greedy longest-match tokenization over the matchable tokens.
std::vector<int32_t> tokenize(const Vocabulary& v, const std::string& text) {
  static std::unordered_map<const Vocabulary*, std::unordered_map<std::string, int32_t>> maps;
  auto& m = maps[&v];
  if (m.empty())
    for (int32_t t = 0; t < v.size(); ++t)
      if (v.token(t).matchable) m.emplace(v.token(t).bytes, t);
  std::vector<int32_t> ids;
  for (size_t pos = 0; pos < text.size();) {
    for (size_t len = std::min<size_t>(24, text.size() - pos); len > 0; --len) {
      const auto it = m.find(text.substr(pos, len));
      if (it == m.end()) continue;
      ids.push_back(it->second);
      pos += len;
      break;
    }
  }
  return ids;
}

// This thread's CPU time: on a machine shared with other work, wall-clock percentiles measure
// the scheduler's time slices (milliseconds) more than the code.
double thread_cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

void mask_cost(benchmark::State& state, std::shared_ptr<const Vocabulary> (*make)(), int schema) {
  static std::unordered_map<void*, std::shared_ptr<const Vocabulary>> vocabs;
  auto& vocab = vocabs[reinterpret_cast<void*>(make)];
  if (!vocab) vocab = make();
  const Schema& s = kSchemas[schema];
  std::vector<uint32_t> mask(static_cast<size_t>(vocab->mask_words()));
  std::vector<double> cold, warm, compile_ms;
  size_t states = 0, classes = 0, memory = 0;
  TokenClassification::Stats stats;
  for (auto _ : state) {
    GrammarCompiler gc(vocab);  // a fresh cache: the first document is cold
    const double c0 = thread_cpu_us();
    auto g = gc.json_schema(ojson::parse(s.schema));
    compile_ms.push_back((thread_cpu_us() - c0) / 1000);
    std::mt19937 rng(1);
    for (int d = 0; d < 24; ++d) {
      const std::string doc = s.doc(rng);
      int32_t st = g->initial_state();
      for (int32_t t : tokenize(*vocab, doc)) {
        const double t0 = thread_cpu_us();
        g->fill_mask(st, mask);
        const int32_t next = g->next(st, vocab->token(t).bytes);
        if (next != CompiledGrammar::kDead) {
          benchmark::DoNotOptimize(g->accepting(next));
          benchmark::DoNotOptimize(g->terminated(next));
        }
        (d == 0 ? cold : warm).push_back(thread_cpu_us() - t0);
        if (!((mask[t >> 5] >> (t & 31)) & 1u) || next == CompiledGrammar::kDead) {
          state.SkipWithError("a document token was masked");
          return;
        }
        st = next;
      }
      if (!g->accepting(st)) state.SkipWithError("a document was not accepted");
    }
    states = g->num_states();
    classes = g->num_byte_classes();
    memory = g->memory_bytes();
    stats = g->classification().stats();
  }
  std::vector<double> all = cold;
  all.insert(all.end(), warm.begin(), warm.end());
  state.counters["all_p50_us"] = percentile(all, 0.5);
  state.counters["all_p99_us"] = percentile(all, 0.99);
  state.counters["cold_p50_us"] = percentile(cold, 0.5);
  state.counters["cold_p99_us"] = percentile(cold, 0.99);
  state.counters["warm_p50_us"] = percentile(warm, 0.5);
  state.counters["warm_p99_us"] = percentile(warm, 0.99);
  state.counters["max_us"] = *std::max_element(all.begin(), all.end());
  state.counters["compile_ms"] = percentile(compile_ms, 0.5);
  state.counters["tokens"] =
      static_cast<double>(all.size()) / static_cast<double>(state.iterations());
  state.counters["positions"] = static_cast<double>(stats.positions);
  state.counters["ctxdep_per_pos"] =
      static_cast<double>(stats.context_dependent) / static_cast<double>(stats.positions);
  state.counters["states"] = static_cast<double>(states);
  state.counters["byte_classes"] = static_cast<double>(classes);
  state.counters["memory_kb"] = static_cast<double>(memory) / 1024;
}

// Compile time where the grammar's states are unbounded (JSON object mode, a recursive schema):
// the precomputation stops at its budget of states.
void compile_cost(benchmark::State& state, std::shared_ptr<const Vocabulary> (*make)(),
                  const char* schema) {
  static std::unordered_map<void*, std::shared_ptr<const Vocabulary>> vocabs;
  auto& vocab = vocabs[reinterpret_cast<void*>(make)];
  if (!vocab) vocab = make();
  std::vector<double> ms;
  size_t states = 0, memory = 0;
  for (auto _ : state) {
    GrammarCompiler gc(vocab);
    const double c0 = thread_cpu_us();
    auto g = *schema ? gc.json_schema(ojson::parse(schema)) : gc.json_object();
    ms.push_back((thread_cpu_us() - c0) / 1000);
    states = g->num_states();
    memory = g->memory_bytes();
  }
  state.counters["compile_ms"] = percentile(ms, 0.5);
  state.counters["states"] = static_cast<double>(states);
  state.counters["memory_kb"] = static_cast<double>(memory) / 1024;
}

constexpr const char* kRecursive =
    R"({"$defs":{"t":{"type":"object","properties":{"v":{"type":"integer"},
        "kids":{"type":"array","items":{"$ref":"#/$defs/t"}}},"required":["v"]}},
        "$ref":"#/$defs/t"})";

}  // namespace

BENCHMARK_CAPTURE(compile_cost, demo_json_object, demo_vocab, "")
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(compile_cost, demo_recursive, demo_vocab, kRecursive)
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(compile_cost, v154880_json_object, synthetic_vocab, "")
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(compile_cost, v154880_recursive, synthetic_vocab, kRecursive)
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(mask_cost, demo_nested, demo_vocab, 0)
    ->Iterations(5)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(mask_cost, demo_enums, demo_vocab, 1)
    ->Iterations(5)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(mask_cost, demo_arrays, demo_vocab, 2)
    ->Iterations(5)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(mask_cost, demo_anyOf, demo_vocab, 3)
    ->Iterations(5)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(mask_cost, v154880_nested, synthetic_vocab, 0)
    ->Iterations(5)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(mask_cost, v154880_enums, synthetic_vocab, 1)
    ->Iterations(5)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(mask_cost, v154880_arrays, synthetic_vocab, 2)
    ->Iterations(5)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(mask_cost, v154880_anyOf, synthetic_vocab, 3)
    ->Iterations(5)
    ->Unit(benchmark::kMillisecond);

}  // namespace mls::grammar

BENCHMARK_MAIN();
