#include "engine/engine.h"

#include <algorithm>
#include <random>

#include "core/error.h"
#include "core/logging.h"
#include "parallel/world.h"

namespace mls {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kNone:
      break;
  }
  return "";
}

struct RequestState {
  Request req;
  uint64_t seed = 0;
  int64_t max_tokens = 0;         // resolved against max_model_len
  std::vector<int64_t> stop_ids;  // stop_token_ids, plus the EOS ids unless ignore_eos
  std::vector<std::unique_ptr<Sequence>> seqs;
  int num_finished = 0;
  bool first_token_seen = false;
  int64_t completion_tokens = 0;
  Timings timings;
  // prompt_logprobs: entry i scores prompt token i + 1; complete at prompt_len - 1 entries.
  std::vector<Logprobs> prompt_logprobs;

  // Every sample exists (the request has forked) and has finished.
  bool done() const {
    return num_finished == static_cast<int>(seqs.size()) &&
           static_cast<int>(seqs.size()) == req.params.n;
  }
};

namespace {

EngineConfig resolved(const ModelRunner& runner, EngineConfig cfg) {
  if (runner.num_blocks() == 0)
    raise<InvalidArgument>("the engine needs the runner's KV cache allocated first");
  if (const std::optional<ServingLimits>& planned = runner.planned_limits()) {
    if (cfg.limits != *planned)
      raise<InvalidArgument>(
          "the engine's limits ({}) are not those the memory plan was made for ({})",
          cfg.limits.str(), planned->str());
    return cfg;
  }
  ServingLimits& l = cfg.limits;
  l.block_size = runner.block_size();
  const bool set = l.max_model_len > 0;
  l = resolve_serving_limits(l, runner.config());
  const int64_t capacity = runner.num_blocks() * runner.block_size();
  if (l.max_model_len > capacity) {
    if (set)
      raise<InvalidArgument>(
          "max_model_len {} does not fit the KV pool of {} blocks of {} tokens; the largest "
          "max_model_len that fits is {}",
          l.max_model_len, runner.num_blocks(), runner.block_size(), capacity);
    l.max_model_len = capacity;
  }
  // A cached block's KV is valid for any continuation only if no DSA row's selection depends on
  // the keys after it, which the torch reference's tie order does not promise.
  if (cfg.enable_prefix_caching && runner.config().has_indexer &&
      runner.topk_tie_order() != ops::TopkTieOrder::kServing)
    raise<InvalidArgument>(
        "prefix caching on a DSA model needs the serving top-k tie order (the torch reference "
        "order depends on the prompt length)");
  return cfg;
}

}  // namespace

Engine::Engine(ModelRunner& runner, const EngineConfig& cfg)
    : runner_(runner),
      cfg_(resolved(runner, cfg)),
      vocab_(runner.config().vocab_size),
      blocks_(runner.num_blocks(), runner.block_size(), cfg.enable_prefix_caching),
      scheduler_({cfg_.limits.max_num_batched_tokens, cfg_.limits.max_num_seqs,
                  cfg_.limits.num_speculative_tokens},
                 blocks_),
      sampler_(runner.config().vocab_size),
      mask_words_((runner.config().vocab_size + 31) / 32),
      spec_k_(cfg_.limits.num_speculative_tokens),
      spec_stats_(spec_k_),
      seed_rng_(cfg.seed.value_or(0)) {
  if (spec_k_ > 0 && runner.num_mtp_layers() == 0)
    raise<InvalidArgument>(
        "speculative decoding ({} tokens) needs the runner loaded with the checkpoint's MTP "
        "layers",
        spec_k_);
}

Engine::~Engine() = default;

void Engine::add_request(Request req) {
  const SamplingParams& p = req.params;
  const auto prompt_len = static_cast<int64_t>(req.prompt_ids.size());
  if (req.id.empty()) raise<InvalidArgument>("request id must not be empty");
  if (prompt_len == 0) raise<InvalidArgument>("prompt_ids must hold at least one token");
  for (int32_t id : req.prompt_ids)
    if (id < 0 || id >= vocab_)
      raise<InvalidArgument>("prompt_ids: {} is outside the vocabulary of {}", id, vocab_);
  p.validate(vocab_);
  const int64_t mml = cfg_.limits.max_model_len;
  if (prompt_len >= mml)
    raise<InvalidArgument>(
        "the prompt has {} tokens, which leaves no room to generate under max_model_len {}",
        prompt_len, mml);
  // max_tokens may be anything a client sent: compared by subtraction, never summed.
  if (p.max_tokens > mml - prompt_len)
    raise<InvalidArgument>("prompt_ids ({} tokens) + max_tokens ({}) exceeds max_model_len {}",
                           prompt_len, p.max_tokens, mml);
  if (p.n > cfg_.limits.max_num_seqs)
    raise<InvalidArgument>("n ({}) exceeds max_num_seqs ({})", p.n, cfg_.limits.max_num_seqs);

  auto rs = std::make_unique<RequestState>();
  rs->max_tokens = p.max_tokens > 0 ? p.max_tokens : mml - prompt_len;
  if (p.seed) {
    rs->seed = *p.seed;
  } else if (cfg_.seed) {
    std::lock_guard lock(seed_mu_);
    rs->seed = seed_rng_();
  } else {
    rs->seed = std::random_device{}() * 0x100000001ULL ^ std::random_device{}();
  }
  rs->stop_ids = p.stop_token_ids;
  if (!p.ignore_eos)
    for (int64_t e : runner_.config().eos_token_ids) rs->stop_ids.push_back(e);
  rs->timings.arrival = Clock::now();
  rs->req = std::move(req);
  std::lock_guard lock(inbox_mu_);
  if (!live_ids_.insert(rs->req.id).second)
    raise<InvalidArgument>("request id '{}' is already in use", rs->req.id);
  inbox_adds_.push_back(std::move(rs));
}

