// The conversations behind /v1/responses ids, kept in memory so that a later request can
// continue one with `previous_response_id`. Bounded by count: when full, the least recently
// used (stored or continued) entry is dropped. Responses made with `store: false` never enter.
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

namespace mls::server {

class ResponseStore {
 public:
  // How many responses the server keeps by default (docs/server.md states it).
  static constexpr size_t kDefaultCapacity = 1000;

  explicit ResponseStore(size_t capacity = kDefaultCapacity);

  // Keeps `conversation` (chat messages: the inputs so far and this response's output) under
  // `id`, evicting the least recently used entry when full. Any thread.
  void put(const std::string& id, nlohmann::ordered_json conversation);
  // The conversation stored under `id`, now the most recently used; nullopt when unknown or
  // evicted. Any thread.
  std::optional<nlohmann::ordered_json> get(const std::string& id);

  size_t size() const;

 private:
  using Entry = std::pair<std::string, nlohmann::ordered_json>;
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace mls::server
