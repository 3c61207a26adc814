// The CPU runtime under the CUDA kernel emulator (see prelude.h): a grid's CTAs run one after
// another, each CTA's threads as cooperative fibers on the calling thread. A fiber runs until it
// blocks on a collective (a CTA or named barrier; a warp collective: shuffle, vote, ldmatrix,
// mma.sync, the wgmma wait; an mbarrier wait; a register reallocation); the scheduler then
// resumes the next one that can go on. When none can,
// the kernel is stuck (a barrier some thread never reaches, an mbarrier phase that never
// completes): run_grid throws KernelFault, saying how many threads are live and which barriers
// hold arrivals, instead of hanging.
// Asynchronous work is kept per thread and done at the latest point the PTX contract allows:
// cp.async copies when the thread waits for their group (or arrives on an mbarrier for them),
// warpgroup MMAs when the thread waits for their commit group. A kernel that reads shared memory
// before the wait, or overwrites an MMA's operands before its wait, reads or computes stale data
// here as it may on the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>

namespace mls::ops::cuda::emu {

struct Dim {
  unsigned x = 1, y = 1, z = 1;
};

// A kernel that cannot finish (every live thread blocked) or breaks a rule the emulator checks.
struct KernelFault : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The running thread's coordinates.
struct ThreadCoords {
  Dim thread, block, block_dim, grid_dim;
  int linear = 0;  // thread.x + block_dim.x · (thread.y + block_dim.y · thread.z)
};
const ThreadCoords& coords();

// The shared memory a CTA may opt into on the emulated device (an H200's), the window's size.
inline constexpr size_t kSmemOptin = 232448;

// The running CTA's shared-memory window: 32-bit shared addresses are offsets from its base (a
// 1,024-byte-aligned address, as the swizzle atoms assume). Dynamic shared memory starts 16 bytes
// in, so kernels that align their tiles themselves are exercised. Addresses of a kernel's static
// shared variables (function statics here) are offsets too, reaching outside the window.
unsigned char* dynamic_smem();
uint32_t smem_offset(const void* p);
void* smem_pointer(uint32_t offset);

// Blocks the running thread until ready() holds (re-checked whenever another thread ran).
void block_until(const std::function<bool()>& ready);

// CTA barrier (__syncthreads); threads that returned count as arrived. Returns how many
// arriving threads passed a nonzero predicate.
int cta_barrier(int predicate);
// Named barrier `id` (1 to 15) of `threads` threads.
void named_barrier(int id, int threads);
// An arrival on named barrier `id` that does not wait for the others (bar.arrive).
void named_barrier_arrive(int id, int threads);
// Warp collective over the lanes of `mask`: every lane deposits `value`, and once all have,
// each gets the 32 slots (lanes outside the mask hold garbage). Lanes at a collective of another
// mask neither count nor wait here.
const uint64_t* warp_exchange(uint32_t mask, uint64_t value);

// Per-thread asynchronous work, run in order: a cp.async (`size` bytes to dst, the first `bytes`
// from src and the rest zeros), a warpgroup MMA or a bulk store's read of shared memory (and its
// write) joins the thread's open group of its kind; async_commit closes it; async_wait(kind, keep)
// runs every closed group of that kind but the `keep` newest. A bulk store so reads shared memory
// at the latest point the PTX allows, when its thread waits for the read; a thread that exits
// before is a fault.
enum class AsyncKind { kCopy, kMma, kStore };
void copy_async(void* dst, const void* src, int size, int bytes);
void mma_async(std::function<void()> work);
void store_async(std::function<void()> read);
void async_commit(AsyncKind kind);
void async_wait(AsyncKind kind, int keep);
// Runs every copy of the thread, committed or not (an mbarrier arrival that tracks them).
void async_flush_copies();

// Bulk asynchronous copies (TMA): `land` does one copy and its complete_tx on the mbarrier at
// shared address `bar`. In the default order a copy lands at the latest point the PTX allows,
// when a thread waits on `bar` and finds its phase open (land_bulk_copies), so a read before
// that wait sees stale data; in a seeded order it lands at once, so a copy into a slot whose
// readers are not done changes their operands (the MMAs' check). A CTA that exits with copies
// nobody waited for is a fault.
void bulk_copy_async(uint32_t bar, std::function<void()> land);
void land_bulk_copies(uint32_t bar);

// Warpgroup register reallocation (setmaxnreg): a decrease returns registers to the CTA's pool;
// an increase waits until the pool holds them, as on the device (where asking for more than the
// other warpgroups released hangs: here run_grid reports it).
void warpgroup_set_regs(int regs, bool increase);

// Runs `kernel` over the grid. `regs_per_thread` is the allocation at launch
// (__launch_bounds__(threads, 1): launch_regs_per_thread).
void run_grid(Dim grid, Dim block, size_t dynamic_smem_bytes, int regs_per_thread,
              const std::function<void()>& kernel);

// The multiprocessors the emulated device reports (132, an H200's, by default): fewer make a
// persistent kernel's CTAs walk many tiles each.
int device_sms();
void set_device_sms(int sms);

// The order in which later launches resume runnable threads: a random order drawn from `seed`,
// with warps held back now and then (run_cta), to run another interleaving of the same program;
// or with 0 the default order: round robin, or the random order of MLS_EMU_SCHEDULE_SEED when
// the environment sets it (CTest runs every emulated test a second time so).
void set_schedule_seed(uint32_t seed);

// How a later e4m3 warpgroup MMA adds: 0 (the default) exactly; F > 0 as Hopper's FP8 MMAs are
// modelled (ops/cuda/fp8_sum_model.h): the sum of its products and of the fragment it
// adds to, truncated toward zero to F bits after the leading one. With F = 13 the prefill
// experts' path lands close to the device's figures at every promotion interval
// (bench/RESULTS.md, session 26). mma.sync stays exact: the skinny kernel measured as exact sums.
void set_fp8_sum_bits(int bits);
int fp8_sum_bits();
double fp8_mma_sum(double exact);

}  // namespace mls::ops::cuda::emu
