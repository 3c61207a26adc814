#include "ops/cuda/emu/cta_runtime.h"

#include <ucontext.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define MLS_EMU_ASAN 1
#endif

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ops/cuda/fp8_sum_model.h"

namespace mls::ops::cuda::emu {
namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kDynamicOffset = 16;
constexpr int kNamedBarriers = 16;

alignas(1024) unsigned char g_window[kSmemOptin + kDynamicOffset];

// A cp.async: `size` bytes to dst, the first `bytes` from src and the rest zeros.
struct Copy {
  void* dst;
  const void* src;
  int size, bytes;
};
void run(Copy& c) {
  std::memcpy(c.dst, c.src, c.bytes);
  std::memset(static_cast<unsigned char*>(c.dst) + c.bytes, 0, c.size - c.bytes);
}
void run(std::function<void()>& mma) {
  mma();
}

// A thread's asynchronous operations of one kind: the open group, then the committed ones.
template <typename Op>
struct AsyncQueue {
  std::vector<Op> open;
  std::deque<std::vector<Op>> closed;
  void commit() {
    closed.push_back(std::move(open));
    open.clear();
  }
  // Runs every committed group but the `keep` newest, oldest first.
  void drain(size_t keep) {
    while (closed.size() > keep) {
      for (Op& op : closed.front()) run(op);
      closed.pop_front();
    }
  }
};

struct Fiber {
  ucontext_t ctx{};
  std::unique_ptr<char[]> stack;
  ThreadCoords coords;
  std::function<bool()> ready;  // empty: runnable
  bool done = false;
  AsyncQueue<Copy> copies;
  AsyncQueue<std::function<void()>> mmas;
  AsyncQueue<std::function<void()>> stores;  // bulk stores from shared memory
};

struct Barrier {
  uint64_t gen = 0;
  int arrived = 0;
  int acc[2] = {0, 0};
};

// The lanes of a warp meeting at collectives of one mask. A collective waits only for the lanes
// of its own mask calling one with the same mask (bar.warp.sync's rule), so a warp keeps a group
// per mask in use (Cta::warps); a deque, as blocked lanes hold references to their group.
struct WarpGroup {
  uint32_t mask = 0;
  uint64_t gen = 0;
  int arrived = 0;
  uint64_t slots[2][32] = {};
};

struct Cta {
  std::vector<Fiber> fibers;
  int exited = 0;
  Barrier barrier;
  Barrier named[kNamedBarriers];
  std::vector<std::deque<WarpGroup>> warps;
  std::vector<int> warp_regs;
  int64_t regs_free = 0;
  const std::function<void()>* kernel = nullptr;
  std::exception_ptr error;
  bool bulk_at_once = false;  // a seeded order: bulk copies land when issued
  std::vector<std::pair<uint32_t, std::function<void()>>> bulk;  // in flight: barrier, landing
};

// AddressSanitizer is told of every switch between the scheduler's stack and a fiber's, so that
// it checks each against the right stack (the emulator's tests run under it).
// A fiber learns the scheduler's stack when it first starts.
struct Stack {
  const void* bottom = nullptr;
  size_t size = 0;
};
Stack g_scheduler_stack;

void switch_to(ucontext_t* from, ucontext_t* to, Stack to_stack, bool from_ends) {
#ifdef MLS_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(from_ends ? nullptr : &fake, to_stack.bottom, to_stack.size);
  swapcontext(from, to);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  (void)to_stack;
  (void)from_ends;
  swapcontext(from, to);
#endif
}

Cta* g_cta = nullptr;
uint32_t g_schedule_seed = 0;
constexpr int kH200Sms = 132;
int g_device_sms = kH200Sms;
int g_fp8_sum_bits = 0;
Fiber* g_cur = nullptr;
ucontext_t g_scheduler;

Fiber& current() {
  if (g_cur == nullptr) throw KernelFault("emulated device code called outside run_grid");
  return *g_cur;
}

void flush_copies(Fiber& f) {
  f.copies.drain(0);
  for (Copy& c : f.copies.open) run(c);
  f.copies.open.clear();
}

void complete(Barrier& b) {
  b.arrived = 0;
  b.acc[(b.gen + 1) & 1] = 0;
  ++b.gen;
}

void fiber_main() {
#ifdef MLS_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g_scheduler_stack.bottom, &g_scheduler_stack.size);
#endif
  Fiber& f = *g_cur;
  try {
    (*g_cta->kernel)();
    flush_copies(f);
    if (!f.stores.open.empty() || !f.stores.closed.empty())
      throw KernelFault("a thread exited before its bulk stores had read shared memory");
  } catch (...) {
    g_cta->error = std::current_exception();
  }
  f.done = true;
  ++g_cta->exited;
  Barrier& b = g_cta->barrier;
  if (b.arrived > 0 && b.arrived + g_cta->exited >= static_cast<int>(g_cta->fibers.size()))
    complete(b);
  switch_to(&f.ctx, &g_scheduler, g_scheduler_stack, true);
}

std::string describe_stuck(const Cta& cta) {
  std::string s = "kernel stuck: every live thread is blocked (";
  int live = 0;
  for (const Fiber& f : cta.fibers) live += !f.done;
  s += std::to_string(live) + " of " + std::to_string(cta.fibers.size()) + " threads live; CTA (" +
       std::to_string(cta.fibers[0].coords.block.x) + ", " +
       std::to_string(cta.fibers[0].coords.block.y) + ", " +
       std::to_string(cta.fibers[0].coords.block.z) + "); CTA barrier holds " +
       std::to_string(cta.barrier.arrived) + " arrivals; named barriers:";
  for (int i = 0; i < kNamedBarriers; ++i)
    if (cta.named[i].arrived > 0)
      s += " " + std::to_string(i) + ":" + std::to_string(cta.named[i].arrived);
  return s + ")";
}

// A function of its own: getcontext returns twice, and the caller's loop variables must not
// live across it.
[[gnu::noinline]] void start_fiber(Fiber& f) {
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack.get();
  f.ctx.uc_stack.ss_size = kStackBytes;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, fiber_main, 0);
}

