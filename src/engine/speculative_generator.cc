#include "engine/speculative_generator.h"

#include <algorithm>

#include "core/error.h"
#include "engine/speculative_config.h"
#include "ops/copy.h"

namespace mls {
namespace {

// Greedy choice of each logits row, on the host.
std::vector<int32_t> argmax_rows(const Tensor& logits) {
  static CpuAllocator host_alloc;  // outside the model's accounting
  Tensor host = logits;
  if (!logits.device().is_cpu()) {
    host = Tensor::empty(logits.shape(), DType::kF32, MemTag::kWorkspace, host_alloc);
    ops::copy(logits, host);
  }
  const int64_t rows = host.dim(0), vocab = host.dim(1);
  std::vector<int32_t> ids;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = host.data<float>() + r * vocab;
    ids.push_back(static_cast<int32_t>(std::max_element(row, row + vocab) - row));
  }
  return ids;
}

}  // namespace

SpeculativeResult generate_greedy_speculative(const Model& model, std::span<const int32_t> prompt,
                                              int64_t max_tokens, int64_t num_speculative_tokens,
                                              std::span<const int64_t> stop_ids,
                                              const DraftOverride& draft_override,
                                              int64_t block_size) {
  const int64_t k = num_speculative_tokens;
  if (prompt.empty()) raise<InvalidArgument>("the prompt must hold at least one token");
  if (k < 1 || k > kMaxSpeculativeTokens)
    raise<InvalidArgument>("num_speculative_tokens must be in [1, {}], found {}",
                           kMaxSpeculativeTokens, k);
  if (model.num_mtp_layers() == 0)
    raise<InvalidArgument>("speculative decoding needs the model loaded with its MTP layers");
  if (model.parallel().tp_size != 1)
    raise<Unsupported>("the reference speculative loop runs one rank, not {}",
                       model.parallel().tp_size);
  const io::ModelConfig& c = model.config();
  const auto P = static_cast<int64_t>(prompt.size());
  // A verify step writes k positions past the last committed token.
  const int64_t capacity = P + std::max<int64_t>(max_tokens, 1) + k + 1;
  const int64_t num_blocks = (capacity + block_size - 1) / block_size;
  KvCache kv =
      KvCache::allocate(c, num_blocks, block_size, activation_dtype(model.allocator().device()),
                        model.allocator(), /*mtp=*/true);
  std::vector<int32_t> table(static_cast<size_t>(num_blocks));
  for (int64_t b = 0; b < num_blocks; ++b) table[static_cast<size_t>(b)] = static_cast<int32_t>(b);
  auto chunk = [&](int64_t cached, int64_t n, SequenceChunk::Logits logits) {
    return SequenceChunk{.num_cached = cached,
                         .num_new = n,
                         .block_table = table,
                         .prompt_len = P,
                         .logits = logits};
  };

  SpeculativeResult r;
  r.stats.accepted_per_position.assign(static_cast<size_t>(k), 0);
  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  // Appends a committed token; false once generation is over.
  auto emit = [&](int32_t id) {
    r.output_ids.push_back(id);
    seq.push_back(id);
    const bool stop = std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
    return !stop && static_cast<int64_t>(r.output_ids.size()) < max_tokens;
  };
  if (max_tokens <= 0) return r;

  // Prefill: the target's first token and the hidden states the MTP layer reads.
  ForwardBatch batch;
  batch.token_ids = seq;
  batch.seqs = {chunk(0, P, SequenceChunk::Logits::kLast)};
  Tensor pending;  // target hidden states of positions [mtp_cached, main_cached)
  if (!emit(argmax_rows(model.forward(batch, kv, nullptr, &pending))[0])) return r;
  int64_t main_cached = P, mtp_cached = 0;

  for (;;) {
    // The MTP layer catches up on the positions the target just computed: position i pairs
    // t_{i+1} with h_i; the last row drafts the token after seq.back().
    ForwardBatch mtp;
    mtp.token_ids.assign(seq.begin() + mtp_cached + 1, seq.begin() + main_cached + 1);
    mtp.seqs = {chunk(mtp_cached, main_cached - mtp_cached, SequenceChunk::Logits::kLast)};
    Tensor h;
    std::vector<int32_t> drafts;
    auto draft = [&](const Tensor& logits) {
      int32_t d = argmax_rows(logits)[0];
      const auto position = main_cached + 1 + static_cast<int64_t>(drafts.size());
      if (draft_override) d = draft_override(position, d);
      drafts.push_back(d);
    };
    draft(model.forward_mtp(mtp, pending, kv, h));
    // Further drafts apply the same layer to its own output (docs/reference.md, k > 1).
    while (static_cast<int64_t>(drafts.size()) < k) {
      const auto i = static_cast<int64_t>(drafts.size());
      ForwardBatch step;
      step.token_ids = {drafts.back()};
      step.seqs = {chunk(main_cached + i - 1, 1, SequenceChunk::Logits::kLast)};
      const Tensor prev = h.narrow(0, h.dim(0) - 1, 1);
      Tensor next;
      draft(model.forward_mtp(step, prev, kv, next));
      h = next;
    }

    // Verify: the last committed token and the k drafts in one target forward.
    ForwardBatch verify;
    verify.token_ids = {seq.back()};
    verify.token_ids.insert(verify.token_ids.end(), drafts.begin(), drafts.end());
    verify.seqs = {chunk(main_cached, k + 1, SequenceChunk::Logits::kAll)};
    Tensor hidden;
    const std::vector<int32_t> target = argmax_rows(model.forward(verify, kv, nullptr, &hidden));
    int64_t accepted = 0;
    while (accepted < k &&
           drafts[static_cast<size_t>(accepted)] == target[static_cast<size_t>(accepted)])
      ++accepted;
    ++r.stats.num_drafts;
    r.stats.num_draft_tokens += k;
    r.stats.num_accepted_tokens += accepted;
    for (int64_t i = 0; i < accepted; ++i) ++r.stats.accepted_per_position[static_cast<size_t>(i)];
    for (int64_t i = 0; i < accepted; ++i)
      if (!emit(drafts[static_cast<size_t>(i)])) return r;
    if (!emit(target[static_cast<size_t>(accepted)])) return r;
    // The rejected tail's cache slots (target and MTP layer) lie past the committed positions:
    // the next round's writes overwrite them before any read reaches them.
    pending = hidden.narrow(0, 0, accepted + 1);
    mtp_cached = main_cached;
    main_cached += accepted + 1;
  }
}

}  // namespace mls
