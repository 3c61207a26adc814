// Runs one model over all its tensor-parallel ranks. Ranks are threads of this process, one
// device each, each holding its weight shard and its own KV cache (DESIGN.md "Parallelism");
// forward() hands the same batch to every rank and returns the logits, which every rank holds
// after the vocab-parallel gather. The engine above sees a single model.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <vector>

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
};

class ModelRunner {
 public:
  explicit ModelRunner(const RunnerOptions& opts);
  ~ModelRunner();
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  const io::ModelConfig& config() const;
  // Rank 0's device.
  Device device() const { return device_; }
  int tp_size() const { return static_cast<int>(ranks_.size()); }
  // The tracked allocator of one rank (the planner reads each rank's figures).
  Allocator& allocator(int rank) const;

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
  // are (ops::sample_rows): only ids and logprobs come back to the host. `masks`, when set, is
  // called once the forward has been issued and returns the rows' allowed-token masks
  // (ops::apply_token_mask layout, R × ceil(V / 32) words; empty: none), which are uploaded and
  // applied before the draw — the host computes them while the device runs the forward.
  using MaskSource = std::function<std::span<const uint32_t>()>;
  SampledRows forward_sample(const ForwardBatch& batch, const std::vector<ops::RowSampling>& rows,
                             const ForwardObserver& observer = nullptr,
                             const MaskSource& masks = nullptr);

  // Per rank, device memory in use that no tracked allocator accounts for (CUDA context,
  // library handles, NCCL buffers): used − pool reserved, measured now. Zeros on the CPU.
  std::vector<int64_t> untracked_device_bytes();

 private:
  struct Rank;
  void run_on_all_ranks(const std::function<void(Rank&)>& fn);
  // One forward on every rank; `finish` runs on rank 0's thread with its logits.
  void step(const ForwardBatch& batch, const ForwardObserver& observer,
            const std::function<void(Rank&, Tensor&)>& finish);
  void stop_workers();

  std::vector<std::unique_ptr<Rank>> ranks_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  Device device_;
  bool sequence_parallel_ = false;
  int64_t num_blocks_ = 0;
  int64_t block_size_ = 0;
};

}  // namespace mls
