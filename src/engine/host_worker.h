// One host thread that runs a job while its caller does something else: the engine computes a
// step's allowed-token masks here while the step's forward runs. start() hands over a job (the
// previous one must have been waited for); wait() blocks until it is done and rethrows what it
// threw.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace mls {

class HostWorker {
 public:
  HostWorker();
  ~HostWorker();
  HostWorker(const HostWorker&) = delete;
  HostWorker& operator=(const HostWorker&) = delete;

  void start(std::function<void()> job);
  void wait();
  // wait(), dropping the job's error (for a caller that is failing already).
  void abandon();
  bool busy() const;

 private:
  void loop();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool running_ = false;  // a job was started and not yet waited for
  bool done_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace mls
