#include "server/stop_matcher.h"

#include <algorithm>
#include <deque>

namespace mls::server {

int32_t StopMatcher::child(int32_t node, unsigned char c) const {
  const auto& next = nodes_[node].next;
  const auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(c, int32_t{0}));
  return it != next.end() && it->first == c ? it->second : -1;
}

StopMatcher::StopMatcher(const std::vector<std::string>& stops) : nodes_(1) {
  for (const std::string& stop : stops) {
    int32_t node = 0;
    for (const char ch : stop) {
      const auto c = static_cast<unsigned char>(ch);
      int32_t n = child(node, c);
      if (n < 0) {
        n = static_cast<int32_t>(nodes_.size());
        Node fresh;
        fresh.depth = nodes_[node].depth + 1;
        nodes_.push_back(std::move(fresh));
        auto& next = nodes_[node].next;
        next.insert(std::lower_bound(next.begin(), next.end(), std::make_pair(c, int32_t{0})),
                    {c, n});
      }
      node = n;
    }
    nodes_[node].match = nodes_[node].depth;
  }
  // Failure links breadth first: a node's fail is the longest proper suffix that is a prefix.
  std::deque<int32_t> queue;
  for (const auto& [c, n] : nodes_[0].next) queue.push_back(n);
  while (!queue.empty()) {
    const int32_t u = queue.front();
    queue.pop_front();
    for (const auto& [c, v] : nodes_[u].next) {
      int32_t f = nodes_[u].fail;
      while (f != 0 && child(f, c) < 0) f = nodes_[f].fail;
      const int32_t g = child(f, c);
      nodes_[v].fail = g >= 0 && g != v ? g : 0;
      nodes_[v].match = std::max(nodes_[v].match, nodes_[nodes_[v].fail].match);
      queue.push_back(v);
    }
  }
}

std::optional<size_t> StopMatcher::scan(State& state, std::string_view text, size_t from) const {
  std::optional<size_t> first;
  for (size_t i = from; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    int32_t n;
    while ((n = child(state, c)) < 0 && state != 0) state = nodes_[state].fail;
    state = n < 0 ? 0 : n;
    if (const int32_t len = nodes_[state].match; len > 0) {
      const size_t start = i + 1 - static_cast<size_t>(len);
      first = std::min(first.value_or(start), start);
    }
  }
  return first;
}

}  // namespace mls::server
