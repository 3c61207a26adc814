// MPI helpers shared by the world's control channel and the MPI communicator (parallel/ only).
#pragma once

// The C API only: Open MPI's deprecated C++ bindings do not compile under -Werror.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <functional>
#include <string>

namespace mls::mpi {

// Checks an MPI call's result (communicators return errors instead of aborting).
void check(int rc, const char* call);

// A duplicate of MPI_COMM_WORLD: each user (control channel, communicator group) has its own,
// so their messages never match each other's.
MPI_Comm dup_world();

// Completes `req`, polling so the wait can end: past World::timeout() (unless `unbounded`) it
// fails the job naming what() and throws DistributedError.
void wait(MPI_Request& req, const std::function<std::string()>& what, bool unbounded = false);

}  // namespace mls::mpi
