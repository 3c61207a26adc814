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
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/decode_graphs.h"
#include "engine/serving_limits.h"
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
  // cpu, or cuda:N: rank r then runs on GPU N + r / ranks_per_device (bf16 compute; NCCL
  // between GPUs).
  Device device = Device::cpu();
  // Ranks sharing one GPU: 1 (each rank its own GPU), or tensor_parallel_size (every rank on
  // GPU N, collectives through the in-process device communicator; each rank plans with
  // 1/ranks_per_device of the GPU's memory).
  int ranks_per_device = 1;
  // Trace only: every rank's allocator starts in meta mode, so weights get their true sizes but
  // no memory (planning a model that does not fit this machine). On a GPU device kind no GPU or
  // CUDA runtime is needed: the ranks hold sizes only (planning a GPU from a laptop).
  bool meta = false;
  ops::TopkTieOrder topk_tie_order = ops::kDefaultTopkTieOrder;  // the DSA indexer's
  // Never capture CUDA graphs for decode (vLLM's --enforce-eager; engine/decode_graphs.h). Off
  // by default, as in vLLM: replays are bitwise equal to eager steps (eager decode steps pad to
  // the same buckets), so graphs change no output.
  bool enforce_eager = false;
  // Every token's results independent of its step (ModelConstants::batch_invariant).
  bool batch_invariant = false;
  // Weight-loading progress of every rank (model/model_weights.h), e.g. a progress bar.
  WeightLoadProgress load_progress = nullptr;
  // Speculative decoding: also load the checkpoint's MTP layers, give the KV cache their layers
  // and keep a step's final hidden states on each rank for forward_mtp (its "carry").
  bool mtp = false;
};

class ModelRunner {
 public:
  explicit ModelRunner(const RunnerOptions& opts);
  ~ModelRunner();
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  const io::ModelConfig& config() const;
  ops::TopkTieOrder topk_tie_order() const;
  bool batch_invariant() const;  // RunnerOptions::batch_invariant, as the ranks loaded it
  // The MTP layers loaded (RunnerOptions::mtp), 0 without.
  int64_t num_mtp_layers() const;
  // Rank 0's device.
  Device device() const { return device_; }
  int tp_size() const { return tp_size_; }
  int ranks_per_device() const { return ranks_per_device_; }
  // The tracked allocator of one of this process's ranks (the planner reads each rank's figures).
  Allocator& allocator(int rank) const;
  // Every rank's allocator figures in rank order, gathered from every process (the planner's
  // input); reset_peaks, set_meta and set_memory_limits (one limit per rank) reach every rank.
  std::vector<MemStats> memory_stats();
  void reset_peaks();
  void set_meta(bool on);
  void set_memory_limits(const std::vector<int64_t>& bytes);
  // Reserves each rank's step workspace (one size per rank; 0 releases it): every later step's
  // activations and op scratch are placed inside it (core/step_arena.h), at the same addresses
  // for the same step.
  void reserve_step_workspaces(const std::vector<int64_t>& bytes);

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

  // Host memory a rank holds for its steps' inputs and outputs at `limits` (page-locked on a
  // CUDA rank; core/host_buffer.h): the step staging (model/step_context.h) and, on the rank
  // that returns results (rank 0), the sampled ids and logprobs and a logits buffer of
  // max_num_seqs rows of `vocab` floats through which larger readbacks go in chunks.
  // An MTP runner also stages its MTP steps' carry rows there.
  static int64_t host_buffer_bytes(const ServingLimits& limits, int64_t vocab, bool returns,
                                   bool mtp);
  // Device memory a rank of an MTP runner holds for its carry at `limits`: the final hidden
  // states of one step's tokens (max_num_batched_tokens rows of hidden_size), 0 without MTP.
  static int64_t mtp_carry_bytes(const ServingLimits& limits, const io::ModelConfig& c,
                                 Device device, bool mtp);

