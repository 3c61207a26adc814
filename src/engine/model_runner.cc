#include "engine/model_runner.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/host_buffer.h"
#include "core/logging.h"
#include "engine/decode_graphs.h"
#include "ops/copy.h"
#include "ops/linear.h"
#include "parallel/in_process_communicator.h"
#include "parallel/world.h"
#ifdef MLASERVE_MPI
#include "parallel/mpi_communicator.h"
#endif
#ifdef MLASERVE_CUDA_RUNTIME
#include "core/cuda_allocator.h"
#include "core/cuda_context.h"
#include "core/cuda_graph.h"
#include "parallel/device_communicator.h"
#endif
#ifdef MLASERVE_NCCL
#include "parallel/nccl_communicator.h"
#endif

namespace mls {

// One rank: its allocator, model shard and cache, and a worker thread that runs the jobs
// run_on_all_ranks hands it (rank 0 included, so every rank runs on a thread of its own and
// collectives never wait on the caller).
struct ModelRunner::Rank {
  int index = 0;  // the rank in the whole group (processes × local ranks)
  Device device;
  bool traced = false;  // a meta runner: no device runtime behind this rank
  std::unique_ptr<Allocator> alloc;
  std::unique_ptr<Model> model;
  KvCache kv;
  // An MTP runner's final hidden states of the last step, [rows, hidden_size]: what
  // forward_mtp reads (ModelRunner::forward_keep_hidden).
  Tensor carry;
  // Host memory reused by every step (host_buffer_bytes): page-locked on a CUDA rank.
  bool pinned = false;
  StepStaging staging;               // bound to the worker thread
  HostBuffer ids, logprobs, logits;  // results read back (the returning rank's)
  HostBuffer carry_index;            // an MTP step's carry rows, i32 (what its graph uploads)
#ifdef MLASERVE_CUDA_RUNTIME
  // One captured decode step per bucket: its logits' place in the step workspace, and the
  // staging it reads (which must not move while it exists).
  struct Graph {
    cuda::Graph graph;
    void* logits = nullptr;
    int64_t logits_bytes = 0;
    int64_t vocab = 0;
    const void* index = nullptr;
    const void* tables = nullptr;
  };
  std::map<int64_t, Graph> graphs, mtp_graphs;
#endif

  std::thread worker;
  std::mutex mu;
  std::condition_variable cv;
  std::function<void()> job;
  bool busy = false, stop = false;
  std::exception_ptr error;

  void loop() {
#ifdef MLASERVE_CUDA_RUNTIME
    // Every kernel of this rank goes to this thread's stream on its device.
    if (!device.is_cpu() && !traced) cuda::bind(device.index, alloc.get());
#endif
    StepStaging::bind(&staging);
    for (;;) {
      std::function<void()> j;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return stop || job; });
        if (stop) return;
        j = std::move(job);
        job = nullptr;
      }
      try {
        j();
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard lock(mu);
        busy = false;
      }
      cv.notify_all();
    }
  }
};