void Engine::abort_request(const std::string& id) {
  std::lock_guard lock(inbox_mu_);
  inbox_aborts_.push_back(id);
}

bool Engine::has_work() const {
  if (!scheduler_.empty()) return true;
  std::lock_guard lock(inbox_mu_);
  return !inbox_adds_.empty() || !inbox_aborts_.empty();
}

EngineStats Engine::stats() const {
  std::lock_guard lock(stats_mu_);
  return stats_;
}

void Engine::drain_inbox() {
  std::vector<std::unique_ptr<RequestState>> adds;
  std::vector<std::string> aborts;
  {
    std::lock_guard lock(inbox_mu_);
    if (inbox_adds_.empty() && inbox_aborts_.empty()) return;
    adds.swap(inbox_adds_);
    aborts.swap(inbox_aborts_);
  }
  for (auto& rs : adds) admit(std::move(rs));
  for (const std::string& id : aborts) abort_now(id);
}

void Engine::admit(std::unique_ptr<RequestState> rs) {
  auto seq = std::make_unique<Sequence>();
  seq->request = rs.get();
  seq->arrival_order = next_arrival_++;
  seq->tokens = rs->req.prompt_ids;
  seq->prompt_len = static_cast<int64_t>(seq->tokens.size());
  seq->seq_slots = rs->req.params.n;
  seq->prompt_logits = rs->req.params.prompt_logprobs >= 0;
  if (rs->req.constraint) seq->constraint = rs->req.constraint->clone();
  scheduler_.add(seq.get());
  rs->seqs.push_back(std::move(seq));
  const std::string id = rs->req.id;
  requests_.emplace(id, std::move(rs));
}

void Engine::abort_now(const std::string& id) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return;
  for (auto& seq : it->second->seqs)
    if (!seq->finished()) finish(*seq, FinishReason::kAbort, true);
  retire_finished();
}

