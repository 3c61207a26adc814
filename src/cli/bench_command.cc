#include "cli/bench_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/roofline.h"
#include "cli/serve_flags.h"
#include "core/error.h"
#include "engine/memory_planner.h"
#include "engine/model_runner.h"
#include "model/kv_cache.h"
#include "ops/op_probe.h"
#ifdef MLASERVE_CUDA_RUNTIME
#include "core/cuda_context.h"
#include "ops/cuda/clock_probe_kernels.h"
#endif

namespace mls::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct BenchFlags {
  std::string model;
  std::string load_format = "auto";
  std::string device = "cpu";
  std::vector<int64_t> batch;
  int64_t input_len = 0;
  int64_t output_len = 0;
  int tensor_parallel_size = 1;
  bool sequence_parallel = false;
  int64_t block_size = 64;
  int64_t max_num_batched_tokens = 8192;
  int64_t max_model_len = 0;  // the decode graphs' serving limit; 0: input_len + output_len
  int warmup = 3;
  int iters = 3;
  bool synthetic_context = false;
  bool enforce_eager = RunnerOptions{}.enforce_eager;  // no CUDA graphs for decode
  bool batch_invariant = RunnerOptions{}.batch_invariant;
  bool json = false;
  bool timeline = false;
  // The roofline's peaks. 0: the device's own (H200 figures on a GPU; none on the CPU).
  double peak_bandwidth = 0;
  double peak_flops = 0;
};