ModelRunner::ModelRunner(const RunnerOptions& opts)
    : device_(opts.device),
      sequence_parallel_(opts.sequence_parallel),
      ranks_per_device_(opts.ranks_per_device),
      mtp_(opts.mtp) {
  const int tp = opts.tensor_parallel_size;
  const int rpd = opts.ranks_per_device;
  if (tp < 1) raise<InvalidArgument>("--tensor-parallel-size must be >= 1 (got {})", tp);
  const World& world = World::get();
  if (tp % world.num_processes() != 0)
    raise<InvalidArgument>(
        "--tensor-parallel-size {} over {} processes: every process holds the same number of "
        "ranks, so it must be a multiple of {}",
        tp, world.num_processes(), world.num_processes());
  if (rpd != 1 && rpd != tp)
    raise<InvalidArgument>(
        "--ranks-per-device {} with --tensor-parallel-size {}: either 1 (one GPU per rank) or "
        "all ranks on one GPU",
        rpd, tp);
  if (rpd > 1 && opts.device.is_cpu())
    raise<InvalidArgument>("--ranks-per-device applies to GPUs; CPU ranks share host memory");
  if (rpd > 1 && world.multi_process())
    raise<InvalidArgument>(
        "--ranks-per-device {} puts every rank in one process; under mpirun use one GPU per rank",
        rpd);
  if (opts.mtp && opts.sequence_parallel && tp > 1)
    raise<Unsupported>(
        "speculative decoding with the MTP layer runs with a replicated residual stream, not "
        "under --sequence-parallel");
  tp_size_ = tp;
  graphs_off_ = mls::decode_graphs_off_reason(opts.enforce_eager, opts.device, tp);
  const int local = tp / world.num_processes();
  first_rank_ = world.process() * local;
  // A process's GPUs follow those of the processes before it on its host.
  const int first_device = opts.device.index + world.local_process() * local;
  const bool gpu = !opts.device.is_cpu();
  // A meta runner on a GPU device kind traces sizes only: no GPU, runtime or NCCL needed.
  const bool traced_gpu = gpu && opts.meta;
#ifdef MLASERVE_CUDA_RUNTIME
  const int gpus = local / rpd;
  if (gpu && !traced_gpu && first_device + gpus > cuda_device_count())
    raise<InvalidArgument>(
        "--device {} with --tensor-parallel-size {} and --ranks-per-device {} needs GPUs {}..{} "
        "in process {} of {}, but {} are visible",
        opts.device.str(), tp, rpd, first_device, first_device + gpus - 1, world.process(),
        world.num_processes(), cuda_device_count());
#else
  if (gpu && !traced_gpu)
    raise<Unsupported>("--device {}: this build has no CUDA backend", opts.device.str());
#endif
  std::vector<Allocator*> allocs;
  std::vector<int> devices;
  for (int l = 0; l < local; ++l) {
    auto rank = std::make_unique<Rank>();
    rank->index = first_rank_ + l;
    rank->device = gpu ? Device::cuda(first_device + l / rpd) : Device::cpu();
    rank->traced = traced_gpu;
    rank->pinned = gpu && !traced_gpu;
    if (traced_gpu) rank->alloc = std::make_unique<MetaAllocator>(rank->device);
#ifdef MLASERVE_CUDA_RUNTIME
    if (gpu && !traced_gpu) rank->alloc = std::make_unique<CudaAllocator>(rank->device.index);
#endif
    if (!gpu) rank->alloc = std::make_unique<CpuAllocator>();
    rank->alloc->set_meta(opts.meta);
    allocs.push_back(rank->alloc.get());
    devices.push_back(rank->device.index);
    ranks_.push_back(std::move(rank));
  }
  if (gpu && !traced_gpu && rpd > 1) {
#ifdef MLASERVE_CUDA_RUNTIME
    comms_ = make_device_group(tp, first_device, allocs);
#endif
  } else if (gpu && !traced_gpu && (tp > 1 || World::launched_by_mpirun())) {
#ifdef MLASERVE_NCCL
    if (World::launched_by_mpirun()) {
      // NCCL bootstrapped over MPI: the leader's unique id reaches every process.
      std::vector<uint8_t> id = world.leader() ? make_nccl_unique_id() : std::vector<uint8_t>{};
      World::get().broadcast(id, false, "the NCCL unique id");
      comms_ = make_nccl_group(id, tp, first_rank_, devices, allocs);
    } else {
      comms_ = make_nccl_group(devices, allocs);
    }
#else
    raise<Unsupported>("tensor parallelism on GPUs needs NCCL, which this build lacks");
#endif
  } else if (world.multi_process()) {
#ifdef MLASERVE_MPI
    comms_ = make_mpi_group(local, allocs);
#endif
  } else {
    // A meta runner of a GPU kind traces the collective scratch of the GPU communicator it
    // stands in for (parallel/collective_scratch.h).
    const CommKind traced = !traced_gpu ? CommKind::kHost
                            : rpd > 1   ? CommKind::kDevice
                                        : CommKind::kNccl;
    comms_ = make_in_process_group(tp, allocs, traced);
  }
  for (auto& r : ranks_) r->worker = std::thread([rank = r.get()] { rank->loop(); });
  try {
    const auto t0 = std::chrono::steady_clock::now();
    run_on_all_ranks([&](Rank& r) {
      // The GEMM library's lifetime workspace, taken now: no step allocates it lazily.
      if (!r.traced) ops::take_linear_workspace(r.device);
      LoadOptions lo;
      lo.format = opts.load_format;
      lo.parallel = {tp, r.index, comms_[r.index - first_rank_].get(), opts.sequence_parallel};
      lo.alloc = r.alloc.get();
      lo.topk_tie_order = opts.topk_tie_order;
      lo.batch_invariant = opts.batch_invariant;
      lo.progress = opts.load_progress;
      lo.mtp = opts.mtp;
      r.model = Model::load(opts.model, lo);
    });
    log_load_summary(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  } catch (...) {
    stop_workers();  // no destructor runs for a half-built runner
    throw;
  }
  if (graphs_off_.empty()) graphs_off_ = ranks_[0]->model->decode_host_sync();
  if (opts.batch_invariant) MLS_LOG_INFO("Batch invariance: on (one attention cut for every step)");
  if (!opts.device.is_cpu())
    MLS_LOG_INFO("CUDA graphs for decode: {}",
                 graphs_off_.empty() ? std::string("on, captured once the memory plan is applied")
                                     : "off: " + graphs_off_);
}

// Each process's load, on the leader's log.
void ModelRunner::log_load_summary(double seconds) {
  const World& world = World::get();
  if (!world.multi_process()) return;
  const int64_t weights = ranks_[0]->alloc->stats().cur(MemTag::kWeights);
  const std::string mine = fmt::format(
      "process {} on {}: ranks {}..{} loaded in {:.2f} s, {:.1f} MiB of weights per rank",
      world.process(), world.host(), first_rank_, first_rank_ + static_cast<int>(ranks_.size()) - 1,
      seconds, static_cast<double>(weights) / (1 << 20));
  const auto lines = World::get().gather(
      std::span(reinterpret_cast<const uint8_t*>(mine.data()), mine.size()), "the load summary");
  for (const auto& l : lines) MLS_LOG_INFO("{}", std::string(l.begin(), l.end()));
}

ModelRunner::~ModelRunner() {
  if (!captured_.empty() || !captured_mtp_.empty())
    MLS_LOG_INFO("CUDA graphs served {} steps of the model and {} of the MTP layer", graph_replays_,
                 mtp_graph_replays_);
  try {
    broadcast(RunnerOp::kStop);
  } catch (const std::exception&) {
    // The job is failing already (World::fail_job); the followers go down with it.
  }
  stop_workers();
}

bool ModelRunner::leader() const {
  return World::get().leader();
}

void ModelRunner::broadcast(RunnerOp op, std::vector<int64_t> args, const ForwardBatch* batch,
                            bool observe) {
  World& world = World::get();
  if (!world.multi_process() || !world.leader()) return;
  const auto t0 = std::chrono::steady_clock::now();
  command_.op = op;
  command_.args = std::move(args);
  command_.observe = observe;
  if (batch) command_.batch = *batch;
  encode(command_, wire_);
  world.broadcast(wire_, false, "the step broadcast");
  if (op != RunnerOp::kForward) return;
  ++broadcast_stats_.steps;
  broadcast_stats_.bytes += static_cast<int64_t>(wire_.size());
  broadcast_stats_.seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void ModelRunner::follow() {
  if (leader()) raise<InternalError>("follow() on the leader process");
  const ForwardObserver ignore = [](std::string_view, const Tensor&) {};
  for (;;) {
    World::get().broadcast(wire_, true, "the leader's next command");
    decode(wire_, command_);
    const std::vector<int64_t>& a = command_.args;
    switch (command_.op) {
      case RunnerOp::kForward:
        if (!a.empty() && a[0] != 0)
          forward_keep_hidden(command_.batch);
        else
          forward(command_.batch, command_.observe ? ignore : nullptr);
        break;
      case RunnerOp::kForwardMtp:
        forward_mtp(command_.batch, a);
        break;
      case RunnerOp::kAllocateKv:
        allocate_kv(a.at(0), a.at(1), a.at(2), a.at(3), a.at(4));
        break;
      case RunnerOp::kReleaseKv:
        release_kv_cache();
        break;
      case RunnerOp::kSetMeta:
        set_meta(a.at(0) != 0);
        break;
      case RunnerOp::kResetPeaks:
        reset_peaks();
        break;
      case RunnerOp::kMemoryStats:
        memory_stats();
        break;
      case RunnerOp::kSetLimits:
        set_memory_limits(a);
        break;
      case RunnerOp::kUntrackedBytes:
        untracked_device_bytes();
        break;
      case RunnerOp::kReserveStepWorkspace:
        reserve_step_workspaces(a);
        break;
      case RunnerOp::kStop:
        return;
    }
  }
}

void ModelRunner::stop_workers() {
  for (auto& r : ranks_) {
    {
      std::lock_guard lock(r->mu);
      r->stop = true;
    }
    r->cv.notify_all();
    if (r->worker.joinable()) r->worker.join();
  }
}

void ModelRunner::run_on_all_ranks(const std::function<void(Rank&)>& fn, const char* bounded,
                                   const Meanwhile& meanwhile) {
  for (auto& r : ranks_) {
    std::lock_guard lock(r->mu);
    r->error = nullptr;
    r->busy = true;
    r->job = [&fn, rank = r.get()] { fn(*rank); };
  }
  for (auto& r : ranks_) r->cv.notify_all();
  // The ranks hold `fn` by reference: whatever `meanwhile` throws waits for them.
  std::exception_ptr meanwhile_error;
  try {
    if (meanwhile) meanwhile();
  } catch (...) {
    meanwhile_error = std::current_exception();
  }
  // Under mpirun, GPU collectives (NCCL kernels, which have no timeout of their own) wait on
  // other processes: the whole job is bounded instead. CPU collectives bound each wait.
  const World& world = World::get();
  const bool bound = bounded && World::launched_by_mpirun() && !device_.is_cpu();
  const auto deadline = std::chrono::steady_clock::now() + world.timeout();
  std::exception_ptr first;
  for (auto& r : ranks_) {
    std::unique_lock lock(r->mu);
    const auto idle = [&] { return !r->busy; };
    if (!bound) {
      r->cv.wait(lock, idle);
    } else if (!r->cv.wait_until(lock, deadline, idle)) {
      const std::string msg = fmt::format(
          "distributed timeout: {} on rank {} did not complete within {} s on process {} of {} "
          "({}): a GPU collective waits for a process of the job that died or hangs "
          "(--distributed-timeout-seconds)",
          bounded, r->index, std::chrono::duration<double>(world.timeout()).count(),
          world.process(), world.num_processes(), world.host());
      World::get().fail_job(msg);
      throw DistributedError(msg);
    }
    if (r->error && !first) first = r->error;
  }
  if (first) std::rethrow_exception(first);
  if (meanwhile_error) std::rethrow_exception(meanwhile_error);
}

const io::ModelConfig& ModelRunner::config() const {
  return ranks_[0]->model->config();
}

ops::TopkTieOrder ModelRunner::topk_tie_order() const {
  return ranks_[0]->model->topk_tie_order();
}

bool ModelRunner::batch_invariant() const {
  return ranks_[0]->model->batch_invariant();
}

int64_t ModelRunner::num_mtp_layers() const {
  return ranks_[0]->model->num_mtp_layers();
}

Allocator& ModelRunner::allocator(int rank) const {
  const int local = rank - first_rank_;
  if (local < 0 || local >= static_cast<int>(ranks_.size()))
    raise<InternalError>("rank {} is not one of this process's ranks {}..{}", rank, first_rank_,
                         first_rank_ + static_cast<int>(ranks_.size()) - 1);
  return *ranks_[local]->alloc;
}

std::vector<MemStats> ModelRunner::memory_stats() {
  static_assert(std::is_trivially_copyable_v<MemStats>);
  broadcast(RunnerOp::kMemoryStats);
  std::vector<MemStats> mine;
  for (const auto& r : ranks_) mine.push_back(r->alloc->stats());
  if (!World::get().multi_process()) return mine;
  const auto parts = World::get().gather(
      std::span(reinterpret_cast<const uint8_t*>(mine.data()), mine.size() * sizeof(MemStats)),
      "the memory statistics");
  std::vector<MemStats> all;
  for (const auto& p : parts) {
    const size_t n = p.size() / sizeof(MemStats);
    all.resize(all.size() + n);
    std::memcpy(&all[all.size() - n], p.data(), p.size());
  }
  return all;
}

void ModelRunner::reset_peaks() {
  broadcast(RunnerOp::kResetPeaks);
  for (auto& r : ranks_) r->alloc->reset_peaks();
}

void ModelRunner::set_meta(bool on) {
  drop_graphs();
  broadcast(RunnerOp::kSetMeta, {on ? 1 : 0});
  for (auto& r : ranks_) r->alloc->set_meta(on);
}

void ModelRunner::set_memory_limits(const std::vector<int64_t>& bytes) {
  if (static_cast<int>(bytes.size()) != tp_size_)
    raise<InternalError>("{} memory limits for {} ranks", bytes.size(), tp_size_);
  broadcast(RunnerOp::kSetLimits, bytes);
  for (auto& r : ranks_) r->alloc->set_limit(bytes[r->index]);
}

void ModelRunner::reserve_step_workspaces(const std::vector<int64_t>& bytes) {
  if (static_cast<int>(bytes.size()) != tp_size_)
    raise<InternalError>("{} step workspaces for {} ranks", bytes.size(), tp_size_);
  drop_graphs();
  broadcast(RunnerOp::kReserveStepWorkspace, bytes);
  // On the rank's thread: a GPU region comes from the rank's stream like its steps' memory.
  run_on_all_ranks([&](Rank& r) { r.alloc->reserve_step_workspace(bytes[r.index]); });
}

void ModelRunner::allocate_kv_cache(int64_t num_blocks, int64_t block_size) {
  allocate_kv(num_blocks, block_size, 0, 0, 0);
}

void ModelRunner::allocate_kv_cache(int64_t num_blocks, const ServingLimits& limits) {
  allocate_kv(num_blocks, limits.block_size, limits.max_num_seqs,
              (limits.max_model_len + limits.block_size - 1) / limits.block_size,
              limits.max_num_batched_tokens);
}

namespace {

// What the returning rank reads back at most per step without chunking: sampled ids and
// logprobs for every token, logits for max_num_seqs rows.
struct ReadbackSizes {
  int64_t ids = 0, logprobs = 0, logits = 0;
};
ReadbackSizes readback_sizes(int64_t tokens, int64_t seqs, int64_t vocab) {
  return {4 * tokens, 4 * tokens, 4 * seqs * vocab};
}

int64_t carry_index_bytes(int64_t tokens) {
  return 4 * tokens;
}

// `buf` holds at least `bytes`: it grows only on a runner without serving limits, whose buffers
// are sized by its steps.
HostBuffer& ensure(HostBuffer& buf, int64_t bytes, bool pinned) {
  if (buf.bytes() < bytes) buf = HostBuffer(bytes, pinned);
  return buf;
}

}  // namespace

int64_t ModelRunner::host_buffer_bytes(const ServingLimits& l, int64_t vocab, bool returns,
                                       bool mtp) {
  const int64_t cols = (l.max_model_len + l.block_size - 1) / l.block_size;
  const ReadbackSizes rb = readback_sizes(l.max_num_batched_tokens, l.max_num_seqs, vocab);
  return StepStaging::bytes_for(l.max_num_batched_tokens, l.max_num_seqs, cols) +
         (returns ? rb.ids + rb.logprobs + rb.logits : 0) +
         (mtp ? carry_index_bytes(l.max_num_batched_tokens) : 0);
}

int64_t ModelRunner::mtp_carry_bytes(const ServingLimits& l, const io::ModelConfig& c,
                                     Device device, bool mtp) {
  if (!mtp) return 0;
  return l.max_num_batched_tokens * c.hidden_size *
         static_cast<int64_t>(dtype_size(activation_dtype(device)));
}

void ModelRunner::allocate_kv(int64_t num_blocks, int64_t block_size, int64_t table_rows,
                              int64_t table_cols, int64_t tokens) {
  drop_graphs();
  broadcast(RunnerOp::kAllocateKv, {num_blocks, block_size, table_rows, table_cols, tokens});
  run_on_all_ranks([&](Rank& r) {
    r.kv = KvCache();  // free the old cache before taking the new one
    r.carry = Tensor();
    r.kv = KvCache::allocate(r.model->config(), num_blocks, block_size, activation_dtype(r.device),
                             *r.alloc, mtp_);
    r.kv.table_rows = table_rows;
    r.kv.table_cols = table_cols;
    if (tokens == 0) return;
    // Serving limits: the carry once, at its largest (mtp_carry_bytes).
    if (mtp_) {
      r.carry = Tensor::empty({tokens, r.model->config().hidden_size}, activation_dtype(r.device),
                              MemTag::kActivation, *r.alloc);
      r.carry_index = HostBuffer(carry_index_bytes(tokens), r.pinned);
    }
    // Serving limits: the host buffers once, at their largest (host_buffer_bytes).
    r.staging.reserve(tokens, table_rows, table_cols, r.pinned);
    if (r.index != 0) return;
    const ReadbackSizes rb = readback_sizes(tokens, table_rows, r.model->config().vocab_size);
    r.ids = HostBuffer(rb.ids, r.pinned);
    r.logprobs = HostBuffer(rb.logprobs, r.pinned);
    r.logits = HostBuffer(rb.logits, r.pinned);
  });
  num_blocks_ = num_blocks;
  block_size_ = block_size;
  planned_limits_.reset();
}

void ModelRunner::release_kv_cache() {
  drop_graphs();
  broadcast(RunnerOp::kReleaseKv);
  run_on_all_ranks([](Rank& r) {
    r.kv = KvCache();
    r.carry = Tensor();
  });
  num_blocks_ = 0;
  block_size_ = 0;
  planned_limits_.reset();
}

void ModelRunner::check_step(const ForwardBatch& batch) const {
  if (num_blocks_ == 0) raise<InternalError>("forward before allocate_kv_cache");
  for (int32_t id : batch.token_ids)
    if (id < 0 || id >= config().vocab_size)
      raise<InvalidArgument>("token id {} outside the vocabulary of {}", id, config().vocab_size);
}

namespace {

// The rank's carry holds `rows` (a runner without serving limits grows it to its steps).
void ensure_carry(Tensor& carry, int64_t rows, int64_t width, DType dtype, Allocator& alloc) {
  if (carry.defined() && carry.dim(0) >= rows) return;
  carry = Tensor();
  carry = Tensor::empty({rows, width}, dtype, MemTag::kActivation, alloc);
}

// Adds the wall time of its scope to `total` (ModelRunner::forward_seconds).
class ForwardTimer {
 public:
  explicit ForwardTimer(double& total) : total_(total) {}
  ~ForwardTimer() {
    total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  ForwardTimer(const ForwardTimer&) = delete;
  ForwardTimer& operator=(const ForwardTimer&) = delete;

 private:
  double& total_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace

void ModelRunner::step(const ForwardBatch& batch, const ForwardObserver& observer,
                       const std::function<void(Rank&, Tensor&)>& finish, bool keep_hidden,
                       const Meanwhile& meanwhile) {
  const ForwardTimer timer(forward_seconds_);
  check_step(batch);
  if (keep_hidden && !mtp_)
    raise<InternalError>("a step keeps its hidden states for the MTP layer, which is not loaded");
  // Under speculative decoding every graph keeps its hidden states (decode_graphs.h).
  if (const int64_t bucket = graph_bucket_for(captured_, batch); bucket > 0 && !observer)
    return replay(batch, bucket, finish, std::nullopt, meanwhile);
  // On a GPU with a memory plan, a step a graph could serve runs padded to its graph bucket also
  // when it runs eagerly (--enforce-eager, a bucket not captured, an observer): the kernels then
  // see the row counts a replay sees (cuBLASLt's and our FP8 GEMMs choose their algorithm and K
  // split by the row count), so graphs on or off give each sequence the same bits.
  ForwardBatch padded;
  if (!device_.is_cpu() && planned_limits_)
    if (const int64_t bucket = graph_bucket_for(pad_buckets_, batch); bucket > batch.num_tokens())
      padded = pad_decode_batch(batch, bucket);
  const ForwardBatch& run = padded.seqs.empty() ? batch : padded;
  const int64_t rows = batch.num_logit_rows();
  broadcast(RunnerOp::kForward, {keep_hidden ? 1 : 0}, &run, observer != nullptr);
  run_on_all_ranks(
      [&](Rank& r) {
        if (keep_hidden)
          ensure_carry(r.carry, batch.num_tokens(), r.model->config().hidden_size,
                       activation_dtype(r.device), *r.alloc);
        // Everything the step allocates lives in the rank's step workspace and is gone when the
        // scope closes (allocator.h).
        Allocator::StepScope scope(*r.alloc);
        {
          // Every rank observes when rank 0 does: under sequence parallelism an observed tensor
          // is gathered from all ranks' shards, a collective every rank must join.
          const ForwardObserver ignore = [](std::string_view, const Tensor&) {};
          Tensor hidden;
          Tensor logits = r.model->forward(run, r.kv, r.index == 0 || !observer ? observer : ignore,
                                           keep_hidden ? &hidden : nullptr);
          if (keep_hidden) {
            Tensor dst = r.carry.narrow(0, 0, batch.num_tokens());
            ops::copy(hidden.narrow(0, 0, batch.num_tokens()), dst);
          }
          if (r.index == 0) {
            Tensor own = logits.dim(0) == rows ? logits : logits.narrow(0, 0, rows);
            finish(r, own);
          }
        }
        scope.close();
      },
      "the forward step", meanwhile);
}

Tensor ModelRunner::to_host(Rank& r, const Tensor& logits) {
  if (!logits.raw()) return {};  // meta: nothing comes back
  // The logits come back to memory of their own (the engine samples on the host): the
  // step's workspace is the next step's.
  Tensor result =
      Tensor::empty(logits.shape(), DType::kF32, MemTag::kActivation, default_allocator());
  if (r.device.is_cpu()) {
    ops::copy(logits, result);
    return result;
  }
  // Through the rank's page-locked buffer, max_num_seqs rows at a time.
  const int64_t R = logits.dim(0), V = logits.dim(1);
  HostBuffer& buf = r.logits.bytes() >= 4 * V ? r.logits : ensure(r.logits, 4 * R * V, r.pinned);
  const int64_t chunk = buf.bytes() / (4 * V);
  for (int64_t first = 0; first < R; first += chunk) {
    const int64_t n = std::min(chunk, R - first);
    Tensor staged = Tensor::wrap(buf.data<float>(), {n, V}, DType::kF32);
    ops::copy(logits.narrow(0, first, n), staged);  // returns once the rows have arrived
    std::memcpy(result.data<float>() + first * V, buf.data<float>(),
                static_cast<size_t>(n * V) * sizeof(float));
  }
  return result;
}

Tensor ModelRunner::forward(const ForwardBatch& batch, const ForwardObserver& observer) {
  Tensor result;
  step(batch, observer, [&](Rank& r, Tensor& logits) { result = to_host(r, logits); });
  return result;
}

Tensor ModelRunner::forward_keep_hidden(const ForwardBatch& batch) {
  Tensor result;
  step(
      batch, nullptr, [&](Rank& r, Tensor& logits) { result = to_host(r, logits); }, true);
  return result;
}

Tensor ModelRunner::forward_mtp(const ForwardBatch& batch, std::span<const int64_t> carry_rows) {
  Tensor result;
  mtp_step(batch, carry_rows, [&](Rank& r, Tensor& logits) { result = to_host(r, logits); });
  return result;
}

SampledRows ModelRunner::forward_mtp_sample(const ForwardBatch& batch,
                                            std::span<const int64_t> carry_rows,
                                            const std::vector<ops::RowSampling>& rows,
                                            const MaskSource& masks) {
  SampledRows out;
  mtp_step(batch, carry_rows, [&](Rank& r, Tensor& logits) { draw(r, logits, rows, masks, out); });
  return out;
}

void ModelRunner::mtp_step(const ForwardBatch& batch, std::span<const int64_t> carry_rows,
                           const std::function<void(Rank&, Tensor&)>& finish) {
  const ForwardTimer timer(forward_seconds_);
  check_step(batch);
  if (!mtp_ || num_mtp_layers() == 0)
    raise<InternalError>("forward_mtp on a runner without its MTP layers");
  const int64_t N = batch.num_tokens();
  if (static_cast<int64_t>(carry_rows.size()) != N)
    raise<InternalError>("forward_mtp: {} carry rows for {} tokens", carry_rows.size(), N);
  for (const int64_t row : carry_rows)
    if (row < 0 || row >= ranks_[0]->carry.dim(0))
      raise<InternalError>("forward_mtp: carry row {} outside the carry", row);
  if (const int64_t bucket = mtp_graph_bucket_for(captured_mtp_, batch); bucket > 0)
    return replay(batch, bucket, finish, carry_rows);
  std::vector<int32_t> rows(carry_rows.begin(), carry_rows.end());
  broadcast(RunnerOp::kForwardMtp, std::vector<int64_t>(carry_rows.begin(), carry_rows.end()),
            &batch);
  run_on_all_ranks(
      [&](Rank& r) {
        Allocator::StepScope scope(*r.alloc);
        {
          Tensor logits = mtp_forward(r, batch, Tensor::wrap(rows.data(), {N}, DType::kI32));
          if (r.index == 0) finish(r, logits);
        }
        scope.close();
      },
      "the MTP step");
}

Tensor ModelRunner::mtp_forward(Rank& r, const ForwardBatch& batch, const Tensor& rows) {
  const int64_t N = batch.num_tokens(), H = r.model->config().hidden_size;
  const DType act = activation_dtype(r.device);
  Tensor index = rows;
  if (!r.device.is_cpu()) {
    index = Tensor::empty({N}, DType::kI32, MemTag::kActivation, *r.alloc);
    ops::copy(rows, index);
  }
  Tensor prev = Tensor::empty({N, H}, act, MemTag::kActivation, *r.alloc);
  ops::gather_rows(r.carry, index, prev);
  Tensor hidden;
  Tensor logits = r.model->forward_mtp(batch, prev, r.kv, hidden);
  Tensor dst = r.carry.narrow(0, 0, N);
  ops::copy(hidden, dst);
  return logits;
}

void ModelRunner::draw(Rank& r, Tensor& logits, const std::vector<ops::RowSampling>& rows,
                       const MaskSource& masks, SampledRows& out) {
  const auto R = static_cast<int64_t>(rows.size());
  out.ids.assign(static_cast<size_t>(R), 0);
  out.logprobs.assign(static_cast<size_t>(R), 0.0f);
  const std::span<const uint32_t> mask = masks ? masks() : std::span<const uint32_t>();
  if (!mask.empty()) {
    const int64_t words = (logits.dim(1) + 31) / 32;
    if (static_cast<int64_t>(mask.size()) != R * words)
      raise<ShapeError>("forward_sample: {} mask words for {} rows of {}", mask.size(), R,
                        logits.dim(1));
    Tensor host = Tensor::wrap(const_cast<uint32_t*>(mask.data()), {R, words}, DType::kI32);
    if (r.device.is_cpu()) {
      ops::apply_token_mask(logits, host);
    } else {
      Tensor dev = Tensor::empty({R, words}, DType::kI32, MemTag::kActivation, *r.alloc);
      ops::copy(host, dev);
      ops::apply_token_mask(logits, dev);
    }
  }
  if (r.device.is_cpu()) {
    Tensor ids = Tensor::wrap(out.ids.data(), {R}, DType::kI32);
    Tensor logprobs = Tensor::wrap(out.logprobs.data(), {R}, DType::kF32);
    if (logits.raw()) ops::sample_rows(logits, rows, ids, logprobs);
    return;
  }
  Tensor dev_ids = Tensor::empty({R}, DType::kI32, MemTag::kActivation, *r.alloc);
  Tensor dev_logprobs = Tensor::empty({R}, DType::kF32, MemTag::kActivation, *r.alloc);
  ops::sample_rows(logits, rows, dev_ids, dev_logprobs);
  if (!dev_ids.raw()) return;  // meta: sizes traced, nothing comes back
  // Back through the rank's page-locked buffers.
  Tensor ids = Tensor::wrap(ensure(r.ids, 4 * R, r.pinned).data<int32_t>(), {R}, DType::kI32);
  Tensor logprobs =
      Tensor::wrap(ensure(r.logprobs, 4 * R, r.pinned).data<float>(), {R}, DType::kF32);
  ops::copy(dev_ids, ids);
  ops::copy(dev_logprobs, logprobs);
  std::copy_n(ids.data<int32_t>(), R, out.ids.begin());
  std::copy_n(logprobs.data<float>(), R, out.logprobs.begin());
}

SampledRows ModelRunner::forward_sample(const ForwardBatch& batch,
                                        const std::vector<ops::RowSampling>& rows,
                                        const ForwardObserver& observer, const MaskSource& masks,
                                        bool keep_hidden, const Meanwhile& meanwhile) {
  SampledRows out;
  step(
      batch, observer, [&](Rank& r, Tensor& logits) { draw(r, logits, rows, masks, out); },
      keep_hidden, meanwhile);
  return out;
}

void ModelRunner::drop_graphs() {
#ifdef MLASERVE_CUDA_RUNTIME
  if (!captured_.empty() || !captured_mtp_.empty())
    run_on_all_ranks([](Rank& r) {
      r.graphs.clear();
      r.mtp_graphs.clear();
    });
#endif
  captured_.clear();
  captured_mtp_.clear();
  graph_bytes_ = 0;
}

namespace {

// A graph step's staging (StepStaging::full_reach_keys) for the length of a scope.
class FullReach {
 public:
  FullReach(StepStaging& s, int64_t keys) : s_(s) { s_.full_reach_keys = keys; }
  ~FullReach() { s_.full_reach_keys = 0; }
  FullReach(const FullReach&) = delete;
  FullReach& operator=(const FullReach&) = delete;

 private:
  StepStaging& s_;
};

}  // namespace

void ModelRunner::capture_decode_graphs(const std::vector<int64_t>& buckets) {
  drop_graphs();
  if (!decode_graphs() || buckets.empty() || ranks_[0]->traced) return;
  if (!planned_limits_)
    raise<InternalError>("decode graphs are captured after the memory plan is applied");
#ifdef MLASERVE_CUDA_RUNTIME
  const ServingLimits limits = *planned_limits_;
  const bool mtp = mtp_ && num_mtp_layers() > 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int64_t> captured, captured_mtp;
  std::string skipped, failure;
  run_on_all_ranks([&](Rank& r) {
    // One graph of `bucket`: the decode step, or the MTP layer's draft step (at position 1: its
    // position-0 rule is a host decision). False once the capture stops.
    const auto capture = [&](int64_t bucket, bool of_mtp) {
      const ForwardBatch batch = capture_batch(bucket, of_mtp ? 1 : 0, r.kv.block_size);
      const char* what = of_mtp ? "MTP " : "";
      Rank::Graph g;
      // The step as the graph will hold it: embedding to logits, in the step workspace; under
      // speculative decoding the hidden states go to the carry.
      const auto run = [&](bool record) {
        Allocator::StepScope scope(*r.alloc);
        {
          Tensor logits;
          if (of_mtp) {
            logits = mtp_forward(
                r, batch, Tensor::wrap(r.carry_index.data<int32_t>(), {bucket}, DType::kI32));
          } else {
            Tensor hidden;
            logits = r.model->forward(batch, r.kv, nullptr, mtp_ ? &hidden : nullptr);
            if (mtp_) {
              Tensor dst = r.carry.narrow(0, 0, bucket);
              ops::copy(hidden, dst);
            }
          }
          if (record) {
            g.logits = logits.raw();
            g.vocab = logits.dim(1);
          }
          g.logits_bytes = static_cast<int64_t>(logits.nbytes());
        }
        scope.close();
      };
      if (of_mtp)
        for (int64_t t = 0; t < bucket; ++t)
          r.carry_index.data<int32_t>()[t] = static_cast<int32_t>(t);
      const int64_t before = cuda::device_bytes_in_use();
      try {
        const FullReach reach(r.staging, limits.max_model_len);
        // Eagerly first: cuBLASLt plans chosen and tuned outside the capture, and the step shown
        // to fit the workspace (it throws OutOfMemory past it).
        run(false);
        cuda::synchronize();
        r.staging.make_room(0, 0);  // nothing left to wait for inside the capture
        g.graph = cuda::Graph::capture([&] { run(true); });
      } catch (const OutOfMemory& e) {
        skipped += fmt::format(" {}{} ({})", what, bucket, e.what());
        return true;
      } catch (const Error& e) {
        // A step that cannot be captured (the CUDA error named): it and the larger buckets run
        // eagerly, loudly; the smaller ones keep their graphs.
        failure = fmt::format("{}{} and larger (capture failed: {})", what, bucket, e.what());
        return false;
      }
      const int64_t bytes = cuda::device_bytes_in_use() - before;
      if (graph_bytes_ + bytes > kDecodeGraphAllowanceBytes) {
        skipped += fmt::format(" {}{}.. (the graphs would take {} bytes, over the planned {})",
                               what, bucket, graph_bytes_ + bytes, kDecodeGraphAllowanceBytes);
        return false;
      }
      graph_bytes_ += bytes;
      g.index = r.staging.index.data<void>();
      g.tables = r.staging.tables.data<void>();
      (of_mtp ? r.mtp_graphs : r.graphs).emplace(bucket, std::move(g));
      (of_mtp ? captured_mtp : captured).push_back(bucket);
      return true;
    };
    for (const int64_t bucket : buckets)
      if (!capture(bucket, false) || (mtp && !capture(bucket, true))) break;
  });
  captured_ = std::move(captured);
  captured_mtp_ = std::move(captured_mtp);
  if (!failure.empty()) skipped += " " + failure;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MLS_LOG_INFO(
      "CUDA graphs for decode: captured {} of {} batch-size buckets (up to {}){} in {:.2f} s, "
      "{:.1f} MiB of device memory (planned {:.0f} MiB)",
      captured_.size(), buckets.size(), captured_.empty() ? 0 : captured_.back(),
      mtp ? fmt::format(" and {} of the MTP layer's", captured_mtp_.size()) : "", secs,
      static_cast<double>(graph_bytes_) / (1 << 20),
      static_cast<double>(kDecodeGraphAllowanceBytes) / (1 << 20));
  if (!skipped.empty())
    MLS_LOG_WARN("CUDA graphs for decode: these buckets run eagerly:{}", skipped);
#else
  raise<Unsupported>("CUDA graphs need the CUDA runtime, which this build lacks");
#endif
}

void ModelRunner::replay(const ForwardBatch& batch, int64_t bucket,
                         const std::function<void(Rank&, Tensor&)>& finish,
                         std::optional<std::span<const int64_t>> carry_rows,
                         const Meanwhile& meanwhile) {
#ifdef MLASERVE_CUDA_RUNTIME
  const ForwardBatch padded = pad_decode_batch(batch, bucket);
  const int64_t R = batch.num_logit_rows();
  const int64_t max_keys = planned_limits_->max_model_len;
  const char* what = carry_rows ? "MTP graph" : "decode graph";
  const auto job = [&](Rank& r) {
    Rank::Graph& g = (carry_rows ? r.mtp_graphs : r.graphs).at(bucket);
    {
      const FullReach reach(r.staging, max_keys);
      StepContext::stage(padded, r.kv.block_size, {r.kv.table_rows, r.kv.table_cols}, 0, bucket,
                         r.staging);
    }
    if (r.staging.index.data<void>() != g.index || r.staging.tables.data<void>() != g.tables)
      raise<InternalError>("the step staging moved after {} {} was captured", what, bucket);
    // The MTP step's carry rows, padded as its tokens are (the last one repeated). The previous
    // step has finished reading them: every MTP step ends reading its results back.
    if (carry_rows) {
      int32_t* index = r.carry_index.data<int32_t>();
      for (int64_t t = 0; t < bucket; ++t)
        index[t] = static_cast<int32_t>(
            (*carry_rows)[static_cast<size_t>(std::min<int64_t>(t, batch.num_tokens() - 1))]);
    }
    Allocator::StepScope scope(*r.alloc);
    {
      // The graph's logits stay where the capture put them: the step's own allocations (the
      // draw's outputs, masks) go past them. The first allocation of a step sits at the
      // workspace's start.
      Tensor first = Tensor::empty({1}, DType::kI32, MemTag::kActivation, *r.alloc);
      char* const base = static_cast<char*>(first.raw());
      const int64_t upto = static_cast<char*>(g.logits) - base + g.logits_bytes;
      first = Tensor();
      const Tensor hold =
          Tensor::empty({(upto + 3) / 4}, DType::kI32, MemTag::kActivation, *r.alloc);
      if (hold.raw() != base)
        raise<InternalError>("the step workspace did not place {} {}'s step at its start", what,
                             bucket);
      g.graph.replay();
      r.staging.mark_uploaded();
      Tensor logits =
          Tensor::wrap(g.logits, {bucket, g.vocab}, DType::kF32, r.device).narrow(0, 0, R);
      finish(r, logits);
    }
    scope.close();
  };
  run_on_all_ranks(job, nullptr, meanwhile);
  ++(carry_rows ? mtp_graph_replays_ : graph_replays_);
#else
  (void)batch, (void)bucket, (void)finish, (void)carry_rows, (void)meanwhile;
  raise<InternalError>("no decode graph without the CUDA runtime");
#endif
}

std::vector<int64_t> ModelRunner::untracked_device_bytes() {
  broadcast(RunnerOp::kUntrackedBytes);
  std::vector<int64_t> out(ranks_.size(), 0);
#ifdef MLASERVE_CUDA_RUNTIME
  if (!device_.is_cpu() && !ranks_[0]->traced)
    run_on_all_ranks([&](Rank& r) {
      cuda::synchronize();
      int64_t free_b = 0, total_b = 0;
      cuda_memory_info(r.device.index, &free_b, &total_b);
      const auto& ca = static_cast<const CudaAllocator&>(*r.alloc);
      out[r.index - first_rank_] =
          std::max<int64_t>(0, total_b - free_b - ca.reserved_bytes()) / ranks_per_device_;
    });
#endif
  if (!World::get().multi_process()) return out;
  const auto parts = World::get().gather(
      std::span(reinterpret_cast<const uint8_t*>(out.data()), out.size() * sizeof(int64_t)),
      "the untracked device memory");
  std::vector<int64_t> all;
  for (const auto& p : parts) {
    const size_t n = p.size() / sizeof(int64_t);
    all.resize(all.size() + n);
    std::memcpy(&all[all.size() - n], p.data(), p.size());
  }
  return all;
}

}  // namespace mls
