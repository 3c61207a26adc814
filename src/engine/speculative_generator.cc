#include "engine/speculative_generator.h"

#include <algorithm>

#include "core/error.h"
#include "engine/speculative_config.h"
#include "ops/copy.h"

namespace mls {
namespace {

// The host copy of a step's logits rows.
Tensor host_logits(const Tensor& logits) {
  static CpuAllocator host_alloc;  // outside the model's accounting
  if (logits.device().is_cpu()) return logits;
  Tensor host = Tensor::empty(logits.shape(), DType::kF32, MemTag::kWorkspace, host_alloc);
  ops::copy(logits, host);
  return host;
}

}  // namespace

SpeculativeResult generate_speculative(const Model& model, std::span<const int32_t> prompt,
                                       const SpeculativeOptions& opts) {
  const int64_t k = opts.num_speculative_tokens;
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
  const int64_t V = c.vocab_size;
  const SamplingParams& params = opts.params;
  params.validate(V);
  if (params.n != 1 || params.logprobs >= 0 || params.prompt_logprobs >= 0)
    raise<Unsupported>("the reference speculative loop draws one sample without logprobs");
  const auto P = static_cast<int64_t>(prompt.size());
  // A verify step writes k positions past the last committed token.
  const int64_t capacity = P + std::max<int64_t>(opts.max_tokens, 1) + k + 1;
  const int64_t num_blocks = (capacity + opts.block_size - 1) / opts.block_size;
  KvCache kv = KvCache::allocate(c, num_blocks, opts.block_size,
                                 activation_dtype(model.allocator().device()), model.allocator(),
                                 /*mtp=*/true);
  std::vector<int32_t> table(static_cast<size_t>(num_blocks));
  for (int64_t b = 0; b < num_blocks; ++b) table[static_cast<size_t>(b)] = static_cast<int32_t>(b);
  auto chunk = [&](int64_t cached, int64_t n, SequenceChunk::Logits logits) {
    return SequenceChunk{.num_cached = cached,
                         .num_new = n,
                         .block_table = table,
                         .prompt_len = P,
                         .logits = logits};
  };

  const std::vector<int64_t>& stop_ids = opts.stop_ids;
  auto is_stop = [&](int32_t id) {
    return std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
  };
  std::unique_ptr<TokenConstraint> constraint =
      opts.constraint ? opts.constraint->clone() : nullptr;
  Sampler sampler(V);
  const SpeculativeSequence sv{
      .params = &params, .seed = opts.seed, .stop_ids = stop_ids, .prompt_len = P, .vocab = V};

  SpeculativeResult r{.output_ids = {}, .stats = SpeculativeStats(k)};
  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  // Appends a committed token; false once the output is over (the engine's emit).
  auto emit = [&](int32_t id) {
    r.output_ids.push_back(id);
    seq.push_back(id);
    const auto n = static_cast<int64_t>(r.output_ids.size());
    if (is_stop(id) && n >= params.min_tokens) return false;
    if (constraint && !constraint->advance(id)) return false;
    if (constraint && constraint->is_terminated() && stop_ids.empty()) return false;
    return n < opts.max_tokens;
  };
  if (opts.max_tokens <= 0) return r;

  // Prefill: the target's first token (a round without drafts) and the hidden states the MTP
  // layer reads.
  ForwardBatch batch;
  batch.token_ids = seq;
  batch.seqs = {chunk(0, P, SequenceChunk::Logits::kLast)};
  Tensor pending;  // target hidden states of positions [mtp_cached, main_cached)
  {
    const Tensor logits = host_logits(model.forward(batch, kv, nullptr, &pending));
    DraftRound none;
    if (constraint) none.masks.push_back(constraint_mask(*constraint, stop_ids, V));
    if (!emit(accept_round(sampler, sv, logits.data<float>(), seq, none, r.stats).token)) return r;
  }
  int64_t main_cached = P, mtp_cached = 0;

  for (;;) {
    // Drafts go through a fork of the constraint; the committed state moves only in emit.
    Drafter drafter(sv, seq, constraint.get(), k, opts.draft_override);
    // The MTP layer catches up on the positions the target just computed: position i pairs
    // t_{i+1} with h_i; the last row drafts the token after seq.back().
    ForwardBatch mtp;
    mtp.token_ids.assign(seq.begin() + mtp_cached + 1, seq.begin() + main_cached + 1);
    mtp.seqs = {chunk(mtp_cached, main_cached - mtp_cached, SequenceChunk::Logits::kLast)};
    Tensor h;
    Tensor mtp_logits = host_logits(model.forward_mtp(mtp, pending, kv, h));
    for (int64_t i = 0; drafter.add(sampler, mtp_logits.data<float>(), r.stats); ++i) {
      // The next draft applies the same layer to its own output (docs/reference.md, k > 1).
      ForwardBatch step;
      step.token_ids = {drafter.last()};
      step.seqs = {chunk(main_cached + i, 1, SequenceChunk::Logits::kLast)};
      const Tensor prev = h.narrow(0, h.dim(0) - 1, 1);
      Tensor next;
      mtp_logits = host_logits(model.forward_mtp(step, prev, kv, next));
      h = next;
    }
    const DraftRound round = drafter.take();
    const int64_t drafted = round.size();

    // Verify: the last committed token and the drafts in one target forward; row i's
    // distribution is the one plain decoding would draw from after the first i drafts.
    ForwardBatch verify;
    verify.token_ids = {seq.back()};
    verify.token_ids.insert(verify.token_ids.end(), round.tokens.begin(), round.tokens.end());
    verify.seqs = {chunk(main_cached, drafted + 1, SequenceChunk::Logits::kAll)};
    Tensor hidden;
    const Tensor logits = host_logits(model.forward(verify, kv, nullptr, &hidden));
    const RejectionOutcome o = accept_round(sampler, sv, logits.data<float>(), seq, round, r.stats);
    for (int64_t i = 0; i < o.accepted; ++i)
      if (!emit(round.tokens[static_cast<size_t>(i)])) return r;
    if (!emit(o.token)) return r;
    // The rejected tail's cache slots (target and MTP layer) lie past the committed positions:
    // the next round's writes overwrite them before any read reaches them.
    pending = hidden.narrow(0, 0, o.accepted + 1);
    mtp_cached = main_cached;
    main_cached += o.accepted + 1;
  }
}

}  // namespace mls
