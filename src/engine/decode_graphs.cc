#include "engine/decode_graphs.h"

#include <algorithm>

namespace mls {

std::vector<int64_t> decode_graph_buckets(int64_t max_num_seqs) {
  std::vector<int64_t> out;
  for (int64_t n : {1, 2, 4})
    if (n < max_num_seqs) out.push_back(n);
  for (int64_t n = 8; n < max_num_seqs; n += 8) out.push_back(n);
  if (max_num_seqs >= 1) out.push_back(max_num_seqs);
  return out;
}

std::string decode_graphs_off_reason(bool enforce_eager, Device device, int tensor_parallel_size) {
  if (enforce_eager) return "--enforce-eager";
  if (device.is_cpu()) return "the CPU runs every step eagerly";
  if (tensor_parallel_size > 1)
    return "tensor parallelism: the collectives are not capture-safe (the device communicator "
           "meets its ranks on the host each call; NCCL's capture is not validated here)";
  return "";
}

bool is_plain_decode(const ForwardBatch& b) {
  if (b.seqs.empty() || b.num_tokens() != static_cast<int64_t>(b.seqs.size())) return false;
  return std::all_of(b.seqs.begin(), b.seqs.end(), [](const SequenceChunk& sc) {
    return sc.num_new == 1 && sc.logits == SequenceChunk::Logits::kLast;
  });
}

int64_t graph_bucket_for(const std::vector<int64_t>& captured, const ForwardBatch& b) {
  if (!is_plain_decode(b)) return 0;
  const auto n = static_cast<int64_t>(b.seqs.size());
  const auto it = std::lower_bound(captured.begin(), captured.end(), n);
  return it == captured.end() ? 0 : *it;
}

ForwardBatch pad_decode_batch(const ForwardBatch& b, int64_t bucket) {
  ForwardBatch out = b;
  out.seqs.resize(static_cast<size_t>(bucket), b.seqs.back());
  out.token_ids.resize(static_cast<size_t>(bucket), b.token_ids.back());
  return out;
}

ForwardBatch capture_batch(int64_t bucket) {
  ForwardBatch b;
  b.token_ids.assign(static_cast<size_t>(bucket), 0);
  b.seqs.assign(static_cast<size_t>(bucket),
                SequenceChunk{.num_cached = 0, .num_new = 1, .block_table = {0}, .prompt_len = 1});
  return b;
}

}  // namespace mls
