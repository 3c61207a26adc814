#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>

namespace mls {

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::worker_loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (stop_ && tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = std::min<int64_t>(size(), (n + grain - 1) / grain);
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  // Queued tasks may start after every chunk is done and the caller has returned, so the state
  // they touch is shared-owned; `fn` is only called for a claimed chunk, while the caller waits.
  struct State {
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    std::mutex mu;
    std::condition_variable cv;
    std::exception_ptr error;
  };
  auto st = std::make_shared<State>();
  const int64_t step = (n + chunks - 1) / chunks;
  const auto* f = &fn;
  auto run_chunks = [st, f, chunks, step, n] {
    for (;;) {
      const int64_t c = st->next.fetch_add(1);
      if (c >= chunks) return;
      const int64_t b = c * step, e = std::min(n, b + step);
      try {
        if (b < e) (*f)(b, e);
      } catch (...) {
        std::lock_guard lock(st->mu);
        if (!st->error) st->error = std::current_exception();
      }
      if (st->done.fetch_add(1) + 1 == chunks) {
        std::lock_guard lock(st->mu);
        st->cv.notify_all();
      }
    }
  };
  {
    std::lock_guard lock(mu_);
    for (int64_t i = 1; i < chunks; ++i) tasks_.emplace_back(run_chunks);
  }
  cv_.notify_all();
  run_chunks();
  std::unique_lock lock(st->mu);
  st->cv.wait(lock, [&] { return st->done.load() == chunks; });
  if (st->error) std::rethrow_exception(st->error);
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    if (const char* env = std::getenv("MLASERVE_NUM_THREADS")) return std::max(1, std::atoi(env));
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }());
  return pool;
}

}  // namespace mls