bool Engine::step() {
  const Clock::time_point start = Clock::now();
  drain_inbox();
  const std::vector<ScheduledChunk>& chunks = scheduler_.schedule();
  if (!scheduler_.unschedulable().empty()) {
    // The whole request ends: its other samples must not outlive its state.
    std::vector<std::string> ids;
    for (const Sequence* seq : scheduler_.unschedulable()) ids.push_back(seq->request->req.id);
    for (const std::string& id : ids) abort_now(id);
  }
  if (chunks.empty()) report_pending();  // no forward to overlap them with
  if (!chunks.empty()) {
    const Clock::time_point now = Clock::now();
    for (const ScheduledChunk& c : chunks)
      if (c.seq->request->timings.scheduled == Clock::time_point{})
        c.seq->request->timings.scheduled = now;
    batch_.token_ids.clear();
    batch_.seqs.resize(chunks.size());
    // Under speculative decoding every sequence drafts (engine.h).
    const bool speculative = spec_k_ > 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
      const Sequence& s = *chunks[i].seq;
      // The sequence's tokens, then the drafts it verifies (a logits row each, and one more).
      const int64_t drafts = chunks[i].num_drafts;
      const int64_t end = s.num_computed + chunks[i].num_new - drafts;
      batch_.token_ids.insert(batch_.token_ids.end(), s.tokens.begin() + s.num_computed,
                              s.tokens.begin() + end);
      batch_.token_ids.insert(batch_.token_ids.end(), s.drafts.tokens.begin(),
                              s.drafts.tokens.begin() + drafts);
      SequenceChunk& sc = batch_.seqs[i];
      sc.num_cached = s.num_computed;
      sc.num_new = chunks[i].num_new;
      sc.block_table.assign(s.block_table.begin(), s.block_table.end());
      sc.prompt_len = s.prompt_len;
      const bool last = end == static_cast<int64_t>(s.tokens.size());
      sc.logits = s.chunk_has_all_logits() || drafts > 0 ? SequenceChunk::Logits::kAll
                  : last                                 ? SequenceChunk::Logits::kLast
                                                         : SequenceChunk::Logits::kNone;
    }
    sampled_.clear();
    sample_rows_.clear();
    scores_prompt_ = false;
    int64_t rows = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
      const SequenceChunk& sc = batch_.seqs[i];
      scores_prompt_ = scores_prompt_ || chunks[i].seq->chunk_has_all_logits();
      rows += sc.logits == SequenceChunk::Logits::kAll    ? sc.num_new
              : sc.logits == SequenceChunk::Logits::kLast ? 1
                                                          : 0;
      const int64_t drafts = chunks[i].num_drafts;
      if (sc.num_cached + sc.num_new - drafts ==
          static_cast<int64_t>(chunks[i].seq->tokens.size())) {
        sampled_.push_back(chunks[i].seq);
        sample_rows_.push_back(rows - 1 - drafts);  // the row after the last token
      }
    }
    masked_ = start_masks();
    // The masks are computed while the forward runs; whatever happens, the worker is done with
    // this step's rows before they change.
    struct JoinMasks {
      HostWorker& w;
      ~JoinMasks() { w.abandon(); }
    } join{mask_worker_};
    const Clock::time_point issued = Clock::now();
    const double forward_before = runner_.forward_seconds();
    try {
      if (speculative && can_sample_on_device() &&
          std::all_of(sampled_.begin(), sampled_.end(),
                      [this](const Sequence* seq) { return speculates_on_device(*seq); })) {
        verify_on_device();
        draft(chunks);
      } else if (speculative) {
        // On the host: the drafting sequences' rounds need every verify row's distribution.
        const Tensor logits = runner_.forward_keep_hidden(batch_);
        if (masked_) masks();
        if (scores_prompt_) score_prompts(chunks, logits.data<float>());
        scheduler_.commit();
        for (size_t r = 0; r < sampled_.size(); ++r) {
          const float* row = logits.data<float>() + sample_rows_[r] * vocab_;
          if (masked_ && mask_failed_[r])
            finish(*sampled_[r], FinishReason::kAbort, true);
          else if (!first_draw_forks(*sampled_[r]))
            accept(*sampled_[r], row, r);
          else
            sample_row(*sampled_[r], row, mask_row(r));
        }
        draft(chunks);
      } else if (can_sample_on_device()) {
        rows_.clear();
        for (Sequence* seq : sampled_)
          rows_.push_back(Sampler::row_sampling(sample_input(*seq, seq->sample_index)));
        // The previous step's pending reports go out while this step runs on the device.
        const SampledRows drawn = runner_.forward_sample(
            batch_, rows_, nullptr,
            masked_ ? ModelRunner::MaskSource([this] { return masks(); }) : nullptr, false,
            [this] { report_pending(); });
        scheduler_.commit();
        for (size_t r = 0; r < sampled_.size(); ++r) {
          if (sampled_[r]->finished()) continue;  // a kStop verdict on its pending token
          if (masked_ && mask_failed_[r])
            finish(*sampled_[r], FinishReason::kAbort, true);
          else
            emit(*sampled_[r], drawn.ids[r], nullptr, /*defer=*/true);
        }
      } else {
        report_pending();
        const Tensor logits = runner_.forward(batch_);
        if (masked_) masks();
        if (scores_prompt_) score_prompts(chunks, logits.data<float>());
        scheduler_.commit();
        for (size_t r = 0; r < sampled_.size(); ++r) {
          if (sampled_[r]->finished()) continue;  // a kStop verdict on its pending token
          if (masked_ && mask_failed_[r])
            finish(*sampled_[r], FinishReason::kAbort, true);
          else
            sample_row(*sampled_[r], logits.data<float>() + sample_rows_[r] * vocab_, mask_row(r));
        }
      }
    } catch (const DistributedError&) {
      throw;  // a process of the job died or hangs: the job goes down (World::fail_job)
    } catch (const std::exception& e) {
      fail_step(chunks, e.what());
    }
    retire_finished();
    if (cfg_.on_step) cfg_.on_step(static_cast<int64_t>(batch_.token_ids.size()));
    const double forward = runner_.forward_seconds() - forward_before;
    const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
    ++steps_;
    schedule_seconds_ += seconds(issued - start);
    forward_seconds_ += forward;
    output_seconds_ += seconds(Clock::now() - issued) - forward;
  }
  publish_stats();
  return has_work();
}

void Engine::fail_step(const std::vector<ScheduledChunk>& chunks, const std::string& what) {
  MLS_LOG_ERROR("a step of {} sequences failed; their requests end with an error: {}",
                chunks.size(), what);
  const std::string error = "the engine step serving this request failed: " + what;
  for (const ScheduledChunk& c : chunks)
    for (auto& seq : c.seq->request->seqs)
      if (!seq->finished()) finish(*seq, FinishReason::kAbort, true, &error);
}

