// The BPE model of a byte-level tokenizer: a vocabulary of byte-level spellings and ranked
// merges. Encoding one pre-token applies the lowest-ranked applicable merge repeatedly, using a
// min-heap over adjacent pairs and a doubly linked list of symbols (O(n log n) per word), and
// caches the result per pre-token because natural text repeats words constantly.
#pragma once

#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mls::tok {

class BpeModel {
 public:
  // Reads tokenizer.json's "model" object (type "BPE").
  static BpeModel from_json(const nlohmann::json& model);

  BpeModel(BpeModel&& other) noexcept;
  BpeModel& operator=(BpeModel&& other) noexcept;

  // Appends the ids of one pre-token given as raw bytes.
  void encode_word(std::string_view bytes, std::vector<int32_t>& out) const;

  // Byte-level spelling -> id, over the model vocabulary only.
  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  BpeModel() = default;
  void merge_word(std::string_view bytes, std::vector<int32_t>& out) const;

  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t byte_id_[256];  // id of each single byte's symbol, -1 when absent
  bool ignore_merges_ = false;

  // Pre-token -> ids. Bounded so that adversarial input cannot grow it without limit.
  static constexpr size_t kCacheCapacity = 50000;
  static constexpr size_t kCacheMaxWordBytes = 256;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace mls::tok
