#include "ops/cuda/cublaslt_gemm.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <limits>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/cuda_context.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/scratch_sizes.h"

namespace mls::ops::cuda {
namespace {

constexpr int64_t kWorkspaceBytes = scratch::kGemmWorkspaceBytes;
// Layout of the workspace: cuBLASLt's part, our kernels' scratch (split-K partials, benchmark
// outputs), and the tile counters at the end.
constexpr int64_t kLtBytes = 16LL << 20;
constexpr int64_t kCounterBytes = 64LL << 10;
constexpr int64_t kScratchBytes = kWorkspaceBytes - kLtBytes - kCounterBytes;

// Block-scaled FP8 problems with at most this many rows stream the weights (decode): their
// algorithm is picked by timing the heuristic's candidates once, at the first call of each shape.
constexpr int64_t kTuneMaxRows = 64;
constexpr int kCandidates = 8;
// Batch invariance: a plain (bf16) GEMM takes the algorithm the heuristic proposes for the same
// problem at this many rows, split-K excluded, whatever its own row count. One kernel and tile
// shape for every M, each output row reduced over K in the same order, so a token's result
// never depends on how many tokens share the step (the engine's batch, chunking and preemption
// invariance on the GPU rests on it). A non-invariant plain GEMM (LtLinear::invariant false: a
// block-FP8 model's, whose FP8 GEMMs choose by step size anyway) takes the heuristic's algorithm
// for its own row count, split-K still excluded: at 8,192 rows the fused q_a / kv_a / indexer
// projection, bf16 then, took 0.8 ms a layer in the 64-row algorithm's tile (H200, 2026-12-04:
// prefill 85 -> 83 ms with its own).
constexpr int64_t kInvariantRows = 64;

void check_lt(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    raise<Error>("cuBLASLt {} failed: {} ({})", what, cublasLtGetStatusString(s),
                 static_cast<int>(s));
}

// Largest power of two (<= 256) dividing the address and, across a batch, the batch stride.
int64_t alignment(const void* p, int64_t batch_stride_bytes, int64_t batch) {
  uint64_t v = reinterpret_cast<uintptr_t>(p) | 256u;
  if (batch > 1) v |= static_cast<uint64_t>(batch_stride_bytes);
  return static_cast<int64_t>(v & (~v + 1));
}

int64_t type_bytes(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F:
      return 4;
    case CUDA_R_16BF:
    case CUDA_R_16F:
      return 2;
    case CUDA_R_8F_E4M3:
      return 1;
    default:
      raise<InternalError>("cuBLASLt: unexpected data type {}", static_cast<int>(t));
  }
}

using Key = std::array<int64_t, 18>;

struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

Key make_key(const LtLinear& p) {
  return {p.m,
          p.n,
          p.k,
          p.batch,
          p.ldx,
          p.batch > 1 ? p.batch_stride_x : 0,
          p.ldw,
          p.batch > 1 ? p.batch_stride_w : 0,
          p.ldy,
          p.batch > 1 ? p.batch_stride_y : 0,
          static_cast<int64_t>(p.ab_type),
          static_cast<int64_t>(p.y_type),
          p.accumulate ? 1 : 0,
          p.block_scaled ? 1 : 0,
          alignment(p.x, p.batch_stride_x * type_bytes(p.ab_type), p.batch),
          alignment(p.w, p.batch_stride_w * type_bytes(p.ab_type), p.batch),
          alignment(p.y, p.batch_stride_y * type_bytes(p.y_type), p.batch),
          p.invariant ? 1 : 0};
}

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> candidates;  // empty: unsupported
  int chosen = 0;
  bool tuned = false;

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

struct State {
  cublasLtHandle_t handle = nullptr;
  Tensor workspace;
  int num_sms = 0;
  std::unordered_map<Key, std::unique_ptr<Plan>, KeyHash> plans;

  explicit State(int device) {
    check_lt(cublasLtCreate(&handle), "create");
    workspace = Tensor::empty({kWorkspaceBytes}, DType::kFP8E4M3, MemTag::kWorkspace,
                              mls::cuda::allocator());
    mls::cuda::check(cudaMemsetAsync(counters(), 0, kCounterBytes, mls::cuda::stream()),
                     "gemm counters memset");
    mls::cuda::check(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device),
                     "cudaDeviceGetAttribute");
  }
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  ~State() {
    plans.clear();
    cublasLtDestroy(handle);
  }

  char* base() const { return static_cast<char*>(workspace.raw()); }
  void* lt_workspace() const { return base(); }
  void* scratch() const { return base() + kLtBytes; }
  int* counters() const { return reinterpret_cast<int*>(base() + kLtBytes + kScratchBytes); }
};