// The one place that chooses where a step samples. The device path returns only each row's
// token, so it serves a step only when no row needs the host's copy of its logits: penalties
// (repetition, frequency, presence), min_tokens suppression, logit_bias, allowed_token_ids and
// bad_words rewrite the row per request, logprobs report its whole log-softmax (rank, top-k),
// the first draw of an n > 1 request takes n tokens from one row, and a step scoring a prompt
// (prompt_logprobs) has a row for every prompt token.
bool Engine::can_sample_on_device() const {
  if (!cfg_.device_sampling || scores_prompt_) return false;
  return std::all_of(sampled_.begin(), sampled_.end(),
                     [this](const Sequence* seq) { return samples_on_device(*seq); });
}

bool Engine::samples_on_device(const Sequence& seq) const {
  const RequestState& rs = *seq.request;
  const SamplingParams& p = rs.req.params;
  return p.repetition_penalty == 1.0 && p.frequency_penalty == 0.0 && p.presence_penalty == 0.0 &&
         p.logprobs < 0 && !(seq.num_output() < p.min_tokens && !rs.stop_ids.empty()) &&
         p.logit_bias.empty() && p.allowed_token_ids.empty() && p.bad_words_token_ids.empty() &&
         !first_draw_forks(seq);
}

bool Engine::first_draw_forks(const Sequence& seq) const {
  const RequestState& rs = *seq.request;
  return rs.seqs.size() == 1 && rs.req.params.n > 1;
}

// Rows of a prompt-scoring chunk: row j (position num_cached + j) gives the distribution of
// the token at position num_cached + j + 1. Positions scored before (a recompute after
// preemption) are skipped.
void Engine::score_prompts(const std::vector<ScheduledChunk>& chunks, const float* logits) {
  int64_t row = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const SequenceChunk& sc = batch_.seqs[i];
    if (sc.logits == SequenceChunk::Logits::kLast) ++row;
    if (sc.logits != SequenceChunk::Logits::kAll) continue;
    const Sequence& seq = *chunks[i].seq;
    RequestState& rs = *seq.request;
    for (int64_t j = 0; j < sc.num_new; ++j, ++row) {
      const int64_t pos = sc.num_cached + j;
      if (pos + 1 >= seq.prompt_len || pos != static_cast<int64_t>(rs.prompt_logprobs.size()))
        continue;
      sampler_.fill_logprobs(logits + row * vocab_, seq.tokens[pos + 1],
                             rs.req.params.prompt_logprobs, rs.prompt_logprobs.emplace_back());
    }
  }
}

SampleInput Engine::sample_input(const Sequence& seq, int sample_index) const {
  const RequestState& rs = *seq.request;
  SampleInput in;
  in.params = &rs.req.params;
  in.prompt = std::span(seq.tokens).first(seq.prompt_len);
  in.output = std::span(seq.tokens).subspan(seq.prompt_len);
  in.seed = rs.seed;
  in.sample_index = sample_index;
  if (seq.num_output() < rs.req.params.min_tokens) in.suppressed = rs.stop_ids;
  return in;
}

bool Engine::start_masks() {
  bool any = false;
  for (const Sequence* seq : sampled_) any = any || seq->constraint;
  if (!any) return false;
  const size_t rows = sampled_.size();
  masks_.resize(rows * static_cast<size_t>(mask_words_));
  mask_failed_.assign(rows, 0);
  mask_worker_.start([this, rows] {
    for (size_t r = 0; r < rows; ++r) {
      Sequence& seq = *sampled_[r];
      const std::span<uint32_t> row(masks_.data() + r * mask_words_,
                                    static_cast<size_t>(mask_words_));
      // A drafted round carries its rows' masks (drawn while drafting).
      if (!seq.constraint || !seq.drafts.masks.empty()) {
        std::fill(row.begin(), row.end(), ~0u);
        continue;
      }
      try {
        seq.constraint->fill_mask(row);
        // The constraint decides when the output may end; stop tokens are then allowed (and
        // min_tokens still suppresses them in the sampler).
        if (seq.constraint->can_end())
          for (int64_t id : seq.request->stop_ids)
            if (id >= 0 && id < vocab_) row[id >> 5] |= 1u << (id & 31);
      } catch (const std::exception& e) {
        MLS_LOG_ERROR("request {}: its output constraint failed: {}", seq.request->req.id,
                      e.what());
        mask_failed_[r] = 1;
        std::fill(row.begin(), row.end(), ~0u);
      }
    }
  });
  return true;
}

std::span<const uint32_t> Engine::masks() {
  mask_worker_.wait();
  return masks_;
}

std::span<const uint32_t> Engine::mask_row(size_t r) const {
  if (!masked_ || !sampled_[r]->constraint) return {};
  return {masks_.data() + r * mask_words_, static_cast<size_t>(mask_words_)};
}