  // CUDA graphs for decode (engine/decode_graphs.h), decided once at construction: "" when this
  // runner captures them once a memory plan is applied (a meta runner plans for them), else why
  // not.
  const std::string& decode_graphs_off_reason() const { return graphs_off_; }
  bool decode_graphs() const { return graphs_off_.empty(); }
  // Captures one decode graph per bucket (ascending, from the plan) on every rank, replacing any
  // earlier ones, and on an MTP runner one of the MTP layer's draft step too; buckets whose step
  // does not fit are left to run eagerly. Logs the capture time and the device memory the graphs
  // took (measured; at most kDecodeGraphAllowanceBytes).
  void capture_decode_graphs(const std::vector<int64_t>& buckets);
  // The buckets captured now (empty: every step eager), and the steps served by replay so far.
  const std::vector<int64_t>& captured_buckets() const { return captured_; }
  const std::vector<int64_t>& captured_mtp_buckets() const { return captured_mtp_; }
  // The MTP graph bucket that would serve `batch` (decode_graphs.h), 0: it runs eagerly.
  int64_t mtp_graph_bucket(const ForwardBatch& batch) const {
    return mtp_graph_bucket_for(captured_mtp_, batch);
  }
  // Wall time spent in forward steps (every forward* call) since construction: the engine's
  // account of a step's time (EngineStats).
  double forward_seconds() const { return forward_seconds_; }
  int64_t graph_replays() const { return graph_replays_; }
  int64_t mtp_graph_replays() const { return mtp_graph_replays_; }
  int64_t graph_bytes() const { return graph_bytes_; }

  // (Re)allocates the paged KV cache on every rank; each step's block tables are sized to its
  // batch.
  void allocate_kv_cache(int64_t num_blocks, int64_t block_size);
  // The same for serving `limits` (at their block size): every step's block tables at the fixed
  // shape [max_num_seqs, ceil(max_model_len / block_size)] and address (KvCache::table_rows).
  void allocate_kv_cache(int64_t num_blocks, const ServingLimits& limits);
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
  // `keep_hidden`: as forward_keep_hidden (a speculative step whose verify rows are drawn here).
  // `meanwhile`, when set, runs on the calling thread once every rank has been given the step,
  // while they run it: host work that overlaps the device's (the engine delivers the previous
  // step's tokens there).
  using MaskSource = std::function<std::span<const uint32_t>()>;
  using Meanwhile = std::function<void()>;
  SampledRows forward_sample(const ForwardBatch& batch, const std::vector<ops::RowSampling>& rows,
                             const ForwardObserver& observer = nullptr,
                             const MaskSource& masks = nullptr, bool keep_hidden = false,
                             const Meanwhile& meanwhile = nullptr);
  // Speculative decoding (an MTP runner): forward(), each rank keeping every token's final hidden
  // state (after model.norm) in its carry, row t for the batch's token t. A verify step of at
  // most the largest bucket's tokens replays a decode graph (engine/decode_graphs.h).
  Tensor forward_keep_hidden(const ForwardBatch& batch);
  // The MTP layer (Model::forward_mtp) over `batch` on every rank, token t's previous hidden
  // state being carry row carry_rows[t] (rows of the last forward_keep_hidden or forward_mtp);
  // the carry then holds this step's block outputs, row t for token t (the next draft's input).
  // Logits of the batch's logit rows, f32, host memory. A step an MTP graph serves replays it.
  Tensor forward_mtp(const ForwardBatch& batch, std::span<const int64_t> carry_rows);
  // forward_mtp(), then rank 0 draws one token per logits row as forward_sample does: only the
  // drafts' ids and logprobs come back to the host.
  SampledRows forward_mtp_sample(const ForwardBatch& batch, std::span<const int64_t> carry_rows,
                                 const std::vector<ops::RowSampling>& rows,
                                 const MaskSource& masks = nullptr);

