// mlaserve command line: one binary, one subcommand per task (DESIGN.md "cli/").
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "cli/bench_command.h"
#include "cli/model_commands.h"
#include "cli/plan_memory_command.h"
#include "cli/serve_command.h"
#include "cli/text_commands.h"
#include "core/error.h"
#include "core/logging.h"
#include "parallel/world.h"
#include "server/http_server.h"

namespace {

// A failed command: the message, and under mpirun the process it came from. A multi-process
// job then ends through World::fail_job (every process stops, mpirun exits non-zero).
int fail(const char* what) {
  mls::World& w = mls::World::get();
  if (!w.multi_process()) {
    std::fprintf(stderr, "error: %s\n", what);
    return 1;
  }
  const std::string msg =
      fmt::format("process {} of {} ({}): {}", w.process(), w.num_processes(), w.host(), what);
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  w.fail_job(msg);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    mls::World::init(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  CLI::App app{"mlaserve: an inference server for MLA + MoE models (DeepSeek-V3/V3.2, GLM-5)"};
  app.set_version_flag("--version", std::string("mlaserve ") + mls::server::version());
  app.require_subcommand(1);
  // Options of the whole job, accepted after the subcommand too.
  app.fallthrough();
  double timeout_s = std::chrono::duration<double>(mls::World::get().timeout()).count();
  app.add_option("--distributed-timeout-seconds", timeout_s,
                 "Under mpirun: the longest wait of any collective before the job is taken down")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->envname("MLASERVE_DISTRIBUTED_TIMEOUT_SECONDS");
  app.parse_complete_callback([&] {
    mls::World::get().set_timeout(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3)));
    // Every other command's stdout is its output (JSON, ids); under mpirun every process
    // already logs to stderr, tagged (World::init).
    if (!app.got_subcommand("serve") && !mls::World::get().multi_process()) mls::log_to_stderr();
  });
  mls::cli::add_model_commands(app);
  mls::cli::add_text_commands(app);
  mls::cli::add_plan_memory_command(app);
  mls::cli::add_serve_command(app);
  mls::cli::add_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const mls::Error& e) {
    return fail(e.what());
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  mls::World::finalize();
  return 0;
}
