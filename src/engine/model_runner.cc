#include "engine/model_runner.h"

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "parallel/in_process_communicator.h"

namespace mls {

// One rank: its allocator, model shard and cache, and a worker thread that runs the jobs
// run_on_all_ranks hands it (rank 0 included, so every rank runs on a thread of its own and
// collectives never wait on the caller).
struct ModelRunner::Rank {
  int index = 0;
  std::unique_ptr<CpuAllocator> alloc = std::make_unique<CpuAllocator>();
  std::unique_ptr<Model> model;
  KvCache kv;
  Tensor result;

  std::thread worker;
  std::mutex mu;
  std::condition_variable cv;
  std::function<void()> job;
  bool busy = false, stop = false;
  std::exception_ptr error;

  void loop() {
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

ModelRunner::ModelRunner(const RunnerOptions& opts) : sequence_parallel_(opts.sequence_parallel) {
  const int tp = opts.tensor_parallel_size;
  if (tp < 1) raise<InvalidArgument>("--tensor-parallel-size must be >= 1 (got {})", tp);
  if (!opts.device.is_cpu())
    raise<Unsupported>("--device {}: this build runs on the cpu only", opts.device.str());
  std::vector<Allocator*> allocs;
  for (int r = 0; r < tp; ++r) {
    auto rank = std::make_unique<Rank>();
    rank->index = r;
    rank->alloc->set_meta(opts.meta);
    allocs.push_back(rank->alloc.get());
    ranks_.push_back(std::move(rank));
  }
  comms_ = make_in_process_group(tp, allocs);
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
    r.kv = KvCache::allocate(r.model->config(), num_blocks, block_size, *r.alloc);
  });
  num_blocks_ = num_blocks;
  block_size_ = block_size;
}

void ModelRunner::release_kv_cache() {
  run_on_all_ranks([](Rank& r) { r.kv = KvCache(); });
  num_blocks_ = 0;
  block_size_ = 0;
}

Tensor ModelRunner::forward(const ForwardBatch& batch, const ForwardObserver& observer) {
  if (num_blocks_ == 0) raise<InternalError>("forward before allocate_kv_cache");
  for (int32_t id : batch.token_ids)
    if (id < 0 || id >= config().vocab_size)
      raise<InvalidArgument>("token id {} outside the vocabulary of {}", id, config().vocab_size);
  run_on_all_ranks([&](Rank& r) {
    r.result = r.model->forward(batch, r.kv, r.index == 0 ? observer : nullptr);
  });
  Tensor logits = std::move(ranks_[0]->result);
  for (auto& r : ranks_) r->result = Tensor();
  return logits;
}

}  // namespace mls