  // The limits of the memory plan applied to this runner (apply_plan), if any: an engine over
  // this runner must serve with exactly these.
  const std::optional<ServingLimits>& planned_limits() const { return planned_limits_; }
  void set_planned_limits(const ServingLimits& l) {
    planned_limits_ = l;
    pad_buckets_ = decode_graph_buckets(l.max_num_seqs);
  }

  // Per rank, device memory in use that no tracked allocator accounts for (CUDA context,
  // library handles, NCCL buffers): used − pool reserved, measured now, shared evenly by the
  // ranks of one GPU. Zeros on the CPU and for a meta runner.
  std::vector<int64_t> untracked_device_bytes();

 private:
  struct Rank;
  // `bounded` (the job's name) bounds the wait by World::timeout() under mpirun on GPUs.
  // `meanwhile` runs on the calling thread between handing out the jobs and waiting for them.
  void run_on_all_ranks(const std::function<void(Rank&)>& fn, const char* bounded = nullptr,
                        const Meanwhile& meanwhile = nullptr);
  // One forward on every rank; `finish` runs on rank 0's thread with its logits. `keep_hidden`:
  // the final hidden states go to each rank's carry. `meanwhile`: as forward_sample's.
  void step(const ForwardBatch& batch, const ForwardObserver& observer,
            const std::function<void(Rank&, Tensor&)>& finish, bool keep_hidden = false,
            const Meanwhile& meanwhile = nullptr);
  void check_step(const ForwardBatch& batch) const;
  // The MTP layer's step on every rank; `finish` runs on rank 0's thread with its logits. A step
  // an MTP graph can serve (mtp_graph_bucket_for) replays it.
  void mtp_step(const ForwardBatch& batch, std::span<const int64_t> carry_rows,
                const std::function<void(Rank&, Tensor&)>& finish);
  // The MTP layer over `batch` on rank r, in the caller's step scope: token t's previous hidden
  // state is carry row rows[t] (host i32 [N]); the block outputs go to carry rows [0, N).
  static Tensor mtp_forward(Rank& r, const ForwardBatch& batch, const Tensor& rows);
  // Rank 0's draw of one token per row of `logits` (forward_sample), into `out`.
  static void draw(Rank& r, Tensor& logits, const std::vector<ops::RowSampling>& rows,
                   const MaskSource& masks, SampledRows& out);
  // Rank 0's logits of a step, copied to host memory of their own.
  static Tensor to_host(Rank& r, const Tensor& logits);
  void stop_workers();
  // A step served by a captured graph (tp 1): pads `batch` to `bucket` and replays; with
  // `carry_rows`, the MTP layer's graph over those carry rows.
  void replay(const ForwardBatch& batch, int64_t bucket,
              const std::function<void(Rank&, Tensor&)>& finish,
              std::optional<std::span<const int64_t>> carry_rows = std::nullopt,
              const Meanwhile& meanwhile = nullptr);
  // Drops every captured graph (their addresses are about to change).
  void drop_graphs();
  // allocate_kv_cache with the block tables' fixed shape (0 rows: per step).
  // `tokens` (max_num_batched_tokens; 0: none) sizes the host buffers once.
  void allocate_kv(int64_t num_blocks, int64_t block_size, int64_t table_rows, int64_t table_cols,
                   int64_t tokens);
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
  int ranks_per_device_ = 1;
  bool mtp_ = false;
  int64_t num_blocks_ = 0;
  int64_t block_size_ = 0;
  std::optional<ServingLimits> planned_limits_;
  // The plan's decode-graph buckets, which eager decode steps on a GPU pad to as well (step).
  std::vector<int64_t> pad_buckets_;
  std::string graphs_off_;
  std::vector<int64_t> captured_, captured_mtp_;
  double forward_seconds_ = 0;
  int64_t graph_replays_ = 0, mtp_graph_replays_ = 0;
  int64_t graph_bytes_ = 0;
};

}  // namespace mls
