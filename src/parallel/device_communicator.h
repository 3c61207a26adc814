// Collectives between ranks that are threads of one process sharing one GPU (NCCL refuses two
// ranks on one device): the seed's tp = 8 scenario on a single H200, and multi-rank tests on
// one GPU. Each rank publishes its device buffer and an event on its stream; after a host
// barrier every rank's stream waits for the others' events, and a kernel on the rank's own
// stream reads all ranks' buffers in place. Reductions visit ranks in order 0..n-1 and add in
// fp32 (one thread per element), so every rank gets bitwise the same result. A second event
// round keeps every input alive until all ranks have read it. Built with the CUDA runtime.
#pragma once

#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace mls {

// One handle per rank (at most device_reduce::kMaxRanks), all on `device`; handle r must be used
// only by rank r's thread, bound to that device (cuda::bind). `allocators[r]` receives rank r's
// scratch, tagged comm.
std::vector<std::unique_ptr<Communicator>> make_device_group(
    int size, int device, const std::vector<Allocator*>& allocators);

}  // namespace mls
