#include "engine/model_runner.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "ops/copy.h"
#include "parallel/in_process_communicator.h"
#ifdef MLASERVE_CUDA_RUNTIME
#include "core/cuda_allocator.h"
#include "core/cuda_context.h"
#endif
#ifdef MLASERVE_NCCL
#include "parallel/nccl_communicator.h"
#endif

namespace mls {

// One rank: its allocator, model shard and cache, and a worker thread that runs the jobs
// run_on_all_ranks hands it (rank 0 included, so every rank runs on a thread of its own and
// collectives never wait on the caller).
struct ModelRunner::Rank {
  int index = 0;
  Device device;
  std::unique_ptr<Allocator> alloc;
  std::unique_ptr<Model> model;
  KvCache kv;

  std::thread worker;
  std::mutex mu;
  std::condition_variable cv;
  std::function<void()> job;
  bool busy = false, stop = false;
  std::exception_ptr error;

  void loop() {
#ifdef MLASERVE_CUDA_RUNTIME
    // Every kernel of this rank goes to this thread's stream on its device.
    if (!device.is_cpu()) cuda::bind(device.index, alloc.get());
#endif
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
    : device_(opts.device), sequence_parallel_(opts.sequence_parallel) {
  const int tp = opts.tensor_parallel_size;
  if (tp < 1) raise<InvalidArgument>("--tensor-parallel-size must be >= 1 (got {})", tp);
  const bool gpu = !opts.device.is_cpu();
#ifdef MLASERVE_CUDA_RUNTIME
  if (gpu && opts.device.index + tp > cuda_device_count())
    raise<InvalidArgument>(
        "--device {} with --tensor-parallel-size {} needs GPUs {}..{}, but {} "
        "are visible",
        opts.device.str(), tp, opts.device.index, opts.device.index + tp - 1, cuda_device_count());
#else
  if (gpu) raise<Unsupported>("--device {}: this build has no CUDA backend", opts.device.str());
#endif
  std::vector<Allocator*> allocs;
  std::vector<int> devices;
  for (int r = 0; r < tp; ++r) {
    auto rank = std::make_unique<Rank>();
    rank->index = r;
    rank->device = gpu ? Device::cuda(opts.device.index + r) : Device::cpu();
#ifdef MLASERVE_CUDA_RUNTIME
    if (gpu) rank->alloc = std::make_unique<CudaAllocator>(rank->device.index);
#endif
    if (!gpu) rank->alloc = std::make_unique<CpuAllocator>();
    rank->alloc->set_meta(opts.meta);
    allocs.push_back(rank->alloc.get());
    devices.push_back(rank->device.index);
    ranks_.push_back(std::move(rank));
  }
  if (gpu && tp > 1) {
#ifdef MLASERVE_NCCL
    comms_ = make_nccl_group(devices, allocs);
#else
    raise<Unsupported>("tensor parallelism on GPUs needs NCCL, which this build lacks");
#endif
  } else {
    comms_ = make_in_process_group(tp, allocs);
  }
  for (auto& r : ranks_) r->worker = std::thread([rank = r.get()] { rank->loop(); });
  try {
    run_on_all_ranks([&](Rank& r) {
      LoadOptions lo;
      lo.format = opts.load_format;
      lo.parallel = {tp, r.index, comms_[r.index].get(), opts.sequence_parallel};
      lo.alloc = r.alloc.get();
      r.model = Model::load(opts.model, lo);
    });
  } catch (...) {
    stop_workers();  // no destructor runs for a half-built runner
    throw;
  }
}

ModelRunner::~ModelRunner() {
  stop_workers();
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

void ModelRunner::run_on_all_ranks(const std::function<void(Rank&)>& fn) {
  for (auto& r : ranks_) {
    std::lock_guard lock(r->mu);
    r->error = nullptr;
    r->busy = true;
    r->job = [&fn, rank = r.get()] { fn(*rank); };
  }
  for (auto& r : ranks_) r->cv.notify_all();
  std::exception_ptr first;
  for (auto& r : ranks_) {
    std::unique_lock lock(r->mu);
    r->cv.wait(lock, [&] { return !r->busy; });
    if (r->error && !first) first = r->error;
  }
  if (first) std::rethrow_exception(first);
}

const io::ModelConfig& ModelRunner::config() const {
  return ranks_[0]->model->config();
}

Allocator& ModelRunner::allocator(int rank) const {
  return *ranks_.at(rank)->alloc;
}

void ModelRunner::allocate_kv_cache(int64_t num_blocks, int64_t block_size) {
  run_on_all_ranks([&](Rank& r) {
    r.kv = KvCache();  // free the old cache before taking the new one
    r.kv = KvCache::allocate(r.model->config(), num_blocks, block_size, activation_dtype(r.device),
                             *r.alloc);
  });
  num_blocks_ = num_blocks;
  block_size_ = block_size;
}

void ModelRunner::release_kv_cache() {
  run_on_all_ranks([](Rank& r) { r.kv = KvCache(); });
  num_blocks_ = 0;
  block_size_ = 0;
}

void ModelRunner::step(const ForwardBatch& batch, const ForwardObserver& observer,
                       const std::function<void(Rank&, Tensor&)>& finish) {
  if (num_blocks_ == 0) raise<InternalError>("forward before allocate_kv_cache");
  for (int32_t id : batch.token_ids)
    if (id < 0 || id >= config().vocab_size)
      raise<InvalidArgument>("token id {} outside the vocabulary of {}", id, config().vocab_size);
  run_on_all_ranks([&](Rank& r) {
    // Every rank observes when rank 0 does: under sequence parallelism an observed tensor is
    // gathered from all ranks' shards, a collective every rank must join.
    const ForwardObserver ignore = [](std::string_view, const Tensor&) {};
    Tensor logits = r.model->forward(batch, r.kv, r.index == 0 || !observer ? observer : ignore);
    if (r.index == 0 && logits.raw()) finish(r, logits);
  });
}

Tensor ModelRunner::forward(const ForwardBatch& batch, const ForwardObserver& observer) {
  Tensor result;
  step(batch, observer, [&](Rank& r, Tensor& logits) {
    if (r.device.is_cpu()) {
      result = std::move(logits);
      return;
    }
    // Device logits come back to host memory (the engine samples on the host).
    result = Tensor::empty(logits.shape(), DType::kF32, MemTag::kActivation, default_allocator());
    ops::copy(logits, result);
  });
  return result;
}

SampledRows ModelRunner::forward_sample(const ForwardBatch& batch,
                                        const std::vector<ops::RowSampling>& rows,
                                        const ForwardObserver& observer, const MaskSource& masks) {
  const auto R = static_cast<int64_t>(rows.size());
  SampledRows out{std::vector<int32_t>(R), std::vector<float>(R)};
  step(batch, observer, [&](Rank& r, Tensor& logits) {
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
    Tensor ids = Tensor::wrap(out.ids.data(), {R}, DType::kI32);
    Tensor logprobs = Tensor::wrap(out.logprobs.data(), {R}, DType::kF32);
    if (r.device.is_cpu()) return ops::sample_rows(logits, rows, ids, logprobs);
    Tensor dev_ids = Tensor::empty({R}, DType::kI32, MemTag::kActivation, *r.alloc);
    Tensor dev_logprobs = Tensor::empty({R}, DType::kF32, MemTag::kActivation, *r.alloc);
    ops::sample_rows(logits, rows, dev_ids, dev_logprobs);
    ops::copy(dev_ids, ids);
    ops::copy(dev_logprobs, logprobs);
  });
  return out;
}

std::vector<int64_t> ModelRunner::untracked_device_bytes() {
  std::vector<int64_t> out(ranks_.size(), 0);
#ifdef MLASERVE_CUDA_RUNTIME
  if (device_.is_cpu()) return out;
  run_on_all_ranks([&](Rank& r) {
    cuda::synchronize();
    int64_t free_b = 0, total_b = 0;
    cuda_memory_info(r.device.index, &free_b, &total_b);
    const auto& ca = static_cast<const CudaAllocator&>(*r.alloc);
    out[r.index] = std::max<int64_t>(0, total_b - free_b - ca.reserved_bytes());
  });
#endif
  return out;
}

}  // namespace mls
