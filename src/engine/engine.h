// The serving engine: requests in, tokens out through per-request callbacks. Each step()
// schedules (token budget, KV blocks, preemption), runs one forward over every scheduled chunk,
// samples the sequences whose chunk reached their last token, reports the tokens and retires
// finished samples. A step drawn on the device reports its tokens that end nothing while the
// next step's forward runs (Engine::emit), so the device does not wait for the callbacks.
// add_request and abort_request may be called from any thread (they go through a small locked
// inbox that step() drains); everything else runs on the loop thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/host_worker.h"
#include "engine/kv_block_manager.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/serving_limits.h"
#include "engine/speculative_stats.h"

namespace mls {

struct EngineConfig {
  // Over a planned runner exactly the plan's limits (MemoryPlan::limits); otherwise (tests,
  // tools) block_size is the runner's and an unset max_model_len is max_position_embeddings
  // capped to what the KV pool holds.
  ServingLimits limits;
  bool enable_prefix_caching = true;
  // Draw tokens where the logits are when every row of a step allows it (Engine::step says
  // when); otherwise, or when false, the logits come to the host's Sampler.
  bool device_sampling = true;
  // Set: requests without a seed take theirs from a generator seeded with it (vLLM's --seed),
  // so a run repeats when requests arrive in the same order. Unset: from std::random_device.
  std::optional<uint64_t> seed = std::nullopt;
  // Called on the stepping thread after each step with the tokens it computed.
  std::function<void(int64_t tokens)> on_step = nullptr;
};

// Counters for metrics (vLLM names in comments).
struct EngineStats {
  int64_t num_running = 0;           // num_requests_running (sequences)
  int64_t num_waiting = 0;           // num_requests_waiting (sequences)
  double kv_usage = 0.0;             // kv_cache_usage_perc, as a fraction
  int64_t num_preemptions = 0;       // num_preemptions_total
  int64_t prefix_cache_queries = 0;  // prefix_cache_queries_total (tokens)
  int64_t prefix_cache_hits = 0;     // prefix_cache_hits_total (tokens)
  int64_t prompt_tokens = 0;         // prompt_tokens_total
  int64_t generation_tokens = 0;     // generation_tokens_total
  int64_t finished_requests = 0;     // request_success_total (any finish reason)
  // Steps that ran a forward, and their wall time: scheduling and preparing the batch, the
  // runner's forward (the device's step, and the host work that overlaps it), and the rest
  // (drawing on the host, reporting tokens, retiring sequences). The log's step line.
  int64_t steps = 0;
  double schedule_seconds = 0.0, forward_seconds = 0.0, output_seconds = 0.0;
  // Speculative decoding (limits.num_speculative_tokens > 0), summed over every sequence;
  // k = 0 positions when off.
  SpeculativeStats spec = SpeculativeStats(0);
};

struct RequestState;

class Engine {
 public:
  // The runner's KV cache must be allocated; its blocks become the engine's pool.
  Engine(ModelRunner& runner, const EngineConfig& cfg);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // The configuration with the limits resolved.
  const EngineConfig& config() const { return cfg_; }
  // Test seam for speculative decoding (DraftOverride, speculative_round.h, per request):
  // replaces the token drafted for a request at a sequence position. Loop thread.
  using RequestDraftOverride =
      std::function<int32_t(const std::string& request_id, int64_t position, int32_t drafted)>;
  void set_draft_override(RequestDraftOverride o) { draft_override_ = std::move(o); }

  // Validates the request (InvalidArgument naming the field) and queues it. Any thread.
  void add_request(Request req);
  // Finishes every sample of the request with `abort` and frees its blocks at the next step;
  // unknown or finished ids are ignored. Any thread.
  void abort_request(const std::string& id);

  // One scheduling step, forward and sampling; returns has_work(). A failure inside the step
  // fails that step's requests only (fail_step). Loop thread.
  bool step();
  bool has_work() const;
  EngineStats stats() const;  // any thread

  const KvBlockManager& block_manager() const { return blocks_; }  // loop thread

