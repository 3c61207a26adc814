// Chooses each step's work (vLLM V1 policy): one token budget shared by decode tokens and
// chunked prefill; running sequences first (in arrival order), then waiting ones FCFS while
// budget, sequence slots and KV blocks last. When a running sequence needs a block and none is
// left, the latest-arrived running sequence is preempted by recompute: its blocks are freed and
// it goes back to the front of the waiting queue, to be recomputed (prefix cache permitting,
// cheaply) when it is admitted again.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <vector>

#include "engine/kv_block_manager.h"
#include "engine/sequence.h"

namespace mls {

struct SchedulerConfig {
  int64_t max_num_batched_tokens = 8192;
  int64_t max_num_seqs = 256;
  int64_t num_speculative_tokens = 0;  // k: a decode verifies up to k drafts
};

// Most logits rows a step may produce: what the memory planner profiles (one row per
// sequence of its worst-case step, k + 1 per verifying one). Prompt-logprob chunks are
// shortened to stay within it.
inline int64_t max_logit_rows(const SchedulerConfig& cfg) {
  return std::min(cfg.max_num_seqs * (1 + cfg.num_speculative_tokens), cfg.max_num_batched_tokens);
}

struct ScheduledChunk {
  Sequence* seq = nullptr;
  int64_t num_new = 0;  // tokens from seq->num_computed on, the drafts included
  // Of num_new: the sequence's drafts, verified after its last token (each a logits row and a
  // token of the budget). A step's budget may verify fewer than were drafted.
  int64_t num_drafts = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& cfg, KvBlockManager& blocks);

  // Queues a sequence that holds no blocks (new, or re-queued).
  void add(Sequence* seq);
  // Queues a running sequence right after the sequences already running (forked samples).
  void add_running(Sequence* seq);
  // Drops a sequence wherever it is and frees its blocks.
  void remove(Sequence* seq);

  // Plans one step; the chunks are valid until the next call.
  const std::vector<ScheduledChunk>& schedule();
  // Sequences the last schedule() dropped because they alone need more KV blocks than the pool
  // holds: requeuing one would block the queue forever, so the engine ends it (abort).
  const std::vector<Sequence*>& unschedulable() const { return unschedulable_; }
  // After the forward: advances num_computed of the scheduled chunks over their tokens (not their
  // drafts: the engine counts the accepted ones) and publishes full blocks of committed tokens.
  void commit();

  // Sequences still to be served: a finished one stays queued until its step ends.
  int64_t num_running() const { return unfinished(running_); }
  int64_t num_waiting() const { return unfinished(waiting_); }
  bool empty() const { return running_.empty() && waiting_.empty(); }
  int64_t preemptions() const { return preemptions_; }

 private:
  static int64_t unfinished(const auto& queue) {
    return std::count_if(queue.begin(), queue.end(),
                         [](const Sequence* seq) { return !seq->finished(); });
  }
  void preempt(Sequence* seq);
  void bound_logit_rows();
  void insert_running(Sequence* seq);
  // True (and the sequence dropped, blocks freed) when it can never fit the pool.
  bool drop_if_unschedulable(Sequence* seq);

  SchedulerConfig cfg_;
  KvBlockManager& blocks_;
  std::vector<Sequence*> running_;  // arrival order
  std::deque<Sequence*> waiting_;
  std::vector<ScheduledChunk> out_;
  std::vector<Sequence*> unschedulable_;
  int64_t preemptions_ = 0;
};

}  // namespace mls
