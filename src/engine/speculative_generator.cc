#include "engine/speculative_generator.h"

#include <algorithm>

#include "core/error.h"
#include "engine/rejection_sampler.h"
#include "engine/sampler.h"
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

// The draws' uniform streams, keyed by the output index they decide: a draft's draw and its
// acceptance test at that index, and the one residual or bonus draw of the round starting there.
// A round only consumes uniforms at indices up to the one it emits last, and the next round
// starts past it, so every draw that decides the output is fresh.
enum class Stream : int64_t { kDraft = 1, kAccept = 2, kFinal = 3 };

double stream_uniform(uint64_t seed, Stream s, int64_t output_index) {
  return Sampler::uniform(seed, 0, (static_cast<int64_t>(s) << 48) | output_index);
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
  // The engine's mask: the constraint's tokens, and the stop ids once the output may end.
  auto constraint_mask = [&](TokenConstraint& tc) {
    std::vector<uint32_t> mask(static_cast<size_t>((V + 31) / 32));
    tc.fill_mask(mask);
    if (tc.can_end())
      for (int64_t id : stop_ids)
        if (id >= 0 && id < V) mask[static_cast<size_t>(id >> 5)] |= 1u << (id & 31);
    return mask;
  };
  Sampler sampler(V);
  // The distribution of the token after `tokens` (prompt, output and drafts) from one logits row,
  // as the engine's Sampler would draw it.
  auto distribution = [&](const float* logits, std::span<const int32_t> tokens,
                          std::span<const uint32_t> mask) {
    SampleInput in;
    in.params = &params;
    in.prompt = tokens.first(static_cast<size_t>(P));
    in.output = tokens.subspan(static_cast<size_t>(P));
    in.seed = opts.seed;
    if (static_cast<int64_t>(in.output.size()) < params.min_tokens) in.suppressed = stop_ids;
    in.allowed = mask;
    std::vector<double> probs(static_cast<size_t>(V));
    sampler.distribution(logits, in, probs);
    return probs;
  };

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

  // Prefill: the target's first token and the hidden states the MTP layer reads.
  ForwardBatch batch;
  batch.token_ids = seq;
  batch.seqs = {chunk(0, P, SequenceChunk::Logits::kLast)};
  Tensor pending;  // target hidden states of positions [mtp_cached, main_cached)
  {
    const Tensor logits = host_logits(model.forward(batch, kv, nullptr, &pending));
    const std::vector<uint32_t> mask =
        constraint ? constraint_mask(*constraint) : std::vector<uint32_t>{};
    if (!emit(draw_token(distribution(logits.data<float>(), seq, mask),
                         stream_uniform(opts.seed, Stream::kFinal, 0))))
      return r;
  }
  int64_t main_cached = P, mtp_cached = 0;

  for (;;) {
    const auto n = static_cast<int64_t>(r.output_ids.size());  // the next token's output index
    // Drafts go through a fork of the constraint; the committed state moves only in emit.
    std::unique_ptr<TokenConstraint> fork = constraint ? constraint->clone() : nullptr;
    std::vector<int32_t> ext = seq;            // committed tokens, then the drafts
    std::vector<std::vector<uint32_t>> masks;  // per verify row: the fork's before that draft
    auto row_mask = [&](size_t i) -> std::span<const uint32_t> {
      if (!fork) return {};
      return masks[i];
    };
    std::vector<int32_t> drafts;
    std::vector<std::vector<double>> q;

    // The MTP layer catches up on the positions the target just computed: position i pairs
    // t_{i+1} with h_i; the last row drafts the token after seq.back().
    ForwardBatch mtp;
    mtp.token_ids.assign(seq.begin() + mtp_cached + 1, seq.begin() + main_cached + 1);
    mtp.seqs = {chunk(mtp_cached, main_cached - mtp_cached, SequenceChunk::Logits::kLast)};
    Tensor h;
    Tensor mtp_logits = host_logits(model.forward_mtp(mtp, pending, kv, h));
    for (;;) {
      const size_t i = drafts.size();
      if (fork) masks.push_back(constraint_mask(*fork));
      std::vector<double> qi = distribution(mtp_logits.data<float>(), ext, row_mask(i));
      int32_t d = draw_token(qi, stream_uniform(opts.seed, Stream::kDraft, n + i));
      if (opts.draft_override) {
        d = opts.draft_override(main_cached + 1 + static_cast<int64_t>(i), d);
        if (d < 0 || d >= V)
          raise<InvalidArgument>("a forced draft is id {} of a vocabulary of {}", d, V);
        std::fill(qi.begin(), qi.end(), 0.0);
        qi[static_cast<size_t>(d)] = 1.0;
      }
      // Structure: a stop id needs the constraint's consent, any other token must advance it.
      const bool stop = is_stop(d);
      if (fork && !(stop ? fork->can_end() : fork->advance(d))) {
        ++r.stats.num_structure_rejected;
        break;
      }
      drafts.push_back(d);
      q.push_back(std::move(qi));
      ext.push_back(d);
      if (static_cast<int64_t>(drafts.size()) == k || stop ||
          (fork && fork->is_terminated() && stop_ids.empty()))
        break;
      // The next draft applies the same layer to its own output (docs/reference.md, k > 1).
      ForwardBatch step;
      step.token_ids = {d};
      step.seqs = {chunk(main_cached + static_cast<int64_t>(i), 1, SequenceChunk::Logits::kLast)};
      const Tensor prev = h.narrow(0, h.dim(0) - 1, 1);
      Tensor next;
      mtp_logits = host_logits(model.forward_mtp(step, prev, kv, next));
      h = next;
    }
    const auto drafted = static_cast<int64_t>(drafts.size());
    if (fork && masks.size() == drafts.size()) masks.push_back(constraint_mask(*fork));

    // Verify: the last committed token and the drafts in one target forward; row i's
    // distribution is the one plain decoding would draw from after the first i drafts.
    ForwardBatch verify;
    verify.token_ids = {seq.back()};
    verify.token_ids.insert(verify.token_ids.end(), drafts.begin(), drafts.end());
    verify.seqs = {chunk(main_cached, drafted + 1, SequenceChunk::Logits::kAll)};
    Tensor hidden;
    const Tensor logits = host_logits(model.forward(verify, kv, nullptr, &hidden));
    std::vector<std::vector<double>> p;
    for (int64_t i = 0; i <= drafted; ++i)
      p.push_back(distribution(logits.data<float>() + i * V,
                               std::span(ext).first(seq.size() + static_cast<size_t>(i)),
                               row_mask(static_cast<size_t>(i))));
    std::vector<double> accept_u;
    for (int64_t i = 0; i < drafted; ++i)
      accept_u.push_back(stream_uniform(opts.seed, Stream::kAccept, n + i));
    const RejectionOutcome o =
        rejection_sample(drafts, q, p, accept_u, stream_uniform(opts.seed, Stream::kFinal, n));
    if (drafted > 0) {
      ++r.stats.num_drafts;
      r.stats.num_draft_tokens += drafted;
      r.stats.num_accepted_tokens += o.accepted;
      for (int64_t i = 0; i < o.accepted; ++i)
        ++r.stats.accepted_per_position[static_cast<size_t>(i)];
    }
    for (int64_t i = 0; i < o.accepted; ++i)
      if (!emit(drafts[static_cast<size_t>(i)])) return r;
    if (!emit(o.token)) return r;
    // The rejected tail's cache slots (target and MTP layer) lie past the committed positions:
    // the next round's writes overwrite them before any read reaches them.
    pending = hidden.narrow(0, 0, o.accepted + 1);
    mtp_cached = main_cached;
    main_cached += o.accepted + 1;
  }
}

}  // namespace mls
