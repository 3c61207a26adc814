// Top-k selection that reproduces PyTorch's CPU `topk(largest=True)` exactly, ties included:
// (value, index) pairs in index order, then std::partial_sort when k·64 <= n, else
// std::nth_element at k−1. Exact ties (e.g. the indexer's ReLU zeros) are common in DSA scoring
// and decide which keys attend, so matching the reference needs its tie order, not just a top-k.
// The DSA indexer uses it only in TopkTieOrder::kTorchReference (ops/indexer_topk.h): torch's
// choice depends on the row's length, which serving cannot allow (prefix caching); MoE routing
// (one row per token, fixed length) always uses it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace mls::ops::cpu {

// Reorders `queue` (value, index) so that its first k entries are the ones torch selects.
inline void torch_topk(std::vector<std::pair<float, int32_t>>& queue, int64_t k) {
  auto greater = [](const std::pair<float, int32_t>& x, const std::pair<float, int32_t>& y) {
    return x.first > y.first;
  };
  const int64_t n = static_cast<int64_t>(queue.size());
  if (k <= 0 || n == 0) return;
  if (k * 64 <= n)
    std::partial_sort(queue.begin(), queue.begin() + k, queue.end(), greater);
  else
    std::nth_element(queue.begin(), queue.begin() + (k - 1), queue.end(), greater);
}

}  // namespace mls::ops::cpu
