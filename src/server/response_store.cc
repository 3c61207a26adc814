#include "server/response_store.h"

#include "core/error.h"

namespace mls::server {

ResponseStore::ResponseStore(size_t capacity) : capacity_(capacity) {
  if (capacity == 0) raise<InvalidArgument>("the response store needs room for one response");
}

void ResponseStore::put(const std::string& id, nlohmann::ordered_json conversation) {
  std::lock_guard lock(mu_);
  if (const auto it = index_.find(id); it != index_.end()) {
    lru_.erase(it->second);
    index_.erase(it);
  }
  lru_.emplace_front(id, std::move(conversation));
  index_[id] = lru_.begin();
  if (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

std::optional<nlohmann::ordered_json> ResponseStore::get(const std::string& id) {
  std::lock_guard lock(mu_);
  const auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

size_t ResponseStore::size() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

}  // namespace mls::server