// Each round resumes every runnable thread once, until it blocks. A seeded schedule also
// shuffles the order and now and then holds a warp back for up to kMaxStall rounds (a warp the
// hardware does not issue from for a while): the others then run ahead of it by as much as
// their barriers allow, so a hand-over that only program order seemed to guarantee shows.
constexpr int kStallOneIn = 32, kMaxStall = 32;

void run_cta(Cta& cta, uint32_t seed) {
  std::vector<int> order(cta.fibers.size());
  std::iota(order.begin(), order.end(), 0);
  std::vector<int> stalled((cta.fibers.size() + 31) / 32, 0);  // rounds each warp sits out
  std::mt19937 rng(seed);
  for (;;) {
    if (seed != 0) {
      std::shuffle(order.begin(), order.end(), rng);
      for (int& rounds : stalled)
        rounds = rounds > 0 ? rounds - 1 : rng() % kStallOneIn == 0 ? 1 + rng() % kMaxStall : 0;
    }
    bool all_done = true, resumed = false, held = false;
    for (int i : order) {
      Fiber& f = cta.fibers[i];
      if (f.done) continue;
      all_done = false;
      if (f.ready && !f.ready()) continue;
      if (stalled[i / 32] > 0) {
        held = true;
        continue;
      }
      f.ready = nullptr;
      g_cur = &f;
      switch_to(&g_scheduler, &f.ctx, {f.stack.get(), kStackBytes}, false);
      g_cur = nullptr;
      resumed = true;
      if (cta.error) std::rethrow_exception(cta.error);
    }
    if (all_done) {
      if (!cta.bulk.empty())
        throw KernelFault(std::to_string(cta.bulk.size()) +
                          " bulk copies in flight when the CTA exited (no thread waited for them)");
      return;
    }
    if (!resumed && !held) throw KernelFault(describe_stuck(cta));
  }
}

}  // namespace

const ThreadCoords& coords() {
  return current().coords;
}

unsigned char* dynamic_smem() {
  return g_window + kDynamicOffset;
}
uint32_t smem_offset(const void* p) {
  const ptrdiff_t d = static_cast<const unsigned char*>(p) - g_window;
  if (d != static_cast<int32_t>(d))
    throw KernelFault("a shared variable out of the 32-bit shared window's reach");
  return static_cast<uint32_t>(d);
}
void* smem_pointer(uint32_t offset) {
  return g_window + static_cast<int32_t>(offset);
}

