#include "tokenizer/bpe_model.h"

#include <queue>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/token_id.h"

namespace mls::tok {

BpeModel::BpeModel(BpeModel&& other) noexcept
    : vocab_(std::move(other.vocab_)),
      merges_(std::move(other.merges_)),
      ignore_merges_(other.ignore_merges_),
      cache_(std::move(other.cache_)) {
  std::copy(std::begin(other.byte_id_), std::end(other.byte_id_), byte_id_);
}

BpeModel& BpeModel::operator=(BpeModel&& other) noexcept {
  vocab_ = std::move(other.vocab_);
  merges_ = std::move(other.merges_);
  ignore_merges_ = other.ignore_merges_;
  cache_ = std::move(other.cache_);
  std::copy(std::begin(other.byte_id_), std::end(other.byte_id_), byte_id_);
  return *this;
}

BpeModel BpeModel::from_json(const nlohmann::json& model) {
  if (model.value("type", "BPE") != "BPE")
    raise<Unsupported>("tokenizer.json: model type '{}' is not supported (BPE only)",
                       model.value("type", ""));
  if (model.value("byte_fallback", false))
    raise<Unsupported>("tokenizer.json: BPE byte_fallback is not supported");
  BpeModel m;
  const auto& vocab = model.at("vocab");
  if (!vocab.is_object()) raise<ConfigError>("tokenizer.json: model.vocab is not an object");
  for (const auto& [token, id] : vocab.items())
    m.vocab_.emplace(token, token_id(id, "model.vocab"));
  m.ignore_merges_ = model.value("ignore_merges", false);
  for (int b = 0; b < 256; ++b) {
    auto it = m.vocab_.find(byte_to_symbol(static_cast<unsigned char>(b)));
    m.byte_id_[b] = it == m.vocab_.end() ? -1 : it->second;
  }

  const auto id_of = [&](const std::string& token) {
    auto it = m.vocab_.find(token);
    if (it == m.vocab_.end())
      raise<ConfigError>("tokenizer.json: merge refers to '{}', which is not in the vocabulary",
                         token);
    return it->second;
  };
  int32_t rank = 0;
  for (const auto& merge : model.at("merges")) {
    std::string left, right;
    if (merge.is_string()) {  // older files: "a b"
      const std::string s = merge.get<std::string>();
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) raise<ConfigError>("tokenizer.json: malformed merge '{}'", s);
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else {
      left = merge.at(0).get<std::string>();
      right = merge.at(1).get<std::string>();
    }
    const int32_t new_id = id_of(left + right);
    m.merges_.emplace(pair_key(id_of(left), id_of(right)), Merge{rank++, new_id});
  }
  return m;
}

void BpeModel::encode_word(std::string_view bytes, std::vector<int32_t>& out) const {
  if (bytes.empty()) return;
  const bool cacheable = bytes.size() <= kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard lock(cache_mu_);
    auto it = cache_.find(std::string(bytes));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  merge_word(bytes, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard lock(cache_mu_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.emplace(std::string(bytes), std::move(ids));
  }
}

void BpeModel::merge_word(std::string_view bytes, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    auto it = vocab_.find(byte_level_encode(bytes));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }

  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  std::vector<Symbol> syms;
  syms.reserve(bytes.size());
  for (unsigned char b : bytes) {
    if (byte_id_[b] < 0) continue;  // no unk token: an unknown byte is dropped, as HF does
    const auto n = static_cast<int32_t>(syms.size());
    syms.push_back({byte_id_[b], n - 1, n + 1, true});
  }
  if (syms.empty()) return;
  syms.back().next = -1;

  // Candidate merge of syms[pos] with its right neighbour; stale entries are skipped on pop.
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto push_pair = [&](int32_t pos) {
    const int32_t next = syms[pos].next;
    if (next < 0) return;
    auto it = merges_.find(pair_key(syms[pos].id, syms[next].id));
    if (it != merges_.end()) heap.push({it->second.rank, pos, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) push_pair(i);

  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = syms[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = syms[left.next];
    auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

}  // namespace mls::tok
