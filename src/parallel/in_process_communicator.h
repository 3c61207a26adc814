// Collectives between ranks that are threads of one process: each rank publishes a pointer to
// its buffer, a barrier makes every buffer visible, each rank computes its own result, and a
// second barrier keeps inputs alive until everyone has read them. Reductions visit ranks in
// order 0..n-1 and sum in fp32, so every rank gets bitwise the same result. Works for host
// memory (CPU ranks, and tests that put several ranks on one device's host mirror).
#pragma once

#include <memory>
#include <vector>

#include "parallel/collective_scratch.h"
#include "parallel/communicator.h"

namespace mls {

// One handle per rank; handle r must be used only by rank r's thread. `allocators[r]` (may be
// empty: default allocator) receives rank r's scratch buffers, tagged comm. `traced`: the kind
// of communicator this group stands in for in a meta runner (a GPU planned without one), whose
// scratch its calls take in meta mode.
std::vector<std::unique_ptr<Communicator>> make_in_process_group(
    int size, const std::vector<Allocator*>& allocators = {}, CommKind traced = CommKind::kHost);

}  // namespace mls