 private:
  void drain_inbox();
  void admit(std::unique_ptr<RequestState> rs);
  void abort_now(const std::string& id);
  bool can_sample_on_device() const;
  // Whether the sequence's draw needs nothing the host's copy of its logits row gives.
  bool samples_on_device(const Sequence& seq) const;
  // Whether the sequence's next draw is its n > 1 request's first, which takes every sample's
  // token from one row and forks the request (Engine::fork).
  bool first_draw_forks(const Sequence& seq) const;
  SampleInput sample_input(const Sequence& seq, int sample_index) const;
  void score_prompts(const std::vector<ScheduledChunk>& chunks, const float* logits);
  // Structured outputs: starts computing the allowed-token masks of this step's constrained
  // rows on the mask worker (false when no row is constrained); masks() waits for them.
  bool start_masks();
  std::span<const uint32_t> masks();
  std::span<const uint32_t> mask_row(size_t r) const;
  void sample_row(Sequence& seq, const float* logits, std::span<const uint32_t> allowed);
  // Speculative decoding: the MTP layer follows every sequence. Rows scoring a prompt
  // (prompt_logprobs) are target rows of the host path like any other; a logprobs request's
  // tokens report their verify rows' logprobs. An n > 1 request's parent catches the MTP layer up
  // on the prompt but verifies no round until its first draw has forked the request
  // (first_draw_forks); each sample then drafts as its own sequence.
  SpeculativeSequence speculative_view(const Sequence& seq) const;
  // Whether its drafts and verify rows are drawn on the device (greedy, nothing host-only): only
  // token ids come back (ModelRunner::forward_sample, forward_mtp_sample).
  bool speculates_on_device(const Sequence& seq) const;
  // A speculative step whose every row is drawn on the device: the target forward keeps its
  // hidden states and returns the ids of each verify row (the drafts' masks applied).
  void verify_on_device();
  // Accepts the sequence's verified round (`logits`: its drafts + 1 rows) and emits the tokens.
  void accept(Sequence& seq, const float* logits, size_t mask_row_index);
  // The same from the device's ids of its drafts + 1 verify rows (a greedy sequence).
  void accept_drawn(Sequence& seq, std::span<const int32_t> ids);
  // Emits a verified round's outcome: its accepted drafts, then the token after them, each with
  // the logprobs of the verify row it came from when the request asks for them (`logits`: the
  // round's rows; null for a device-drawn round, which never has logprobs).
  void commit_round(Sequence& seq, const DraftRound& round, const RejectionOutcome& o,
                    const float* logits);
  // The MTP layer catches up on what this step's target forward computed for each drafting
  // sequence, then drafts the next round of those that go on (carry: the forward's hidden rows).
  void draft(const std::vector<ScheduledChunk>& chunks);
  void fork(Sequence& parent, std::span<const int32_t> first_tokens);
  // Appends the token to the sequence, decides whether it ends it and reports it. With `defer`
  // (a step drawn on the device, which delivered every pending report while its forward ran), a
  // token that ends nothing is reported while the next step's forward runs (report_pending);
  // without, the sequence's pending reports go out first. A sequence already finished (a kStop
  // verdict on a pending token) takes no more tokens; so does finish().
  void emit(Sequence& seq, int32_t token, const Logprobs* lp, bool defer = false);
  // Delivers the pending token reports, in order: all of them, or only `seq`'s.
  void report_pending(const Sequence* seq = nullptr);
  void report(Sequence& seq, const TokenEvent& ev);
  // Advances the sequence's constraint; false (logged) when the token breaks it.
  bool advance_constraint(Sequence& seq, int32_t token);
  void finish(Sequence& seq, FinishReason reason, bool notify, const std::string* error = nullptr);
  // An error inside one step (out of memory, a kernel failure) ends the requests of that step
  // with the error; the engine and every other request go on.
  void fail_step(const std::vector<ScheduledChunk>& chunks, const std::string& what);
  void retire_finished();
  // At the end of each step, and before a finished sequence's event reaches its client: a
  // metrics scrape made once a response is complete counts its tokens and not it as running.
  void publish_stats();

  ModelRunner& runner_;
  EngineConfig cfg_;
  int64_t vocab_;
  KvBlockManager blocks_;
  Scheduler scheduler_;
  Sampler sampler_;
  ForwardBatch batch_;
  std::vector<Sequence*> sampled_;      // this step's sequences that draw a token, in row order
  std::vector<int64_t> sample_rows_;    // the logits row each of them draws from
  bool scores_prompt_ = false;          // some chunk of this step scores its prompt
  std::vector<ops::RowSampling> rows_;  // their draws, for the device path
  std::vector<int32_t> drawn_;          // tokens drawn from one logits row (n at a fork)
  std::vector<Logprobs> logprobs_;
  int64_t mask_words_;
  std::vector<uint32_t> masks_;       // sampled_.size() rows of mask_words_ (when constrained)
  std::vector<uint8_t> mask_failed_;  // per row: its constraint threw while masking
  bool masked_ = false;               // this step's rows carry masks
  HostWorker mask_worker_;
  int64_t spec_k_;  // num_speculative_tokens, 0 off
  SpeculativeStats spec_stats_;
  RequestDraftOverride draft_override_;
  ForwardBatch mtp_batch_;
  std::vector<uint32_t> spec_masks_;  // a device-drawn speculative step's rows' masks
  std::vector<Sequence*> finished_;
  struct PendingReport {
    Sequence* seq;
    TokenEvent ev;
  };
  std::vector<PendingReport> pending_, reporting_;  // reporting_: report_pending's buffer
  int64_t steps_ = 0;
  double schedule_seconds_ = 0.0, forward_seconds_ = 0.0, output_seconds_ = 0.0;
  std::unordered_map<std::string, std::unique_ptr<RequestState>> requests_;
  uint64_t next_arrival_ = 0;
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0, finished_requests_ = 0;

  mutable std::mutex inbox_mu_;
  std::vector<std::unique_ptr<RequestState>> inbox_adds_;
  std::vector<std::string> inbox_aborts_;
  std::unordered_set<std::string> live_ids_;  // queued or running request ids

  mutable std::mutex stats_mu_;
  EngineStats stats_;

  std::mutex seed_mu_;
  std::mt19937_64 seed_rng_;
};

}  // namespace mls