State& state() {
  // Per thread and device: a handle and its workspace belong to one device, and each rank
  // thread runs its GEMMs on its own stream, so nothing here is shared between threads.
  thread_local std::map<int, std::unique_ptr<State>> states;
  const int device = mls::cuda::device();
  auto& s = states[device];
  if (!s) s = std::make_unique<State>(device);
  return *s;
}

template <class T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  check_lt(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)), "desc attribute");
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                                   int64_t batch, int64_t batch_stride) {
  cublasLtMatrixLayout_t l = nullptr;
  check_lt(cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(rows),
                                      static_cast<uint64_t>(cols), ld),
           "layout");
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    check_lt(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                              sizeof(count)),
             "layout batch count");
    check_lt(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                              &batch_stride, sizeof(batch_stride)),
             "layout batch stride");
  }
  return l;
}

// Keeps the first candidate, made to reduce over K in one pass (split-K forced to 1, no separate
// reduction), that runs on this problem's real layouts; none left means unsupported. One
// candidate, never timed: every runner of the problem runs the same algorithm (a graph replay
// and its eager step agree bitwise).
void keep_one_pass(State& st, Plan& plan) {
  for (const cublasLtMatmulHeuristicResult_t& r : plan.candidates) {
    cublasLtMatmulAlgo_t algo = r.algo;
    const int32_t one = 1;
    const uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
    if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one,
                                             sizeof(one)) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &none,
                                             sizeof(none)) != CUBLAS_STATUS_SUCCESS)
      continue;
    cublasLtMatmulHeuristicResult_t checked{};
    if (cublasLtMatmulAlgoCheck(st.handle, plan.desc, plan.a, plan.b, plan.c, plan.c, &algo,
                                &checked) != CUBLAS_STATUS_SUCCESS ||
        checked.workspaceSize > static_cast<size_t>(kLtBytes))
      continue;
    checked.algo = algo;
    plan.candidates = {checked};
    plan.tuned = true;  // the choice must not depend on timings
    return;
  }
  plan.candidates.clear();
}

// cuBLASLt is column-major: the row-major y[m, n] = x[m, k] · w[n, k]ᵀ is the column-major
// D[n, m] = Wᵀ · X with W stored k×n (ld ldw, "T") and X stored k×m (ld ldx, "N"). This puts
// the weights in operand A, whose scales take the 128x128 block mode, and the tokens in B.
std::unique_ptr<Plan> make_plan(State& st, const LtLinear& p, const Key& key) {
  auto plan = std::make_unique<Plan>();
  check_lt(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  if (p.block_scaled) {
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
             static_cast<int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F));
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
             static_cast<int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F));
    // The heuristic needs the pointers set; lt_linear sets the real ones for every call.
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, p.w_scale);
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, p.x_scale);
  }
  plan->a = make_layout(p.ab_type, p.k, p.n, p.ldw, p.batch, p.batch_stride_w);
  plan->b = make_layout(p.ab_type, p.k, p.m, p.ldx, p.batch, p.batch_stride_x);
  plan->c = make_layout(p.y_type, p.n, p.m, p.ldy, p.batch, p.batch_stride_y);

  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "preference");
  auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attr, auto v) {
    check_lt(cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof(v)), "preference");
  };
  set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(kLtBytes));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<uint32_t>(key[15]));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<uint32_t>(key[14]));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<uint32_t>(key[16]));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<uint32_t>(key[16]));
  // Invariant plain GEMMs ask the heuristic about the problem at kInvariantRows rows (see there).
  const bool invariant = !p.block_scaled && p.invariant;
  cublasLtMatrixLayout_t b = plan->b, c = plan->c;
  if (invariant) {
    b = make_layout(p.ab_type, p.k, kInvariantRows, p.ldx, p.batch, p.batch_stride_x);
    c = make_layout(p.y_type, p.n, kInvariantRows, p.ldy, p.batch, p.batch_stride_y);
  }
  plan->candidates.resize(kCandidates);
  int found = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(
      st.handle, plan->desc, plan->a, b, c, c, pref, kCandidates, plan->candidates.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (b != plan->b) cublasLtMatrixLayoutDestroy(b);
  if (c != plan->c) cublasLtMatrixLayoutDestroy(c);
  // NOT_SUPPORTED (no algorithm for this combination) is an answer, not an error.
  if (s != CUBLAS_STATUS_NOT_SUPPORTED) check_lt(s, "heuristic");
  plan->candidates.resize(s == CUBLAS_STATUS_SUCCESS ? found : 0);
  if (!p.block_scaled) keep_one_pass(st, *plan);
  return plan;
}