void Engine::sample_row(Sequence& seq, const float* logits, std::span<const uint32_t> allowed) {
  RequestState& rs = *seq.request;
  const SamplingParams& p = rs.req.params;
  // The first sampling of an n > 1 request draws every sample from the prompt's logits.
  const int n = first_draw_forks(seq) ? p.n : 1;
  const bool want_lp = p.logprobs >= 0;
  drawn_.resize(n);
  logprobs_.resize(n);
  for (int i = 0; i < n; ++i) {
    SampleInput in = sample_input(seq, n > 1 ? i : seq.sample_index);
    in.allowed = allowed;
    drawn_[i] = sampler_.sample(logits, in, want_lp ? &logprobs_[i] : nullptr);
  }
  if (n > 1) fork(seq, drawn_);
  // After a fork rs.seqs holds the parent (sample 0) and then its new siblings, in order.
  for (int i = 0; i < n; ++i)
    emit(n > 1 ? *rs.seqs[i] : seq, drawn_[i], want_lp ? &logprobs_[i] : nullptr);
}

SpeculativeSequence Engine::speculative_view(const Sequence& seq) const {
  const RequestState& rs = *seq.request;
  return {.params = &rs.req.params,
          .seed = rs.seed,
          .sample_index = seq.sample_index,
          .stop_ids = rs.stop_ids,
          .prompt_len = seq.prompt_len,
          .vocab = vocab_};
}

bool Engine::speculates_on_device(const Sequence& seq) const {
  return cfg_.device_sampling && seq.request->req.params.greedy() && samples_on_device(seq);
}

void Engine::verify_on_device() {
  // Every logits row of the step is greedy: each sequence's verify rows (the last drafts + 1 of
  // its chunk) and the rows nobody reads.
  rows_.assign(static_cast<size_t>(batch_.num_logit_rows()), ops::RowSampling{});
  // Each verify row under the mask its draft was drawn under (the round's), a round nobody
  // drafted under the mask worker's.
  const auto verify_masks = [this]() -> std::span<const uint32_t> {
    const std::span<const uint32_t> worker = masks();
    const auto words = static_cast<size_t>(mask_words_);
    spec_masks_.assign(rows_.size() * words, ~0u);
    for (size_t r = 0; r < sampled_.size(); ++r) {
      const Sequence& seq = *sampled_[r];
      if (!seq.constraint) continue;
      uint32_t* first = spec_masks_.data() + static_cast<size_t>(sample_rows_[r]) * words;
      if (seq.drafts.masks.empty())
        std::copy_n(worker.data() + r * words, words, first);
      else
        for (size_t i = 0; i < seq.drafts.masks.size(); ++i)
          std::copy_n(seq.drafts.masks[i].data(), words, first + i * words);
    }
    return spec_masks_;
  };
  const SampledRows drawn = runner_.forward_sample(
      batch_, rows_, nullptr, masked_ ? ModelRunner::MaskSource(verify_masks) : nullptr, true);
  scheduler_.commit();
  for (size_t r = 0; r < sampled_.size(); ++r) {
    Sequence& seq = *sampled_[r];
    const auto row = static_cast<size_t>(sample_rows_[r]);
    if (masked_ && mask_failed_[r])
      finish(seq, FinishReason::kAbort, true);
    else
      accept_drawn(seq,
                   std::span(drawn.ids).subspan(row, static_cast<size_t>(seq.drafts.size()) + 1));
  }
}

void Engine::accept_drawn(Sequence& seq, std::span<const int32_t> ids) {
  const DraftRound round = std::move(seq.drafts);
  seq.drafts.clear();
  commit_round(seq, round, accept_greedy_round(ids, round, spec_stats_), nullptr);
}

void Engine::accept(Sequence& seq, const float* logits, size_t mask_row_index) {
  DraftRound round = std::move(seq.drafts);
  seq.drafts.clear();
  // A round nobody drafted (the first token, or no room for drafts): the committed
  // constraint's mask from the mask worker.
  if (round.masks.empty() && seq.constraint) {
    const std::span<const uint32_t> m = mask_row(mask_row_index);
    round.masks.emplace_back(m.begin(), m.end());
  }
  commit_round(
      seq, round,
      accept_round(sampler_, speculative_view(seq), logits, seq.tokens, round, spec_stats_),
      logits);
}

