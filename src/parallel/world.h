// The processes of one job (docs/multi-node.md). Started by `mpirun -np N`, every process holds
// an MPI world of N; started any other way, a world of one and MPI is never initialised.
// Process 0 is the leader (HTTP server, tokenizer, scheduler); the others follow the commands
// its model runner broadcasts. Tensor-parallel ranks are spread over the processes in order:
// process p owns ranks [p·L, (p+1)·L) of tp = N·L.
//
// Every wait of a collective is bounded by timeout(): past it the job is taken down
// (fail_job) with a message naming the rank, the operation and the size, never a silent hang.
// The followers' wait for the leader's next command is the one unbounded wait (an idle server).
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"

namespace mls {

// A collective that did not complete in time, or a peer that failed: the job is going down.
class DistributedError : public Error {
  using Error::Error;
};

class World {
 public:
  // The process's world. Before init(), or without mpirun, a world of one.
  static World& get();

  // Initialises MPI when mpirun (or another PMIx launcher of Open MPI) started this process:
  // OMPI_COMM_WORLD_SIZE is set. Call once from main, before any thread starts.
  static void init(int* argc, char*** argv);
  // MPI_Finalize after a clean run (every process reaches it).
  static void finalize();
  // Whether this process runs under mpirun, even as the only process (mpirun -np 1).
  static bool launched_by_mpirun();

  int process() const { return process_; }
  int num_processes() const { return num_processes_; }
  bool leader() const { return process_ == 0; }
  bool multi_process() const { return num_processes_ > 1; }
  // This process's index among the processes of its host (selects its GPUs).
  int local_process() const { return local_process_; }
  const std::string& host() const { return host_; }

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }

  // The control channel, process 0 to all. The leader sends `bytes`; a follower receives them,
  // waiting for the leader without a time limit when `idle` (the next command of an idle
  // server), else within timeout(). `what` names the operation in a timeout message.
  void broadcast(std::vector<uint8_t>& bytes, bool idle, const char* what);
  // Every process's `mine`, in process order, on the leader (empty elsewhere).
  std::vector<std::vector<uint8_t>> gather(std::span<const uint8_t> mine, const char* what);

  // Takes the job down: logs `message` and, after a grace period in which the caller throws
  // DistributedError (the engine loop stops and /health answers 503 naming the failure), ends
  // every process with MPI_Abort (exit code 1). Only the first failure is reported.
  void fail_job(const std::string& message);

 private:
  int process_ = 0;
  int num_processes_ = 1;
  int local_process_ = 0;
  std::string host_;
  std::chrono::milliseconds timeout_{std::chrono::seconds(600)};
};

}  // namespace mls