void block_until(const std::function<bool()>& ready) {
  if (ready()) return;
  Fiber& f = current();
  f.ready = ready;
  switch_to(&f.ctx, &g_scheduler, g_scheduler_stack, false);
}

int cta_barrier(int predicate) {
  Cta& cta = *g_cta;
  Barrier& b = cta.barrier;
  const uint64_t gen = b.gen;
  b.acc[gen & 1] += predicate != 0;
  if (++b.arrived + cta.exited >= static_cast<int>(cta.fibers.size()))
    complete(b);
  else
    block_until([&b, gen] { return b.gen != gen; });
  return b.acc[gen & 1];
}

namespace {
// Counts this thread's arrival on named barrier `id`; true when it completed the barrier.
bool named_arrival(int id, int threads, Barrier** barrier, uint64_t* gen) {
  if (id < 1 || id >= kNamedBarriers || threads % 32 != 0)
    throw KernelFault("named barrier " + std::to_string(id) + " of " + std::to_string(threads) +
                      " threads: ids 1-15, a multiple of 32 threads");
  Barrier& b = g_cta->named[id];
  *barrier = &b;
  *gen = b.gen;
  if (++b.arrived < threads) return false;
  complete(b);
  return true;
}
}  // namespace

void named_barrier(int id, int threads) {
  Barrier* b = nullptr;
  uint64_t gen = 0;
  if (!named_arrival(id, threads, &b, &gen)) block_until([b, gen] { return b->gen != gen; });
}

void named_barrier_arrive(int id, int threads) {
  Barrier* b = nullptr;
  uint64_t gen = 0;
  named_arrival(id, threads, &b, &gen);
}

const uint64_t* warp_exchange(uint32_t mask, uint64_t value) {
  const int tid = current().coords.linear, lane = tid & 31;
  if ((mask >> lane & 1) == 0) throw KernelFault("warp collective from a lane outside its mask");
  std::deque<WarpGroup>& groups = g_cta->warps[tid >> 5];
  auto it = std::find_if(groups.begin(), groups.end(),
                         [mask](const WarpGroup& g) { return g.mask == mask; });
  WarpGroup& w = it != groups.end() ? *it : groups.emplace_back(WarpGroup{.mask = mask});
  const uint64_t gen = w.gen;
  w.slots[gen & 1][lane] = value;
  if (++w.arrived == std::popcount(mask)) {
    w.arrived = 0;
    ++w.gen;
  } else {
    block_until([&w, gen] { return w.gen != gen; });
  }
  return w.slots[gen & 1];
}

void copy_async(void* dst, const void* src, int size, int bytes) {
  current().copies.open.push_back({dst, src, size, bytes});
}

void mma_async(std::function<void()> work) {
  current().mmas.open.push_back(std::move(work));
}

void store_async(std::function<void()> read) {
  current().stores.open.push_back(std::move(read));
}

void async_commit(AsyncKind kind) {
  Fiber& f = current();
  switch (kind) {
    case AsyncKind::kCopy:
      return f.copies.commit();
    case AsyncKind::kMma:
      return f.mmas.commit();
    case AsyncKind::kStore:
      return f.stores.commit();
  }
}

void async_wait(AsyncKind kind, int keep) {
  Fiber& f = current();
  switch (kind) {
    case AsyncKind::kCopy:
      return f.copies.drain(keep);
    case AsyncKind::kMma:
      return f.mmas.drain(keep);
    case AsyncKind::kStore:
      // The other threads run first, as far as they can: a write they make to a store's source
      // before this wait changes what it stores.
      if (f.stores.closed.size() > static_cast<size_t>(keep)) {
        bool yielded = false;
        block_until([&yielded] { return std::exchange(yielded, true); });
      }
      return f.stores.drain(keep);
  }
}

void async_flush_copies() {
  flush_copies(current());
}

void bulk_copy_async(uint32_t bar, std::function<void()> land) {
  Cta& cta = *g_cta;
  if (cta.bulk_at_once)
    land();
  else
    cta.bulk.emplace_back(bar, std::move(land));
}

