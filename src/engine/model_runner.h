// Runs one model over all its tensor-parallel ranks. Ranks are threads, one device each, each
// holding its weight shard and its own KV cache (DESIGN.md "Parallelism"); forward() hands the
// same batch to every rank and returns the logits, which every rank holds after the
// vocab-parallel gather. The engine above sees a single model.
//
// Under mpirun (parallel/world.h, docs/multi-node.md) every process builds the runner with the
// same options and runs its share of the ranks; the leader's calls are broadcast to the other
// processes (engine/step_broadcast.h), which run follow() until the leader's runner is gone.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "engine/step_broadcast.h"
#include "model/model.h"
#include "ops/sampling.h"

namespace mls {

// The tokens a step drew, one per logits row, and each one's raw logprob.
struct SampledRows {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
};

struct RunnerOptions {
  std::filesystem::path model;
  LoadFormat load_format = LoadFormat::kAuto;
  int tensor_parallel_size = 1;
  bool sequence_parallel = false;
  // cpu, or cuda:N: rank r then runs on GPU N + r (bf16 compute; NCCL between ranks).
  Device device = Device::cpu();
  // Trace only: every rank's allocator starts in meta mode, so weights get their true sizes but
  // no memory (planning a model that does not fit this machine).
  bool meta = false;
  ops::TopkTieOrder topk_tie_order = ops::kDefaultTopkTieOrder;  // the DSA indexer's
};

class ModelRunner {
 public:
  explicit ModelRunner(const RunnerOptions& opts);
  ~ModelRunner();
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  const io::ModelConfig& config() const;
  ops::TopkTieOrder topk_tie_order() const;
  // Rank 0's device.
  Device device() const { return device_; }
  int tp_size() const { return tp_size_; }
  // The tracked allocator of one of this process's ranks.
  Allocator& allocator(int rank) const;
  // Every rank's allocator figures in rank order, gathered from every process (the planner's
  // input); reset_peaks, set_meta and set_memory_limits (one limit per rank) reach every rank.
  std::vector<MemStats> memory_stats();
  void reset_peaks();
  void set_meta(bool on);
  void set_memory_limits(const std::vector<int64_t>& bytes);

  // The world's leader process drives the runner; a follower calls follow() after
  // construction, which runs the leader's calls on this process's ranks until the leader's
  // runner is destroyed.
  bool leader() const;
  void follow();
  // What the leader has broadcast to the followers (nothing in a one-process world).
  struct BroadcastStats {
    int64_t steps = 0;   // forward commands
    int64_t bytes = 0;   // their encoded size
    double seconds = 0;  // encoding and broadcasting them
  };
  BroadcastStats broadcast_stats() const { return broadcast_stats_; }
  void reset_broadcast_stats() { broadcast_stats_ = {}; }

  // (Re)allocates the paged KV cache on every rank.
  void allocate_kv_cache(int64_t num_blocks, int64_t block_size);
  // Frees the KV cache on every rank.
  void release_kv_cache();
  bool sequence_parallel() const { return sequence_parallel_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }

  // One step on every rank: logits [batch.num_logit_rows(), vocab_size] (f32, host memory).
  // The observer runs on rank 0's thread (whose device stream the intermediates belong to).
  Tensor forward(const ForwardBatch& batch, const ForwardObserver& observer = nullptr);
  // forward(), then rank 0 draws one token per logits row (rows[r] for row r) where the logits
  // are (ops::sample_rows): only ids and logprobs come back to the host.
  SampledRows forward_sample(const ForwardBatch& batch, const std::vector<ops::RowSampling>& rows,
                             const ForwardObserver& observer = nullptr);

  // Per rank, device memory in use that no tracked allocator accounts for (CUDA context,
  // library handles, NCCL buffers): used − pool reserved, measured now. Zeros on the CPU.
  std::vector<int64_t> untracked_device_bytes();

 private:
  struct Rank;
  // `bounded` (the job's name) bounds the wait by World::timeout() under mpirun on GPUs.
  void run_on_all_ranks(const std::function<void(Rank&)>& fn, const char* bounded = nullptr);
  // One forward on every rank; `finish` runs on rank 0's thread with its logits.
  void step(const ForwardBatch& batch, const ForwardObserver& observer,
            const std::function<void(Rank&, Tensor&)>& finish);
  void stop_workers();
  // On the leader of a multi-process world: sends the command to the followers.
  void broadcast(RunnerOp op, std::vector<int64_t> args = {}, const ForwardBatch* batch = nullptr,
                 bool observe = false);
  void log_load_summary(double seconds);

  int tp_size_ = 1;
  int first_rank_ = 0;  // this process's first rank
  RunnerCommand command_;
  std::vector<uint8_t> wire_;
  BroadcastStats broadcast_stats_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  Device device_;
  bool sequence_parallel_ = false;
  int64_t num_blocks_ = 0;
  int64_t block_size_ = 0;
};

}  // namespace mls
