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

bool is_graph_step(const ForwardBatch& b) {
  if (b.seqs.empty()) return false;
  return std::all_of(b.seqs.begin(), b.seqs.end(), [](const SequenceChunk& sc) {
    return sc.num_new >= 1 && (sc.logits == SequenceChunk::Logits::kAll ||
                               (sc.num_new == 1 && sc.logits == SequenceChunk::Logits::kLast));
  });
}

int64_t graph_bucket_for(const std::vector<int64_t>& captured, const ForwardBatch& b) {
  if (!is_graph_step(b)) return 0;
  const int64_t n = b.num_tokens();
  const auto it = std::lower_bound(captured.begin(), captured.end(), n);
  return it == captured.end() ? 0 : *it;
}

ForwardBatch pad_decode_batch(const ForwardBatch& b, int64_t bucket) {
  ForwardBatch out = b;
  const SequenceChunk& last = b.seqs.back();
  const SequenceChunk pad{.num_cached = last.num_cached + last.num_new - 1,
                          .num_new = 1,
                          .block_table = last.block_table,
                          .prompt_len = last.prompt_len,
                          .logits = SequenceChunk::Logits::kLast};
  const int64_t missing = bucket - b.num_tokens();
  out.seqs.insert(out.seqs.end(), static_cast<size_t>(std::max<int64_t>(0, missing)), pad);
  out.token_ids.resize(static_cast<size_t>(std::max(bucket, b.num_tokens())), b.token_ids.back());
  return out;
}

int64_t mtp_graph_bucket_for(const std::vector<int64_t>& captured, const ForwardBatch& b) {
  if (std::any_of(b.seqs.begin(), b.seqs.end(),
                  [](const SequenceChunk& sc) { return sc.num_cached == 0; }))
    return 0;
  return graph_bucket_for(captured, b);
}

ForwardBatch capture_batch(int64_t bucket, int64_t position, int64_t block_size) {
  ForwardBatch b;
  b.token_ids.assign(static_cast<size_t>(bucket), 0);
  const auto blocks = static_cast<size_t>(position / block_size + 1);
  b.seqs.assign(static_cast<size_t>(bucket),
                SequenceChunk{.num_cached = position,
                              .num_new = 1,
                              .block_table = std::vector<int32_t>(blocks, 0),
                              .prompt_len = position + 1});
  return b;
}

}  // namespace mls