void Engine::commit_round(Sequence& seq, const DraftRound& round, const RejectionOutcome& o,
                          const float* logits) {
  const int k = seq.request->req.params.logprobs;
  if (k >= 0 && !logits)
    raise<InternalError>("a logprobs request's round was verified without its logits rows");
  // The accepted drafts' KV, written by the verify past the last token, now holds committed
  // tokens; the rejected tail's slots are rewritten by the next step before anything reads them.
  seq.num_computed += o.accepted;
  // Emitted token i comes from verify row i, the row plain decoding would have drawn it from:
  // its logprobs are that row's, as sample_row reports them.
  Logprobs lp;
  const auto emit_from_row = [&](int64_t i, int32_t token) {
    if (k >= 0) sampler_.fill_logprobs(logits + i * vocab_, token, k, lp);
    emit(seq, token, k >= 0 ? &lp : nullptr);
  };
  for (int64_t i = 0; i < o.accepted; ++i) {
    emit_from_row(i, round.tokens[static_cast<size_t>(i)]);
    if (seq.finished()) return;
  }
  emit_from_row(o.accepted, o.token);
}

void Engine::draft(const std::vector<ScheduledChunk>& chunks) {
  struct Drafting {
    Sequence* seq;
    Drafter drafter;
    int64_t row;  // its last token's row in the latest MTP step (the next draft's input)
  };
  std::vector<Drafting> active;
  // The catch-up: every position this step's target computed for a drafting sequence pairs
  // the token after it with its hidden state (the forward's carry rows, in batch order).
  mtp_batch_.token_ids.clear();
  mtp_batch_.seqs.clear();
  std::vector<int64_t> carry_rows;
  int64_t offset = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const SequenceChunk& sc = batch_.seqs[i];
    Sequence& s = *chunks[i].seq;
    const int64_t first = offset;
    offset += sc.num_new;
    if (s.finished()) continue;
    const int64_t computed = s.num_computed - sc.num_cached;
    if (computed <= 0) continue;
    const auto len = static_cast<int64_t>(s.tokens.size());
    const bool next = s.num_computed + 1 == len;  // the sequence's next token is the bonus
    int64_t k = 0;
    if (next) {
      // Drafts past max_tokens would never be emitted (and could pass max_model_len).
      const RequestState& rs = *s.request;
      k = std::min(spec_k_, rs.max_tokens - s.num_output() - 1);
      // Draft i > 1 writes the MTP layer's cache at position num_computed + i - 2; without a
      // block for it the round drafts fewer (the scheduler allocates the verify's blocks).
      const int64_t bs = blocks_.block_size();
      if (k > 1 && !blocks_.allocate(s.block_table, s.num_computed + k - 1))
        k = std::min(k, static_cast<int64_t>(s.block_table.size()) * bs - s.num_computed + 1);
    }
    mtp_batch_.token_ids.insert(mtp_batch_.token_ids.end(), s.tokens.begin() + sc.num_cached + 1,
                                s.tokens.begin() + s.num_computed + 1);
    for (int64_t j = 0; j < computed; ++j) carry_rows.push_back(first + j);
    mtp_batch_.seqs.push_back(
        {.num_cached = sc.num_cached,
         .num_new = computed,
         .block_table = s.block_table,
         .prompt_len = s.prompt_len,
         .logits = k > 0 ? SequenceChunk::Logits::kLast : SequenceChunk::Logits::kNone});
    DraftOverride forced;
    if (draft_override_)
      forced = [this, id = &s.request->req.id](int64_t position, int32_t drafted) {
        return draft_override_(*id, position, drafted);
      };
    if (k > 0)
      active.push_back(
          {&s, Drafter(speculative_view(s), s.tokens, s.constraint.get(), k, std::move(forced)),
           mtp_batch_.num_tokens() - 1});
  }
  if (mtp_batch_.seqs.empty()) return;
  // Greedy drafts are drawn on the device (each row's first maximum under its fork's mask, which
  // the host computes while the MTP step runs): only ids come back. Otherwise each MTP logits
  // row comes back for the host's draw.
  const bool on_device = std::all_of(active.begin(), active.end(), [this](const Drafting& d) {
    return speculates_on_device(*d.seq);
  });
  const bool constrained = std::any_of(
      active.begin(), active.end(), [](const Drafting& d) { return d.seq->constraint != nullptr; });
  // A catch-up the MTP layer's CUDA graphs can serve once every token is a logits row reads them
  // all (ModelRunner::mtp_graph_bucket); a drafting sequence's row is then its last token's.
  // Every later draft step has one token, and one row, per sequence.
  bool rows_are_tokens = false;
  if (on_device && !runner_.captured_mtp_buckets().empty()) {
    ForwardBatch every_row = mtp_batch_;
    for (SequenceChunk& sc : every_row.seqs) sc.logits = SequenceChunk::Logits::kAll;
    if (runner_.mtp_graph_bucket(every_row) > 0) {
      mtp_batch_ = std::move(every_row);
      rows_are_tokens = true;
    }
  }
  const auto logit_row = [&](size_t a) {
    return rows_are_tokens ? static_cast<size_t>(active[a].row) : a;
  };
  const auto fork_masks = [&]() -> std::span<const uint32_t> {
    const auto words = static_cast<size_t>(mask_words_);
    spec_masks_.assign(rows_.size() * words, ~0u);
    for (size_t a = 0; a < active.size(); ++a) {
      const std::span<const uint32_t> m = active[a].drafter.mask();
      std::copy(m.begin(), m.end(),
                spec_masks_.begin() + static_cast<std::ptrdiff_t>(logit_row(a) * words));
    }
    return spec_masks_;
  };
  Tensor logits;
  SampledRows drawn;
  const auto run_mtp = [&] {
    if (!on_device) {
      logits = runner_.forward_mtp(mtp_batch_, carry_rows);
      return;
    }
    rows_.assign(static_cast<size_t>(mtp_batch_.num_logit_rows()), ops::RowSampling{});
    drawn = runner_.forward_mtp_sample(mtp_batch_, carry_rows, rows_,
                                       constrained ? ModelRunner::MaskSource(fork_masks) : nullptr);
  };
  const auto add = [&](Drafting& d, size_t a) {
    const size_t r = logit_row(a);
    return on_device ? d.drafter.add_drawn(drawn.ids[r], drawn.logprobs[r], spec_stats_)
                     : d.drafter.add(sampler_, logits.data<float>() + a * vocab_, spec_stats_);
  };
  run_mtp();
  // Drafts 2..k apply the same layer to its own output and the draft just chosen, one token a
  // step for every sequence still drafting.
  for (int64_t i = 0; !active.empty(); ++i) {
    mtp_batch_.token_ids.clear();
    mtp_batch_.seqs.clear();
    carry_rows.clear();
    size_t kept = 0;
    for (size_t a = 0; a < active.size(); ++a) {
      Drafting& d = active[a];
      if (!add(d, a)) {
        d.seq->drafts = d.drafter.take();
        continue;
      }
      mtp_batch_.token_ids.push_back(d.drafter.last());
      mtp_batch_.seqs.push_back({.num_cached = d.seq->num_computed + i,
                                 .num_new = 1,
                                 .block_table = d.seq->block_table,
                                 .prompt_len = d.seq->prompt_len,
                                 .logits = SequenceChunk::Logits::kLast});
      carry_rows.push_back(d.row);
      d.row = static_cast<int64_t>(kept);
      if (a != kept) active[kept] = std::move(d);
      ++kept;
    }
    active.erase(active.begin() + static_cast<std::ptrdiff_t>(kept), active.end());
    if (active.empty()) break;
    rows_are_tokens = true;
    run_mtp();
  }
}

