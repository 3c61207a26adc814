// Matching of a request's `stop` strings in generated text: one Aho–Corasick automaton over all
// of them, built when the request is submitted (on the HTTP thread), so that the per-token work
// on the engine thread is proportional to the new text, whatever the number of stop strings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mls::server {

// Bounds on `stop` (request validation uses them; docs/server.md lists them). vLLM sets none
// and OpenAI allows 4; these leave room for every real client while bounding the automaton's
// memory (one node per byte) for each running request.
inline constexpr size_t kMaxStopStrings = 128;
inline constexpr size_t kMaxStopBytes = 16384;  // all stop strings together

class StopMatcher {
 public:
  // The automaton's state after the text scanned so far; 0 at the start.
  using State = int32_t;

  explicit StopMatcher(const std::vector<std::string>& stops);

  bool empty() const { return nodes_.size() == 1; }

  // Scans text[from..] from `state` (the state after text[..from)) and advances `state`.
  // Returns the earliest start, in `text`, of a stop string that ends in text[from..], or
  // nullopt. `text` must keep at least pending(state) bytes before `from`.
  std::optional<size_t> scan(State& state, std::string_view text, size_t from) const;

  // Bytes at the end of the scanned text that may still grow into a stop string: all that must
  // be held back.
  size_t pending(State state) const { return nodes_[state].depth; }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> next;  // sorted by byte
    int32_t fail = 0;
    int32_t depth = 0;
    int32_t match = 0;  // longest stop string that ends here (0: none)
  };
  int32_t child(int32_t node, unsigned char c) const;

  std::vector<Node> nodes_;
};

}  // namespace mls::server
