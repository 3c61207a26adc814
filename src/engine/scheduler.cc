#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace mls {

Scheduler::Scheduler(const SchedulerConfig& cfg, KvBlockManager& blocks)
    : cfg_(cfg), blocks_(blocks) {
  if (cfg.max_num_batched_tokens < 1)
    raise<InvalidArgument>("max_num_batched_tokens must be >= 1 (got {})",
                           cfg.max_num_batched_tokens);
  if (cfg.max_num_seqs < 1)
    raise<InvalidArgument>("max_num_seqs must be >= 1 (got {})", cfg.max_num_seqs);
  running_.reserve(cfg.max_num_seqs);
  out_.reserve(cfg.max_num_seqs);
}

void Scheduler::add(Sequence* seq) {
  MLS_CHECK(seq->block_table.empty(), "a waiting sequence holds no blocks");
  waiting_.push_back(seq);
}

void Scheduler::add_running(Sequence* seq) {
  insert_running(seq);
}

void Scheduler::insert_running(Sequence* seq) {
  const auto later = [](const Sequence* a, const Sequence* b) {
    return a->arrival_order != b->arrival_order ? a->arrival_order < b->arrival_order
                                                : a->sample_index < b->sample_index;
  };
  running_.insert(std::upper_bound(running_.begin(), running_.end(), seq, later), seq);
}

void Scheduler::remove(Sequence* seq) {
  if (auto it = std::find(running_.begin(), running_.end(), seq); it != running_.end())
    running_.erase(it);
  else if (auto w = std::find(waiting_.begin(), waiting_.end(), seq); w != waiting_.end())
    waiting_.erase(w);
  blocks_.free(seq->block_table);
}

void Scheduler::preempt(Sequence* seq) {
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  blocks_.free(seq->block_table);
  seq->num_computed = 0;
  seq->drafts.clear();
  waiting_.push_front(seq);
  ++preemptions_;
}

bool Scheduler::drop_if_unschedulable(Sequence* seq) {
  const auto len = static_cast<int64_t>(seq->tokens.size());
  if ((len + blocks_.block_size() - 1) / blocks_.block_size() <= blocks_.num_blocks()) return false;
  remove(seq);
  unschedulable_.push_back(seq);
  return true;
}

const std::vector<ScheduledChunk>& Scheduler::schedule() {
  out_.clear();
  unschedulable_.clear();
  int64_t budget = cfg_.max_num_batched_tokens;
  bool preempted = false;
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* s = running_[i];
    if (drop_if_unschedulable(s)) {
      --i;
      continue;
    }
    // The drafts count against the budget like any token; a short budget verifies fewer.
    const int64_t pending = static_cast<int64_t>(s->tokens.size()) - s->num_computed;
    const int64_t n = std::min(pending + s->drafts.size(), budget);
    s->drafts.truncate(std::max<int64_t>(0, n - pending));
    // Victims come from the back, past every sequence already scheduled this step.
    while (s && !blocks_.allocate(s->block_table, s->num_computed + n)) {
      Sequence* victim = running_.back();
      preempt(victim);
      preempted = true;
      if (victim == s) s = nullptr;
    }
    if (!s) break;
    out_.push_back({s, n, s->drafts.size()});
    budget -= n;
  }
  // Admitting while others were just preempted would only thrash.
  while (!preempted && !waiting_.empty() && budget > 0) {
    Sequence* s = waiting_.front();
    if (drop_if_unschedulable(s)) continue;
    if (static_cast<int64_t>(running_.size()) + s->seq_slots > cfg_.max_num_seqs) break;
    const auto len = static_cast<int64_t>(s->tokens.size());
    if (blocks_.prefix_caching() && !s->prompt_logits) {
      blocks_.extend_hashes(s->tokens, s->block_hashes);
      s->num_computed = blocks_.take_cached_prefix(s->tokens, s->block_hashes, s->block_table);
    }
    const int64_t n = std::min(len - s->num_computed, budget);
    if (!blocks_.allocate(s->block_table, s->num_computed + n)) {
      blocks_.free(s->block_table);
      s->num_computed = 0;
      break;
    }
    waiting_.pop_front();
    insert_running(s);
    out_.push_back({s, n});
    budget -= n;
  }
  bound_logit_rows();
  return out_;
}

// A chunk scoring its prompt yields a logits row per token; other chunks at most one, so only
// those chunks (the latest first) are shortened. The sequences they belong to hold a slot, so
// the other rows stay below the bound and every step still advances them by a token or more.
void Scheduler::bound_logit_rows() {
  const int64_t max_rows = max_logit_rows(cfg_);
  int64_t rows = 0;
  for (const ScheduledChunk& c : out_) {
    const Sequence& s = *c.seq;
    rows += s.chunk_has_all_logits() ? c.num_new
            : s.num_computed + c.num_new - c.num_drafts == static_cast<int64_t>(s.tokens.size())
                ? 1 + c.num_drafts
                : 0;
  }
  for (size_t i = out_.size(); i-- > 0 && rows > max_rows;) {
    if (!out_[i].seq->chunk_has_all_logits()) continue;
    const int64_t cut = std::min(rows - max_rows, out_[i].num_new);
    out_[i].num_new -= cut;
    rows -= cut;
    if (out_[i].num_new == 0) out_.erase(out_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

void Scheduler::commit() {
  for (const ScheduledChunk& c : out_) {
    Sequence& s = *c.seq;
    s.num_computed += c.num_new - c.num_drafts;
    if (!blocks_.prefix_caching()) continue;
    blocks_.extend_hashes(std::span(s.tokens).first(s.num_computed), s.block_hashes);
    const auto full =
        std::min<size_t>(s.block_hashes.size(), s.num_computed / blocks_.block_size());
    blocks_.cache_blocks(s.tokens, s.block_table, std::span(s.block_hashes).first(full));
  }
}

}  // namespace mls
