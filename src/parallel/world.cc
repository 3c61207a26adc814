#include "parallel/world.h"

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <thread>

#include "core/logging.h"
#ifdef MLASERVE_MPI

#include "parallel/mpi_wait.h"
#endif

namespace mls {
namespace {

// Between a failure and MPI_Abort: the failing call unwinds, the engine loop records why and
// /health answers 503 for this long before every process ends.
constexpr auto kAbortGrace = std::chrono::seconds(2);

World& the_world() {
  static World w;
  return w;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

#ifdef MLASERVE_MPI
MPI_Comm g_control = MPI_COMM_NULL;  // the control channel's communicator
bool g_initialised = false;

int count_of(size_t bytes, const char* what) {
  if (bytes > static_cast<size_t>(INT_MAX))
    raise<InvalidArgument>("{}: {} bytes exceed one MPI message", what, bytes);
  return static_cast<int>(bytes);
}
#endif

}  // namespace

#ifdef MLASERVE_MPI
namespace mpi {

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  const World& w = World::get();
  const std::string msg = fmt::format("distributed: {} failed on process {} of {} ({}): {}", call,
                                      w.process(), w.num_processes(), w.host(), text);
  World::get().fail_job(msg);
  throw DistributedError(msg);
}

MPI_Comm dup_world() {
  MPI_Comm c = MPI_COMM_NULL;
  check(MPI_Comm_dup(MPI_COMM_WORLD, &c), "MPI_Comm_dup");
  return c;
}

void wait(MPI_Request& req, const std::function<std::string()>& what, bool unbounded) {
  using namespace std::chrono;
  const World& w = World::get();
  const auto start = steady_clock::now();
  for (;;) {
    int done = 0;
    check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    const auto waited = steady_clock::now() - start;
    if (!unbounded && waited > w.timeout()) {
      const std::string msg = fmt::format(
          "distributed timeout: {} did not complete within {} s on process {} of {} ({}): "
          "another process of the job died or hangs (--distributed-timeout-seconds)",
          what(), duration<double>(w.timeout()).count(), w.process(), w.num_processes(), w.host());
      World::get().fail_job(msg);
      throw DistributedError(msg);
    }
    // Collectives inside a step complete in microseconds: yield first, then back off so an idle
    // wait costs no core.
    if (waited < microseconds(200))
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(waited < milliseconds(20) ? microseconds(20) : microseconds(500));
  }
}

}  // namespace mpi
#endif

World& World::get() {
  return the_world();
}

bool World::launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
}

// MPI starts only under mpirun: a singleton MPI_Init would spawn Open MPI's runtime for a
// process that never talks to another (slower start, and it fails where /dev/shm or the PMIx
// socket directory is unusable), so plain runs stay exactly as they were.
void World::init(int* argc, char*** argv) {
  World& w = the_world();
  w.host_ = host_name();
  if (!launched_by_mpirun()) return;
#ifndef MLASERVE_MPI
  (void)argc;
  (void)argv;
  raise<Unsupported>(
      "started by mpirun, but this build has no Open MPI (install libopenmpi-dev and rebuild)");
#else
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    raise<DistributedError>("MPI_Init_thread failed");
  g_initialised = true;
  // Rank threads run collectives while the engine's thread uses the control channel.
  if (provided < MPI_THREAD_MULTIPLE)
    raise<Unsupported>("this Open MPI does not provide MPI_THREAD_MULTIPLE");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);  // duplicates inherit it
  MPI_Comm_rank(MPI_COMM_WORLD, &w.process_);
  MPI_Comm_size(MPI_COMM_WORLD, &w.num_processes_);
  MPI_Comm host_comm = MPI_COMM_NULL;
  mpi::check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.process_, MPI_INFO_NULL,
                                 &host_comm),
             "MPI_Comm_split_type");
  MPI_Comm_rank(host_comm, &w.local_process_);
  MPI_Comm_free(&host_comm);
  g_control = mpi::dup_world();
  if (w.multi_process()) {
    // Every process logs to stderr, tagged: mpirun merges them, and stdout stays the command's
    // output (the leader's).
    log_to_stderr_tagged(fmt::format("process {}", w.process_));
  }
  // mpirun binds each process to one core unless told otherwise: the rank threads, the CPU
  // kernels' thread pool and OpenBLAS would all share it (and OpenBLAS's rounding depends on its
  // thread count, so CPU results would differ from a single-process run's).
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (sched_getaffinity(0, sizeof cpus, &cpus) == 0 && CPU_COUNT(&cpus) < online)
    MLS_LOG_WARN(
        "process {} is bound to {} of the {} CPUs of {}: run mpirun with --bind-to none "
        "(docs/multi-node.md)",
        w.process_, CPU_COUNT(&cpus), online, w.host_);