void Engine::fork(Sequence& parent, std::span<const int32_t> first_tokens) {
  RequestState& rs = *parent.request;
  const int64_t shared = parent.prompt_len / blocks_.block_size();
  for (size_t i = 1; i < first_tokens.size(); ++i) {
    auto child = std::make_unique<Sequence>();
    child->request = &rs;
    child->sample_index = static_cast<int>(i);
    child->arrival_order = parent.arrival_order;
    child->tokens.assign(parent.tokens.begin(), parent.tokens.begin() + parent.prompt_len);
    child->prompt_len = parent.prompt_len;
    if (parent.constraint) child->constraint = parent.constraint->clone();
    // Full prompt blocks are shared; the partly filled last one is recomputed into a block of
    // the child's own, so no sequence ever writes into a shared block.
    blocks_.share(parent.block_table, shared, child->block_table);
    child->num_computed = shared * blocks_.block_size();
    child->block_hashes.assign(
        parent.block_hashes.begin(),
        parent.block_hashes.begin() +
            std::min<int64_t>(shared, static_cast<int64_t>(parent.block_hashes.size())));
    scheduler_.add_running(child.get());
    rs.seqs.push_back(std::move(child));
  }
  parent.seq_slots = 1;
}

void Engine::emit(Sequence& seq, int32_t token, const Logprobs* lp, bool defer) {
  // The sequence's pending tokens go out first, and the owner's verdict on one may end it. A
  // deferring step delivered them all while its forward ran.
  if (!defer) report_pending(&seq);
  if (seq.finished()) return;
  RequestState& rs = *seq.request;
  const Clock::time_point now = Clock::now();
  seq.tokens.push_back(token);
  ++rs.completion_tokens;
  ++generation_tokens_;
  if (!rs.first_token_seen) {
    rs.first_token_seen = true;
    rs.timings.first_token = now;
    prompt_tokens_ += seq.prompt_len;
  }
  const bool is_stop =
      std::find(rs.stop_ids.begin(), rs.stop_ids.end(), token) != rs.stop_ids.end();
  if (is_stop && seq.num_output() >= rs.req.params.min_tokens)
    seq.finish = FinishReason::kStop;
  else if (seq.constraint && !advance_constraint(seq, token))
    seq.finish = FinishReason::kAbort;
  else if (seq.constraint && seq.constraint->is_terminated() && rs.stop_ids.empty())
    // Complete with no stop token to end it (ignore_eos): end here. Otherwise the next mask
    // allows only the stop tokens, so the output ends on a stop id as the text layer expects.
    seq.finish = FinishReason::kStop;
  else if (seq.num_output() >= rs.max_tokens)
    seq.finish = FinishReason::kLength;
  if (seq.finished()) {
    finished_.push_back(&seq);
    rs.timings.finish = now;
    publish_stats();
  }
  if (!rs.req.on_token) return;
  TokenEvent ev;
  ev.request_id = &rs.req.id;
  ev.sample_index = seq.sample_index;
  ev.token_id = token;
  ev.logprobs = lp;
  if (seq.request->req.params.prompt_logprobs >= 0 && seq.num_output() == 1)
    ev.prompt_logprobs = &rs.prompt_logprobs;
  ev.finish = seq.finish;
  ev.usage = {static_cast<int64_t>(seq.prompt_len), rs.completion_tokens};
  ev.timings = rs.timings;
  if (!seq.finished()) ev.timings.finish = {};
  // Pending reports point into the request, which lives until its last sample finishes.
  if (defer && !seq.finished() && !lp && !ev.prompt_logprobs) {
    pending_.push_back({&seq, ev});
    return;
  }
  report(seq, ev);
}