void land_bulk_copies(uint32_t bar) {
  auto& bulk = g_cta->bulk;
  // Taken out first: a landing may complete the phase, and nothing here issues copies.
  std::vector<std::function<void()>> landing;
  std::erase_if(bulk, [&](auto& b) {
    if (b.first != bar) return false;
    landing.push_back(std::move(b.second));
    return true;
  });
  for (auto& land : landing) land();
}

void warpgroup_set_regs(int regs, bool increase) {
  if (regs < 24 || regs > 256 || regs % 8 != 0)
    throw KernelFault("setmaxnreg " + std::to_string(regs) + ": a multiple of 8 in [24, 256]");
  Cta& cta = *g_cta;
  const int tid = current().coords.linear;
  warp_exchange(0xffffffffu, 0);  // the whole warp executes it
  if ((tid & 31) != 0) return;
  int& mine = cta.warp_regs[tid >> 5];
  const int64_t delta = static_cast<int64_t>(regs - mine) * 32;
  if (increase != (delta > 0) && delta != 0)
    throw KernelFault("setmaxnreg." + std::string(increase ? "inc" : "dec") + " to " +
                      std::to_string(regs) + " from " + std::to_string(mine));
  if (delta > 0) block_until([&cta, delta] { return cta.regs_free >= delta; });
  cta.regs_free -= delta;
  mine = regs;
}

void set_schedule_seed(uint32_t seed) {
  g_schedule_seed = seed;
}

uint32_t default_schedule_seed() {
  static const uint32_t seed = [] {
    const char* v = std::getenv("MLS_EMU_SCHEDULE_SEED");
    return v != nullptr ? static_cast<uint32_t>(std::strtoul(v, nullptr, 10)) : 0u;
  }();
  return seed;
}

void set_fp8_sum_bits(int bits) {
  g_fp8_sum_bits = bits;
}
int fp8_sum_bits() {
  return g_fp8_sum_bits;
}
double fp8_mma_sum(double exact) {
  return g_fp8_sum_bits > 0 ? truncated_fp8_sum(exact, g_fp8_sum_bits) : exact;
}

int device_sms() {
  return g_device_sms;
}
void set_device_sms(int sms) {
  g_device_sms = sms > 0 ? sms : kH200Sms;
}

void run_grid(Dim grid, Dim block, size_t dynamic_smem_bytes, int regs_per_thread,
              const std::function<void()>& kernel) {
  const uint32_t seed = g_schedule_seed != 0 ? g_schedule_seed : default_schedule_seed();
  if (dynamic_smem_bytes > kSmemOptin)
    throw KernelFault("dynamic shared memory of " + std::to_string(dynamic_smem_bytes) +
                      " bytes: the device allows " + std::to_string(kSmemOptin));
  const int threads = static_cast<int>(block.x * block.y * block.z);
  if (threads % 32 != 0) throw KernelFault("the emulator runs whole warps only");
  // Left uninitialised: only the pages a fiber touches are committed.
  std::vector<std::unique_ptr<char[]>> stacks;
  for (int i = 0; i < threads; ++i)
    stacks.push_back(std::make_unique_for_overwrite<char[]>(kStackBytes));
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        Cta cta;
        cta.kernel = &kernel;
        cta.fibers.resize(threads);
        cta.warps.resize(threads / 32);
        cta.warp_regs.assign(threads / 32, regs_per_thread);
        cta.bulk_at_once = seed != 0;
        // Uninitialised shared memory reads as NaN (all bits set) in every float format.
        std::memset(g_window, 0xff, sizeof(g_window));
        for (int i = 0; i < threads; ++i) {
          Fiber& f = cta.fibers[i];
          f.coords.block_dim = block;
          f.coords.grid_dim = grid;
          f.coords.block = {bx, by, bz};
          f.coords.linear = i;
          f.coords.thread = {i % block.x, i / block.x % block.y, i / (block.x * block.y)};
          f.stack = std::move(stacks[i]);
          start_fiber(f);
        }
        g_cta = &cta;
        try {
          run_cta(cta, seed == 0 ? 0 : seed + bx + 7919 * (by + 7919 * bz));
        } catch (...) {
          g_cta = nullptr;
          throw;
        }
        g_cta = nullptr;
        for (int i = 0; i < threads; ++i) stacks[i] = std::move(cta.fibers[i].stack);
      }
}

}  // namespace mls::ops::cuda::emu
