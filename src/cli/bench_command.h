// `bench`: prefill and decode timings straight on a ModelRunner (no scheduler, no sampler), with
// time to first token, time per output token, per-layer-type times and the roofline floor.
#pragma once

#include <CLI/CLI.hpp>

namespace mls::cli {

void add_bench_command(CLI::App& app);

}  // namespace mls::cli
