// Collectives between ranks spread over the processes of the world (parallel/world.h): each
// process runs `local_size` ranks as threads, the group has num_processes × local_size ranks,
// process p holding ranks [p·local_size, (p+1)·local_size).
//
// Hierarchical: inside a process, ranks publish their buffers as with the in-process
// communicator; the process's first rank moves them between processes (MPI_Iallgather,
// MPI_Ialltoall, MPI_Ibcast on a communicator of the group's own), so one thread per process
// talks MPI; then every rank computes its result from all ranks' inputs. Reductions gather the
// inputs and sum them in fp32 in rank order 0..n-1 — MPI_Allreduce's order is unspecified — so
// every rank gets bitwise the same result, equal to the in-process group's. Every wait is
// bounded by World::timeout(); a timeout fails the job and throws DistributedError on every
// rank of the process.
#pragma once

#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace mls {

// This process's handles: handle l is rank process·local_size + l, used only by that rank's
// thread; `allocators[l]` receives its scratch (tag comm). Collective over the world: every
// process calls it with the same local_size.
std::vector<std::unique_ptr<Communicator>> make_mpi_group(
    int local_size, const std::vector<Allocator*>& allocators);

}  // namespace mls