int64_t model_len(const BenchFlags& f) {
  return f.max_model_len > 0 ? f.max_model_len : f.input_len + f.output_len;
}

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Linear interpolation between the closest ranks (numpy's default percentile).
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = p / 100 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

// Prompt token `pos` of sequence `seq`: a splitmix64 hash below the vocabulary, the same on
// every run so that routing, and so the experts touched, repeat.
int32_t prompt_token(int64_t seq, int64_t pos, int64_t vocab) {
  uint64_t z = (static_cast<uint64_t>(seq) << 32 | static_cast<uint64_t>(pos)) + 1;
  z *= 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<int32_t>(z % static_cast<uint64_t>(vocab));
}

std::vector<int32_t> argmax_rows(const Tensor& logits) {
  std::vector<int32_t> ids(static_cast<size_t>(logits.dim(0)));
  for (int64_t r = 0; r < logits.dim(0); ++r) {
    const float* row = logits.data<float>() + r * logits.stride(0);
    ids[r] = static_cast<int32_t>(std::max_element(row, row + logits.dim(1)) - row);
  }
  return ids;
}

// The observer runs on rank 0's thread, which owns the rank's device stream: waiting for that
// stream makes each timestamp the end of the work queued before it rather than its launch.
void synchronize(const Device& device) {
#ifdef MLASERVE_CUDA_RUNTIME
  if (device.type == DeviceType::kCuda) cuda::synchronize();
#else
  (void)device;
#endif
}

// The profiled step is the window a profiler started with capture off records, so
// `ncu --profile-from-start off mlaserve bench ...` times exactly its kernels.
void profiler_window(const Device& device, bool open) {
  synchronize(device);
#ifdef MLASERVE_CUDA_RUNTIME
  if (device.type == DeviceType::kCuda) open ? cuda::profiler_start() : cuda::profiler_stop();
#else
  (void)open;
#endif
}

// Seconds of one profiled step by layer type. "embedding" runs from the call to the "embed"
// intermediate, so it includes the step's set-up (positions, cache slots, host copies).
struct LayerTypeTimes {
  double embedding = 0, dense = 0, moe = 0, head = 0;
  int64_t tokens = 0;
};

LayerTypeTimes profile_step(ModelRunner& runner, const ForwardBatch& batch, const Device& device) {
  const io::ModelConfig& c = runner.config();
  std::vector<std::pair<std::string, Clock::time_point>> marks;
  // Greedy draws on the device, as the timed steps make them.
  const std::vector<ops::RowSampling> greedy(batch.num_logit_rows());
  profiler_window(device, true);
  const Clock::time_point start = Clock::now();
  runner.forward_sample(batch, greedy, [&](std::string_view name, const Tensor&) {
    synchronize(device);
    marks.emplace_back(name, Clock::now());
  });
  profiler_window(device, false);
  const Clock::time_point end = Clock::now();
  LayerTypeTimes t;
  t.tokens = batch.num_tokens();
  Clock::time_point prev = start;
  // Each interval belongs to the intermediate that ends it; final_norm and what follows it
  // (lm_head, the logits' gather, the draw and the ids' copy to the host) are the head.
  for (const auto& [name, at] : marks) {
    const double dt = seconds(at - prev);
    prev = at;
    if (name == "embed") {
      t.embedding += dt;
    } else if (name.starts_with("layer.")) {
      const auto layer = static_cast<size_t>(std::stoll(name.substr(6)));
      (c.layer_is_moe.at(layer) ? t.moe : t.dense) += dt;
    } else {
      t.head += dt;
    }
  }
  t.head += seconds(end - prev);
  return t;
}

// One step enqueued with no synchronisation inside it (--timeline): at each of the model's
// observation points, when the host had enqueued the work up to it and when the GPU reached it
// (a CUDA event on the rank's stream), both from the step's start. Where the GPU reaches a point
// well after the host did, the host was ahead and cost the step nothing; where the two meet, the
// GPU waited for launches or host work. And, from an event after every op (ops/op_probe.h), the
// stream's time from the previous op's end to each op's end, summed per op: what each op costs in
// the stream, beside what a profiler measures of its kernels one at a time; and, from a pass of
// its own, the SM clock right after each op (ops/cuda/clock_probe_kernels.h), averaged per op.
struct Timeline {
  struct Point {
    std::string name;
    double host_ms = 0, gpu_ms = 0;
  };
  std::vector<Point> points;
  struct OpTime {
    std::string op;
    int64_t count = 0;
    double gpu_ms = 0;
    double cycles = 0, ns = 0;  // what the clock probes after this op counted
  };
  std::vector<OpTime> ops;  // by time, longest first
  // The point where the host was least ahead of the GPU (gpu_ms - host_ms smallest), past the
  // first, where the two start together.
  const Point* closest() const {
    const Point* best = nullptr;
    for (size_t i = points.size() > 1 ? 1 : 0; i < points.size(); ++i)
      if (!best || points[i].gpu_ms - points[i].host_ms < best->gpu_ms - best->host_ms)
        best = &points[i];
    return best;
  }
};

#ifdef MLASERVE_CUDA_RUNTIME
class Event {
 public:
  Event() { cuda::check(cudaEventCreate(&e_), "cudaEventCreate"); }
  ~Event() { cudaEventDestroy(e_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record() { cuda::check(cudaEventRecord(e_, cuda::stream()), "cudaEventRecord"); }
  double ms_since(const Event& start) const {
    float ms = 0;
    cuda::check(cudaEventElapsedTime(&ms, start.e_, e_), "cudaEventElapsedTime");
    return ms;
  }

 private:
  cudaEvent_t e_ = nullptr;
};

// One step with `probe` named after each op, under an observer that records nothing: the timed
// pass runs under an observer, and an observed step settles each layer's pending residual add
// (Model::forward), so it runs more ops than an unobserved one.
void probed_step(ModelRunner& runner, const ForwardBatch& batch,
                 const std::vector<ops::RowSampling>& greedy, const ops::OpProbe& probe) {
  const ops::ScopedOpProbe scoped(probe);
  runner.forward_sample(batch, greedy, [](std::string_view, const Tensor&) {});
}

// The step once more with a clock probe after each of its n_ops ops, into `by_op`: apart from the
// timed pass, whose times the probes would lengthen. A probe spins kProbeCycles on the op's stream
// (25-32 µs between 1.56 and 1.98 GHz; at full clock it reads about 2 % high against a probe of
// 200,000 cycles, bench/RESULTS.md, session 36, and a longer one would leave the GPU idler) and
// writes to mapped host memory, read once the step is done.
void clock_pass(ModelRunner& runner, const ForwardBatch& batch,
                const std::vector<ops::RowSampling>& greedy, size_t n_ops,
                std::map<std::string, Timeline::OpTime>& by_op) {
  constexpr int64_t kProbeCycles = 50'000;
  uint64_t* out = nullptr;
  cuda::check(cudaHostAlloc(reinterpret_cast<void**>(&out), 2 * n_ops * sizeof(uint64_t),
                            cudaHostAllocMapped),
              "cudaHostAlloc");
  const std::unique_ptr<uint64_t, decltype(&cudaFreeHost)> owned(out, cudaFreeHost);
  std::vector<const char*> names;
  names.reserve(n_ops);
  const ops::OpProbe probe = [&](const char* op) {
    if (names.size() == n_ops)
      raise<InternalError>("--timeline: the clock pass ran more ops than the {} counted", n_ops);
    cuda::check(ops::cuda::kernels::launch_sm_clock_probe(out + 2 * names.size(), kProbeCycles,
                                                          cuda::stream()),
                "launch_sm_clock_probe");
    names.push_back(op);
  };
  probed_step(runner, batch, greedy, probe);
  // The probes ran on the rank's stream, not this thread's.
  cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  for (size_t i = 0; i < names.size(); ++i) {
    Timeline::OpTime& o = by_op[names[i]];
    o.cycles += static_cast<double>(out[2 * i]);
    o.ns += static_cast<double>(out[2 * i + 1]);
  }
}

Timeline timeline_step(ModelRunner& runner, const ForwardBatch& batch) {
  const std::vector<ops::RowSampling> greedy(batch.num_logit_rows());
  // The step's ops counted in a first pass, so that the timed one only records events made
  // beforehand (creating one per op would add host time to steps of short ops).
  size_t n_ops = 0;
  probed_step(runner, batch, greedy, [&](const char*) { ++n_ops; });
  std::deque<Event> events;            // one per point, after `start`
  std::deque<Event> op_events(n_ops);  // one per op, after `start`
  std::vector<const char*> op_names;
  op_names.reserve(n_ops);
  const ops::OpProbe probe = [&](const char* op) {
    if (op_names.size() == n_ops)
      raise<InternalError>("--timeline: the timed step ran more ops than the {} counted", n_ops);
    op_events[op_names.size()].record();
    op_names.push_back(op);
  };
  Event start;
  Timeline t;
  cuda::synchronize();
  const Clock::time_point h0 = Clock::now();
  start.record();
  {
    const ops::ScopedOpProbe scoped(probe);
    runner.forward_sample(batch, greedy, [&](std::string_view name, const Tensor&) {
      events.emplace_back().record();
      t.points.push_back({std::string(name), seconds(Clock::now() - h0) * 1e3, 0});
    });
  }
  cuda::synchronize();
  for (size_t i = 0; i < events.size(); ++i) t.points[i].gpu_ms = events[i].ms_since(start);
  std::map<std::string, Timeline::OpTime> by_op;
  for (size_t i = 0; i < op_names.size(); ++i) {
    Timeline::OpTime& o = by_op[op_names[i]];
    o.op = op_names[i];
    ++o.count;
    o.gpu_ms += op_events[i].ms_since(i > 0 ? op_events[i - 1] : start);
  }
  clock_pass(runner, batch, greedy, n_ops, by_op);
  for (auto& [name, o] : by_op) t.ops.push_back(std::move(o));
  std::sort(t.ops.begin(), t.ops.end(),
            [](const auto& a, const auto& b) { return a.gpu_ms > b.gpu_ms; });
  return t;
}
#endif

json timeline_json(const std::optional<Timeline>& t) {
  if (!t || t->points.empty()) return nullptr;
  json points = json::array();
  for (const Timeline::Point& p : t->points)
    points.push_back({{"name", p.name}, {"host_ms", p.host_ms}, {"gpu_ms", p.gpu_ms}});
  json ops = json::array();
  for (const Timeline::OpTime& o : t->ops)
    ops.push_back({{"op", o.op},
                   {"count", o.count},
                   {"gpu_ms", o.gpu_ms},
                   {"mhz_after", o.ns > 0 ? o.cycles / o.ns * 1e3 : 0.0}});
  const Timeline::Point& c = *t->closest();
  return {{"points", points},
          {"least_host_lead", {{"point", c.name}, {"ms", c.gpu_ms - c.host_ms}}},
          {"ops", ops}};
}

// Sequence s owns blocks [s · per_seq, (s + 1) · per_seq) of the cache.
struct Workload {
  int64_t input_len = 0, output_len = 0;
  std::vector<std::vector<int32_t>> tables;
};

// A prefill step and the sequences whose last prompt chunk it carries, in logit-row order.
struct PrefillStep {
  ForwardBatch batch;
  std::vector<size_t> finishing;
};

// First come, first served under a token budget per step, as vLLM's chunked prefill packs
// them: each step fills its budget with the next prompt tokens, splitting a prompt across
// steps when it does not fit. Only a prompt's last chunk asks for logits.
std::vector<PrefillStep> prefill_schedule(const Workload& w, int64_t budget, int64_t vocab) {
  std::vector<PrefillStep> steps;
  size_t seq = 0;
  int64_t done = 0;  // prompt tokens of `seq` already scheduled
  while (seq < w.tables.size()) {
    PrefillStep step;
    for (int64_t left = budget; left > 0 && seq < w.tables.size();) {
      const int64_t n = std::min(w.input_len - done, left);
      for (int64_t p = done; p < done + n; ++p)
        step.batch.token_ids.push_back(prompt_token(static_cast<int64_t>(seq), p, vocab));
      const bool last = done + n == w.input_len;
      step.batch.seqs.push_back(
          {.num_cached = done,
           .num_new = n,
           .block_table = w.tables[seq],
           .prompt_len = w.input_len,
           .logits = last ? SequenceChunk::Logits::kLast : SequenceChunk::Logits::kNone});
      left -= n;
      done += n;
      if (last) {
        step.finishing.push_back(seq++);
        done = 0;
      }
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

// Every sequence adds one token after `cached` tokens.
ForwardBatch decode_step(const Workload& w, int64_t cached, const std::vector<int32_t>& tokens) {
  ForwardBatch b;
  b.token_ids = tokens;
  for (const auto& table : w.tables)
    b.seqs.push_back(
        {.num_cached = cached, .num_new = 1, .block_table = table, .prompt_len = w.input_len});
  return b;
}

struct Phase {
  int64_t steps = 0;            // forward steps per pass
  std::vector<double> samples;  // seconds: whole prefill passes, or single decode steps
  std::vector<double> ttft;     // seconds per request (prefill)
  StepCost cost;                // per pass (prefill), summed over the steps (decode)
  double floor_s = 0;           // Σ per-step floors, per pass
  std::optional<LayerTypeTimes> layers;
  std::optional<Timeline> timeline;
};

struct Context {
  ModelRunner& runner;
  const BenchFlags& flags;
  Device device;
  std::optional<Peaks> peaks;  // none: no roofline (the CPU without --peak-* figures)

  std::optional<LayerTypeTimes> profile(const ForwardBatch& batch) {
    return profile_step(runner, batch, device);
  }
  std::optional<Timeline> timeline(const ForwardBatch& batch) {
#ifdef MLASERVE_CUDA_RUNTIME
    if (flags.timeline) return timeline_step(runner, batch);
#else
    (void)batch;
#endif
    return std::nullopt;
  }
};

// Prefill passes over all prompts; returns each sequence's first generated token (argmax).
Phase run_prefill(Context& cx, const Workload& w, std::vector<int32_t>& first_tokens) {
  const io::ModelConfig& c = cx.runner.config();
  const std::vector<PrefillStep> steps =
      prefill_schedule(w, cx.flags.max_num_batched_tokens, c.vocab_size);
  Phase ph;
  ph.steps = static_cast<int64_t>(steps.size());
  for (const PrefillStep& s : steps) {
    const StepCost cost = step_cost(c, s.batch, cx.runner.tp_size(), cx.runner.sequence_parallel());
    ph.cost += cost;
    if (cx.peaks) ph.floor_s += floor_seconds(cost, *cx.peaks);
  }
  for (int i = 0; i < cx.flags.warmup; ++i) cx.runner.forward(steps[0].batch);
  for (int it = 0; it < cx.flags.iters; ++it) {
    // Logits are kept and reduced after the pass so that host work between steps does not
    // delay later requests' first tokens.
    std::vector<Tensor> logits;
    const Clock::time_point start = Clock::now();
    for (const PrefillStep& s : steps) {
      logits.push_back(cx.runner.forward(s.batch));
      const double t = seconds(Clock::now() - start);
      ph.ttft.insert(ph.ttft.end(), s.finishing.size(), t);
    }
    ph.samples.push_back(seconds(Clock::now() - start));
    for (size_t i = 0; i < steps.size(); ++i) {
      const std::vector<int32_t> ids = argmax_rows(logits[i]);
      for (size_t j = 0; j < steps[i].finishing.size(); ++j)
        first_tokens[steps[i].finishing[j]] = ids[j];
    }
  }
  ph.layers = cx.profile(steps[0].batch);
  ph.timeline = cx.timeline(steps[0].batch);
  return ph;
}

// Decode passes of output_len steps from input_len cached tokens; each step feeds every
// sequence the argmax of its previous logits, taken on the device.
Phase run_decode(Context& cx, const Workload& w, std::vector<int32_t> tokens) {
  const io::ModelConfig& c = cx.runner.config();
  Phase ph;
  ph.steps = w.output_len;
  for (int64_t k = 0; k < w.output_len; ++k) {
    const StepCost cost = step_cost(c, decode_step(w, w.input_len + k, tokens), cx.runner.tp_size(),
                                    cx.runner.sequence_parallel());
    ph.cost += cost;
    if (cx.peaks) ph.floor_s += floor_seconds(cost, *cx.peaks);
  }
  // Greedy tokens drawn where the logits are, as the engine does: a step returns only ids.
  const std::vector<ops::RowSampling> greedy(tokens.size());
  for (int i = 0; i < cx.flags.warmup; ++i)
    cx.runner.forward_sample(decode_step(w, w.input_len, tokens), greedy);
  for (int it = 0; it < cx.flags.iters; ++it)
    for (int64_t k = 0; k < w.output_len; ++k) {
      const ForwardBatch b = decode_step(w, w.input_len + k, tokens);
      const Clock::time_point start = Clock::now();
      SampledRows drawn = cx.runner.forward_sample(b, greedy);
      ph.samples.push_back(seconds(Clock::now() - start));
      tokens = std::move(drawn.ids);
    }
  const ForwardBatch profiled = decode_step(w, w.input_len, tokens);
  ph.layers = cx.profile(profiled);
  ph.timeline = cx.timeline(profiled);
  return ph;
}

json layer_types_json(const std::optional<LayerTypeTimes>& times, const io::ModelConfig& c) {
  if (!times) return nullptr;
  const LayerTypeTimes& t = *times;
  const auto moe = std::count(c.layer_is_moe.begin(), c.layer_is_moe.end(), true);
  const int64_t dense = c.num_hidden_layers - moe;
  auto entry = [](double s, int64_t layers) {
    return json{{"total_ms", s * 1e3},
                {"layers", layers},
                {"per_layer_ms", layers > 0 ? s * 1e3 / static_cast<double>(layers) : 0.0}};
  };
  return {{"tokens", t.tokens},
          {"embedding", entry(t.embedding, 1)},
          {"dense_layer", entry(t.dense, dense)},
          {"moe_layer", entry(t.moe, moe)},
          {"final_norm_lm_head", entry(t.head, 1)}};
}

json roofline_json(const StepCost& cost, double floor_s, double measured_s,
                   const std::optional<Peaks>& peaks) {
  json j = {{"weight_bytes", cost.weight_bytes},
            {"kv_read_bytes", cost.kv_read_bytes},
            {"kv_write_bytes", cost.kv_write_bytes},
            {"bytes", cost.bytes()},
            {"gemm_flops", cost.gemm_flops},
            {"attention_flops", cost.attention_flops},
            {"indexer_flops", cost.indexer_flops},
            {"flops", cost.flops()},
            {"floor_ms", nullptr},
            {"bound", nullptr},
            {"achieved", nullptr}};
  if (peaks) {
    j["floor_ms"] = floor_s * 1e3;
    j["bound"] = compute_bound(cost, *peaks) ? "compute" : "memory";
    j["achieved"] = measured_s > 0 ? floor_s / measured_s : 0.0;
  }
  return j;
}

json quantiles_ms(const std::vector<double>& s) {
  return {{"median", percentile(s, 50) * 1e3}, {"p99", percentile(s, 99) * 1e3}};
}

StepCost scaled(StepCost c, double f) {
  c.weight_bytes *= f;
  c.kv_read_bytes *= f;
  c.kv_write_bytes *= f;
  c.gemm_flops *= f;
  c.attention_flops *= f;
  c.indexer_flops *= f;
  return c;
}

json run_one(Context& cx, int64_t batch, double load_s) {
  const BenchFlags& f = cx.flags;
  const io::ModelConfig& c = cx.runner.config();
  Workload w{.input_len = f.input_len, .output_len = f.output_len, .tables = {}};
  // Each sequence gets the blocks for its whole prompt and output; warmup and profiled steps
  // rewrite positions the measured steps use, so no block beyond these is needed.
  const int64_t per_seq = (f.input_len + f.output_len + f.block_size - 1) / f.block_size;
  for (int64_t s = 0; s < batch; ++s) {
    std::vector<int32_t> t(static_cast<size_t>(per_seq));
    for (int64_t b = 0; b < per_seq; ++b) t[b] = static_cast<int32_t>(s * per_seq + b);
    w.tables.push_back(std::move(t));
  }
  if (cx.runner.decode_graphs()) {
    // Decode graphs need the serving layout: fixed block tables and a planned step workspace
    // (meta profile), a cache of exactly the blocks used, graphs captured up to the batch.
    // A graph step's attention and indexer are planned for max_model_len (docs/design.md, "CUDA
    // graphs"): a served step compares with a raw one of the server's limit.
    const ServingLimits limits{.max_num_batched_tokens = f.max_num_batched_tokens,
                               .max_num_seqs = batch,
                               .max_model_len = model_len(f),
                               .block_size = f.block_size};
    const int64_t plan_blocks = (model_len(f) + f.block_size - 1) / f.block_size;
    const PlanBudget budget{
        .device_bytes = device_memory_bytes(cx.device) / cx.runner.ranks_per_device(),
        .kv_cache_memory_bytes = batch * plan_blocks * f.block_size *
                                 KvCache::bytes_per_token(c, activation_dtype(cx.device))};
    apply_plan(cx.runner, plan_memory(cx.runner, limits, budget, ProfileMode::kMeta));
  } else {
    cx.runner.allocate_kv_cache(batch * per_seq, f.block_size);
  }
  cx.runner.reset_broadcast_stats();

  json out{{"model", f.model},
           {"model_type", io::model_type_name(c.family)},
           {"fp8", c.quant.fp8},
           {"device", cx.device.str()},
           {"tensor_parallel_size", cx.runner.tp_size()},
           {"sequence_parallel", cx.runner.sequence_parallel()},
           {"batch", batch},
           {"input_len", f.input_len},
           {"output_len", f.output_len},
           {"max_model_len", model_len(f)},
           {"block_size", f.block_size},
           {"max_num_batched_tokens", f.max_num_batched_tokens},
           {"kv_cache_blocks", batch * per_seq},
           {"synthetic_context", f.synthetic_context},
           {"enforce_eager", f.enforce_eager},
           {"batch_invariant", cx.runner.batch_invariant()},
           {"cuda_graph_buckets", cx.runner.captured_buckets()},
           {"warmup", f.warmup},
           {"iters", f.iters},
           {"load_s", load_s},
           {"decode_tokens", "argmax"},
           {"peaks", cx.peaks ? json{{"bytes_per_s", cx.peaks->bytes_per_s},
                                     {"flops_per_s", cx.peaks->flops_per_s}}
                              : json(nullptr)},
           {"prefill", nullptr},
           {"decode", nullptr}};

  // Without a prefill the first decode tokens are prompt-like ids (the cache holds what
  // KvCache::allocate left there).
  std::vector<int32_t> tokens(static_cast<size_t>(batch));
  for (int64_t s = 0; s < batch; ++s) tokens[s] = prompt_token(s, f.input_len, c.vocab_size);
  if (!f.synthetic_context) {
    const Phase p = run_prefill(cx, w, tokens);
    const double pass = percentile(p.samples, 50);
    out["prefill"] = {
        {"tokens_per_s", static_cast<double>(batch * f.input_len) / pass},
        {"steps_per_pass", p.steps},
        {"pass_ms", quantiles_ms(p.samples)},
        {"ttft_ms", quantiles_ms(p.ttft)},
        {"roofline", roofline_json(p.cost, p.floor_s, pass, cx.peaks)},
        {"layer_types", layer_types_json(p.layers, c)},
        {"timeline", timeline_json(p.timeline)},
    };
  }
  if (f.output_len > 0) {
    const Phase d = run_decode(cx, w, tokens);
    const double step = percentile(d.samples, 50);
    const double per_step = 1.0 / static_cast<double>(d.steps);
    out["decode"] = {
        {"tokens_per_s", static_cast<double>(batch) / step},
        {"steps", d.steps * f.iters},
        {"tpot_ms", quantiles_ms(d.samples)},
        {"roofline", roofline_json(scaled(d.cost, per_step), d.floor_s * per_step, step, cx.peaks)},
        {"layer_types", layer_types_json(d.layers, c)},
        {"timeline", timeline_json(d.timeline)},
    };
  }
  out["cuda_graph_replays"] = cx.runner.graph_replays();
  out["cuda_graph_bytes"] = cx.runner.graph_bytes();
  out["cuda_graphs_off"] = cx.runner.decode_graphs_off_reason();
  // Under mpirun: what the leader sent the other processes per step (docs/multi-node.md).
  if (const ModelRunner::BroadcastStats b = cx.runner.broadcast_stats(); b.steps > 0)
    out["step_broadcast"] = {
        {"steps", b.steps},
        {"bytes_per_step", static_cast<double>(b.bytes) / static_cast<double>(b.steps)},
        {"ms_per_step", b.seconds * 1e3 / static_cast<double>(b.steps)}};
  return out;
}

std::string si(double v, const char* unit) {
  const char* prefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  size_t i = 0;
  while (v >= 1000 && i + 1 < std::size(prefixes)) v /= 1000, ++i;
  return fmt::format("{:.3g} {}{}", v, prefixes[i], unit);
}

void print_table(const json& r) {
  const json& pre = r["prefill"];
  const json& dec = r["decode"];
  std::string out = fmt::format(
      "mlaserve bench: {} ({}{}) on {}, tp {}{}\n"
      "batch {}, input {}, output {}, block {}, step budget {} tokens{}; decode feeds argmax "
      "tokens\n\n",
      r["model"].get<std::string>(), r["model_type"].get<std::string>(),
      r["fp8"].get<bool>() ? ", block-FP8" : "", r["device"].get<std::string>(),
      r["tensor_parallel_size"].get<int>(), r["sequence_parallel"].get<bool>() ? " (SP)" : "",
      r["batch"].get<int64_t>(), r["input_len"].get<int64_t>(), r["output_len"].get<int64_t>(),
      r["block_size"].get<int64_t>(), r["max_num_batched_tokens"].get<int64_t>(),
      r["synthetic_context"].get<bool>() ? ", synthetic context (no prefill)" : "");
  auto q = [](const json& ms) {
    return fmt::format("{:.2f} / {:.2f}", ms["median"].get<double>(), ms["p99"].get<double>());
  };
  auto roof = [](const json& p) {
    const json& rf = p["roofline"];
    if (rf["floor_ms"].is_null()) return fmt::format("{:>10} {:>9}  {}", "-", "-", "-");
    return fmt::format("{:>10.4g} {:>8.3g}%  {}", rf["floor_ms"].get<double>(),
                       rf["achieved"].get<double>() * 100, rf["bound"].get<std::string>());
  };
  out += fmt::format("{:<8} {:>12} {:>20} {:>20} {:>10} {:>9}  {}\n", "phase", "tokens/s",
                     "TTFT med / p99 ms", "TPOT med / p99 ms", "floor ms", "achieved", "bound");
  if (!pre.is_null())
    out += fmt::format("{:<8} {:>12.1f} {:>20} {:>20} {}\n", "prefill",
                       pre["tokens_per_s"].get<double>(), q(pre["ttft_ms"]), "-", roof(pre));
  if (!dec.is_null())
    out += fmt::format("{:<8} {:>12.1f} {:>20} {:>20} {}\n", "decode",
                       dec["tokens_per_s"].get<double>(), "-", q(dec["tpot_ms"]), roof(dec));
  if (r["peaks"].is_null())
    out += "floor: none (no peak figures for this CPU; give --peak-bandwidth and --peak-flops)\n";
  else
    out += fmt::format("floor: prefill per pass (all prompts), decode per step; at {}/s and {}/s\n",
                       si(r["peaks"]["bytes_per_s"].get<double>(), "B"),
                       si(r["peaks"]["flops_per_s"].get<double>(), "FLOP"));
  for (const auto& [name, p] : {std::pair{"prefill pass", &pre}, std::pair{"decode step", &dec}})
    if (!p->is_null()) {
      const json& rf = (*p)["roofline"];
      out += fmt::format(
          "  {}: weights {}, KV read {}, KV written {}; {}\n", name,
          si(rf["weight_bytes"].get<double>(), "B"), si(rf["kv_read_bytes"].get<double>(), "B"),
          si(rf["kv_write_bytes"].get<double>(), "B"), si(rf["flops"].get<double>(), "FLOP"));
    }

  std::vector<std::pair<const char*, const json*>> cols;
  for (const auto& [name, p] : {std::pair{"prefill step", &pre}, std::pair{"decode step", &dec}})
    if (!p->is_null() && !(*p)["layer_types"].is_null())
      cols.emplace_back(name, &(*p)["layer_types"]);
  if (cols.empty()) {
    out += "\nlayer types: not profiled with --sequence-parallel at tp > 1\n";
    std::fputs(out.c_str(), stdout);
    return;
  }
  out += fmt::format("\n{:<24}", "layer type (ms)");
  for (const auto& [name, lt] : cols)
    out += fmt::format(" {:>25}", fmt::format("{} ({} tok)", name, (*lt)["tokens"].get<int64_t>()));
  out += fmt::format("\n{:<24}", "");
  for (size_t i = 0; i < cols.size(); ++i)
    out += fmt::format(" {:>12} {:>12}", "total", "per layer");
  out += "\n";
  for (const auto& [key, label] :
       {std::pair{"embedding", "embedding"}, std::pair{"dense_layer", "dense layer"},
        std::pair{"moe_layer", "MoE layer"},
        std::pair{"final_norm_lm_head", "final norm + lm_head"}}) {
    const json& first = (*cols.front().second)[key];
    out += fmt::format(
        "{:<24}", key == std::string_view("dense_layer") || key == std::string_view("moe_layer")
                      ? fmt::format("{} × {}", label, first["layers"].get<int64_t>())
                      : std::string(label));
    for (const auto& col : cols)
      out += fmt::format(" {:>12.3f} {:>12.3f}", (*col.second)[key]["total_ms"].get<double>(),
                         (*col.second)[key]["per_layer_ms"].get<double>());
    out += "\n";
  }
  for (const auto& [name, p] : {std::pair{"prefill step", &pre}, std::pair{"decode step", &dec}})
    if (!p->is_null() && !(*p)["timeline"].is_null()) {
      const json& t = (*p)["timeline"];
      const json& last = t["points"].back();
      out += fmt::format(
          "\ntimeline, {}: the host reached the last point at {:.3f} ms, the GPU at {:.3f} ms; "
          "the host least ahead at {} ({:.3f} ms)\n",
          name, last["host_ms"].get<double>(), last["gpu_ms"].get<double>(),
          t["least_host_lead"]["point"].get<std::string>(),
          t["least_host_lead"]["ms"].get<double>());
      out += "  in the stream, from the previous op's end, by op (and the SM clock after it):\n";
      for (const json& o : t["ops"])
        out += fmt::format("  {:<28} × {:>4} {:>10.3f} ms {:>6.0f} MHz\n",
                           o["op"].get<std::string>(), o["count"].get<int64_t>(),
                           o["gpu_ms"].get<double>(), o["mhz_after"].get<double>());
    }
  std::fputs(out.c_str(), stdout);
}

void run(const BenchFlags& f) {
  if (f.batch.empty()) raise<InvalidArgument>("--batch: give at least one batch size");
  for (int64_t b : f.batch)
    if (b < 1) raise<InvalidArgument>("--batch sizes must be positive (got {})", b);
  if (f.synthetic_context && f.output_len == 0)
    raise<InvalidArgument>("--synthetic-context measures decode only: give --output-len >= 1");
  const Device device = parse_device(f.device);
  if (f.timeline && (device.is_cpu() || f.tensor_parallel_size != 1))
    raise<InvalidArgument>(
        "--timeline times a GPU's progress against the host's on one rank: give --device cuda "
        "and --tensor-parallel-size 1");
  if (device.is_cpu() && (f.peak_bandwidth > 0) != (f.peak_flops > 0))
    raise<InvalidArgument>(
        "bench on the CPU: give both --peak-bandwidth and --peak-flops for a roofline, or "
        "neither");
  const int64_t max_len = io::ModelConfig::load(f.model).max_position_embeddings;
  if (f.input_len + f.output_len > max_len)
    raise<InvalidArgument>("--input-len + --output-len = {} exceeds max_position_embeddings {}",
                           f.input_len + f.output_len, max_len);
  if (f.max_model_len > 0 &&
      (f.max_model_len < f.input_len + f.output_len || f.max_model_len > max_len))
    raise<InvalidArgument>(
        "--max-model-len {} must hold --input-len + --output-len = {} and stay within "
        "max_position_embeddings {}",
        f.max_model_len, f.input_len + f.output_len, max_len);
  const Clock::time_point t0 = Clock::now();
  ModelRunner runner({.model = f.model,
                      .load_format = parse_load_format(f.load_format),
                      .tensor_parallel_size = f.tensor_parallel_size,
                      .sequence_parallel = f.sequence_parallel,
                      .device = device,
                      .enforce_eager = f.enforce_eager,
                      .batch_invariant = batch_invariant(f.batch_invariant)});
  const double load_s = seconds(Clock::now() - t0);
  if (!runner.leader()) return runner.follow();
  const io::ModelConfig& c = runner.config();
  std::fprintf(stderr, "mlaserve bench: model loaded in %.1f s\n", load_s);
  // The roofline of the device this runs on: the H200 data sheet on a GPU (or the given
  // figures); on the CPU only figures the user gives, since its peaks are not known here.
  std::optional<Peaks> peaks;
  if (!device.is_cpu() || (f.peak_bandwidth > 0 && f.peak_flops > 0))
    peaks = Peaks{.bytes_per_s = f.peak_bandwidth > 0 ? f.peak_bandwidth : kH200BytesPerSecond,
                  .flops_per_s = f.peak_flops > 0 ? f.peak_flops : default_peak_flops(c)};
  Context cx{.runner = runner, .flags = f, .device = device, .peaks = peaks};
  for (size_t i = 0; i < f.batch.size(); ++i) {
    const json r = run_one(cx, f.batch[i], load_s);
    if (f.json) {
      std::printf("%s\n", r.dump().c_str());
    } else {
      if (i > 0) std::printf("\n");
      print_table(r);
    }
    std::fflush(stdout);
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Time prefill and decode on the model runner, with a roofline floor per phase");
  cmd->add_option("--model", f->model, "Model directory (config.json; weights unless dummy)")
      ->required();
  cmd->add_option("--load-format", f->load_format, "auto | dummy (random weights from config)");
  cmd->add_option("--device", f->device, "cpu (default) or cuda[:N]");
  cmd->add_option("--batch,--batch-size", f->batch,
                  "Sequences per step; a comma-separated list runs each size in turn on the one "
                  "loaded model")
      ->required()
      ->delimiter(',');
  cmd->add_option("--input-len", f->input_len, "Prompt tokens per sequence")
      ->required()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--output-len", f->output_len, "Decode steps (one new token per sequence each)")
      ->required()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--tensor-parallel-size", f->tensor_parallel_size, "Ranks (one device each)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--sequence-parallel", f->sequence_parallel,
                "Shard tokens across ranks between layers");
  cmd->add_option("--block-size", f->block_size, "Tokens per KV block (default 64)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-num-batched-tokens", f->max_num_batched_tokens,
                  "Token budget of one prefill step (default 8192)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-model-len", f->max_model_len,
                  "The serving limit decode graphs are planned for, as serve's (default "
                  "--input-len + --output-len)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--warmup,--num-iters-warmup", f->warmup,
                  "Untimed steps before each phase (default 3)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--iters,--num-iters", f->iters,
                  "Timed passes of each phase: all prompts, or all decode steps (default 3)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--synthetic-context", f->synthetic_context,
                "Skip the prefill: decode starts with --input-len tokens counted as cached");
  cmd->add_option("--peak-bandwidth", f->peak_bandwidth,
                  "Roofline memory bandwidth in bytes/s (default on a GPU 4.8e12, H200; none on "
                  "the CPU)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--peak-flops", f->peak_flops,
                  "Roofline FLOP/s (default on a GPU: H200 dense 1979e12 for FP8 checkpoints, "
                  "else 989e12; none on the CPU)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--enforce-eager,!--no-enforce-eager", f->enforce_eager,
                "Never capture CUDA graphs for decode (as serve --enforce-eager)");
  cmd->add_flag("--batch-invariant,!--no-batch-invariant", f->batch_invariant,
                "Every token's output independent of its batch (as serve --batch-invariant)");
  cmd->add_flag("--json", f->json, "One JSON object per batch size, one per line");
  cmd->add_flag("--timeline", f->timeline,
                "Also run one step of each phase unsynchronised and report, per observation "
                "point, when the host had enqueued it and when the GPU reached it, and each "
                "op's time in the stream and the SM clock after it");
  cmd->callback([f] { run(*f); });
}

}  // namespace mls::cli