Plan& plan_for(State& st, const LtLinear& p) {
  const Key key = make_key(p);
  auto it = st.plans.find(key);
  if (it == st.plans.end()) it = st.plans.emplace(key, make_plan(st, p, key)).first;
  return *it->second;
}

void set_scales(const Plan& plan, const LtLinear& p) {
  if (!p.block_scaled) return;
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, p.w_scale);
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, p.x_scale);
}

cublasStatus_t matmul(State& st, const Plan& plan, int i, const LtLinear& p, void* y, float beta) {
  const float alpha = 1.0f;
  return cublasLtMatmul(st.handle, plan.desc, &alpha, p.w, plan.a, p.x, plan.b, &beta, y, plan.c, y,
                        plan.c, &plan.candidates[i].algo, st.lt_workspace(), kLtBytes,
                        mls::cuda::stream());
}

// Times each candidate once per shape (CUDA events, one host wait) into the scratch region and
// keeps the heuristic's first choice unless another is clearly faster (3 %), so that the choice
// is stable from run to run. Skipped while a graph is being captured or when the output does not
// fit the scratch region; the heuristic's first choice stands then.
void tune(State& st, Plan& plan, const LtLinear& p) {
  plan.tuned = true;
  if (p.m > kTuneMaxRows || plan.candidates.size() < 2) return;
  const int64_t extent = (p.batch - 1) * p.batch_stride_y + (p.m - 1) * p.ldy + p.n;
  if (extent * type_bytes(p.y_type) > kScratchBytes) return;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  mls::cuda::check(cudaStreamIsCapturing(mls::cuda::stream(), &capture), "cudaStreamIsCapturing");
  if (capture != cudaStreamCaptureStatusNone) return;

  const int n = static_cast<int>(plan.candidates.size());
  constexpr int kReps = 3;
  std::vector<cudaEvent_t> ev(2 * n + 1);
  for (auto& e : ev) mls::cuda::check(cudaEventCreate(&e), "cudaEventCreate");
  cudaStream_t s = mls::cuda::stream();
  std::vector<bool> ran(n, false);
  for (int i = 0; i < n; ++i) {
    if (matmul(st, plan, i, p, st.scratch(), 0.0f) != CUBLAS_STATUS_SUCCESS) continue;
    mls::cuda::check(cudaEventRecord(ev[2 * i], s), "cudaEventRecord");
    for (int r = 0; r < kReps; ++r) matmul(st, plan, i, p, st.scratch(), 0.0f);
    mls::cuda::check(cudaEventRecord(ev[2 * i + 1], s), "cudaEventRecord");
    ran[i] = true;
  }
  mls::cuda::check(cudaEventRecord(ev[2 * n], s), "cudaEventRecord");
  mls::cuda::check(cudaEventSynchronize(ev[2 * n]), "cudaEventSynchronize");
  std::vector<float> ms(n, std::numeric_limits<float>::infinity());
  for (int i = 0; i < n; ++i)
    if (ran[i])
      mls::cuda::check(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]),
                       "cudaEventElapsedTime");
  for (auto& e : ev) cudaEventDestroy(e);
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (ms[i] < ms[best]) best = i;
  if (ran[0] && ms[best] > 0.97f * ms[0]) best = 0;
  plan.chosen = best;
}

}  // namespace

void lt_prepare() {
  state();
}

bool lt_linear_supported(const LtLinear& p) {
  State& st = state();
  return !plan_for(st, p).candidates.empty();
}

void lt_linear(const LtLinear& p) {
  State& st = state();
  Plan& plan = plan_for(st, p);
  if (plan.candidates.empty())
    raise<Unsupported>(
        "cuBLASLt has no algorithm for linear m={} n={} k={} batch={} (ld x {} w {} y {})", p.m,
        p.n, p.k, p.batch, p.ldx, p.ldw, p.ldy);
  set_scales(plan, p);
  if (!plan.tuned) tune(st, plan, p);
  check_lt(matmul(st, plan, plan.chosen, p, p.y, p.accumulate ? 1.0f : 0.0f), "matmul");
}

GemmScratch gemm_scratch() {
  State& st = state();
  return {.partial = static_cast<float*>(st.scratch()),
          .partial_bytes = static_cast<size_t>(kScratchBytes),
          .counters = st.counters(),
          .num_counters = kCounterBytes / static_cast<int64_t>(sizeof(int)),
          .num_sms = st.num_sms};
}

}  // namespace mls::ops::cuda