void Engine::report(Sequence& seq, const TokenEvent& ev) {
  if (seq.request->req.on_token(ev) == Verdict::kStop && !seq.finished())
    finish(seq, FinishReason::kStop, true);
}

void Engine::report_pending(const Sequence* seq) {
  if (pending_.empty()) return;
  if (seq) {
    // One sequence's (before a report of its own): rare, a finishing token or an abort.
    const auto own = std::stable_partition(pending_.begin(), pending_.end(),
                                           [seq](const PendingReport& p) { return p.seq != seq; });
    const std::vector<PendingReport> due(std::make_move_iterator(own),
                                         std::make_move_iterator(pending_.end()));
    pending_.erase(own, pending_.end());
    for (const PendingReport& p : due)
      if (!p.seq->finished()) report(*p.seq, p.ev);
    return;
  }
  // Every step's: the two buffers trade places, so neither is allocated again. A report's
  // verdict may finish its sequence, which asks only for that sequence's (none left here).
  reporting_.swap(pending_);
  for (const PendingReport& p : reporting_)
    if (!p.seq->finished()) report(*p.seq, p.ev);
  reporting_.clear();
}

bool Engine::advance_constraint(Sequence& seq, int32_t token) {
  try {
    if (seq.constraint->advance(token)) return true;
    MLS_LOG_ERROR("request {}: token {} breaks its output constraint", seq.request->req.id, token);
  } catch (const std::exception& e) {
    MLS_LOG_ERROR("request {}: its output constraint failed: {}", seq.request->req.id, e.what());
  }
  return false;
}

void Engine::finish(Sequence& seq, FinishReason reason, bool notify, const std::string* error) {
  // The sequence's pending tokens go out first; the owner's verdict on one may end it there.
  report_pending(&seq);
  if (seq.finished()) return;
  RequestState& rs = *seq.request;
  seq.finish = reason;
  finished_.push_back(&seq);
  rs.timings.finish = Clock::now();
  publish_stats();
  if (!notify || !rs.req.on_token) return;
  TokenEvent ev;
  ev.request_id = &rs.req.id;
  ev.sample_index = seq.sample_index;
  ev.finish = reason;
  ev.error = error;
  ev.usage = {seq.prompt_len, rs.completion_tokens};
  ev.timings = rs.timings;
  rs.req.on_token(ev);
}

void Engine::retire_finished() {
  for (Sequence* seq : finished_) {
    RequestState& rs = *seq->request;
    scheduler_.remove(seq);
    ++rs.num_finished;
    const bool aborted = seq->finish == FinishReason::kAbort;
    if (rs.done() || (aborted && rs.num_finished == static_cast<int>(rs.seqs.size()))) {
      const std::string id = rs.req.id;
      requests_.erase(id);
      ++finished_requests_;
      std::lock_guard lock(inbox_mu_);
      live_ids_.erase(id);
    }
  }
  finished_.clear();
}

void Engine::publish_stats() {
  std::lock_guard lock(stats_mu_);
  stats_.num_running = scheduler_.num_running();
  stats_.num_waiting = scheduler_.num_waiting();
  stats_.kv_usage = blocks_.usage();
  stats_.num_preemptions = scheduler_.preemptions();
  stats_.prefix_cache_queries = blocks_.prefix_queries();
  stats_.prefix_cache_hits = blocks_.prefix_hits();
  stats_.prompt_tokens = prompt_tokens_;
  stats_.generation_tokens = generation_tokens_;
  stats_.finished_requests = finished_requests_;
  stats_.steps = steps_;
  stats_.schedule_seconds = schedule_seconds_;
  stats_.forward_seconds = forward_seconds_;
  stats_.output_seconds = output_seconds_;
  stats_.spec = spec_stats_;
}

}  // namespace mls