#endif
}

void World::finalize() {
#ifdef MLASERVE_MPI
  if (!g_initialised) return;
  MPI_Comm_free(&g_control);
  MPI_Finalize();
  g_initialised = false;
#endif
}

void World::broadcast(std::vector<uint8_t>& bytes, bool idle, const char* what) {
  if (!multi_process()) return;
#ifdef MLASERVE_MPI
  uint64_t n = bytes.size();
  MPI_Request req;
  mpi::check(MPI_Ibcast(&n, 1, MPI_UINT64_T, 0, g_control, &req), "MPI_Ibcast");
  mpi::wait(
      req, [&] { return fmt::format("{} (size, broadcast from process 0)", what); },
      idle && !leader());
  if (!leader()) bytes.resize(n);
  if (n == 0) return;
  mpi::check(MPI_Ibcast(bytes.data(), count_of(n, what), MPI_BYTE, 0, g_control, &req),
             "MPI_Ibcast");
  mpi::wait(req, [&] { return fmt::format("{} ({} bytes, broadcast from process 0)", what, n); });
#else
  (void)bytes;
  (void)idle;
  (void)what;
#endif
}

std::vector<std::vector<uint8_t>> World::gather(std::span<const uint8_t> mine, const char* what) {
  if (!multi_process()) return {std::vector<uint8_t>(mine.begin(), mine.end())};
  std::vector<std::vector<uint8_t>> out;
#ifdef MLASERVE_MPI
  const int procs = num_processes_;
  int n = count_of(mine.size(), what);
  std::vector<int> sizes(leader() ? procs : 0), offsets(sizes.size());
  MPI_Request req;
  mpi::check(MPI_Igather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, g_control, &req),
             "MPI_Igather");
  mpi::wait(req, [&] { return fmt::format("{} (sizes, gather to process 0)", what); });
  size_t total = 0;
  for (int p = 0; p < static_cast<int>(sizes.size()); ++p) {
    offsets[p] = count_of(total, what);
    total += sizes[p];
  }
  std::vector<uint8_t> all(total);
  mpi::check(MPI_Igatherv(mine.data(), n, MPI_BYTE, all.data(), sizes.data(), offsets.data(),
                          MPI_BYTE, 0, g_control, &req),
             "MPI_Igatherv");
  mpi::wait(req, [&] { return fmt::format("{} ({} bytes, gather to process 0)", what, n); });
  for (size_t p = 0; p < sizes.size(); ++p)
    out.emplace_back(all.begin() + offsets[p], all.begin() + offsets[p] + sizes[p]);
#else
  (void)what;
#endif
  return out;
}

void World::fail_job(const std::string& message) {
  static std::atomic<bool> failed{false};
  if (failed.exchange(true)) return;
  MLS_LOG_ERROR("{}", message);
  flush_log();
#ifdef MLASERVE_MPI
  if (!g_initialised) return;
  std::thread([] {
    std::this_thread::sleep_for(kAbortGrace);
    flush_log();
    MPI_Abort(MPI_COMM_WORLD, 1);
  }).detach();
#endif
}

}  // namespace mls
