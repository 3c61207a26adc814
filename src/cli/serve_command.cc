#include "cli/serve_command.h"

#include <fmt/format.h>
#include <pthread.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/tool_parser.h"
#include "core/error.h"
#include "core/logging.h"
#include "engine/engine.h"
#include "engine/memory_planner.h"
#include "engine/model_runner.h"
#include "server/engine_loop.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/serving_context.h"
#include "tokenizer/tokenizer.h"

namespace mls::cli {
namespace {

namespace fs = std::filesystem;

// Until the memory planner lands, the KV pool defaults to this much.
constexpr int64_t kDefaultKvBytes = int64_t{256} << 20;

struct ServeFlags {
  std::string model_positional;
  std::string model;
  std::string host = "0.0.0.0";
  int port = 8000;
  std::vector<std::string> served_model_name;
  std::string api_key;
  int tensor_parallel_size = 1;
  bool sequence_parallel = false;
  double gpu_memory_utilization = 0.9;
  int64_t kv_cache_memory_bytes = 0;
  int64_t max_model_len = 0;
  int64_t max_num_batched_tokens = 8192;
  int64_t max_num_seqs = 256;
  int64_t block_size = 64;
  bool enforce_eager = false;
  bool no_enable_prefix_caching = false;
  std::string load_format = "auto";
  std::string device = "auto";
  std::string chat_template;
  bool enable_auto_tool_choice = false;
  std::string tool_call_parser;
  std::string reasoning_parser;
  std::string generation_config = "auto";
  std::string test_script;
};

// Every vLLM reasoning parser name that means "<think>...</think>".
const std::vector<std::string> kThinkParsers = {"deepseek_r1", "deepseek_v3", "glm45", "qwen3"};

void add_flags(CLI::App* cmd, ServeFlags& f) {
  cmd->add_option("model_tag", f.model_positional, "Model directory (same as --model)");
  cmd->add_option("--model", f.model, "Model directory (config.json, safetensors, tokenizer)");
  cmd->add_option("--host", f.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", f.port, "Port to listen on")->capture_default_str();
  cmd->add_option("--served-model-name", f.served_model_name,
                  "Model name(s) clients use (default: the model path as given)");
  cmd->add_option("--api-key", f.api_key, "Require this key as Bearer token on /v1 routes")
      ->envname("MLASERVE_API_KEY");
  cmd->add_option("--tensor-parallel-size", f.tensor_parallel_size, "Ranks (one device each)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--sequence-parallel", f.sequence_parallel,
                "Shard tokens across ranks between layers");
  cmd->add_option("--gpu-memory-utilization", f.gpu_memory_utilization,
                  "Fraction of the GPU's memory to use (0.9); the memory planner applies it")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--kv-cache-memory-bytes", f.kv_cache_memory_bytes,
                  "KV cache size in bytes (suffixes K, M, G, KiB, MiB, GiB accepted)")
      ->transform(CLI::AsSizeValue(false));
  cmd->add_option("--max-model-len", f.max_model_len,
                  "Longest sequence (default: max_position_embeddings, capped to the KV pool)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-num-batched-tokens", f.max_num_batched_tokens, "Token budget per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-num-seqs", f.max_num_seqs, "Sequences per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--block-size", f.block_size, "Tokens per KV block")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--enforce-eager", f.enforce_eager, "Accepted for vLLM compatibility (no graphs)");
  cmd->add_flag("--no-enable-prefix-caching", f.no_enable_prefix_caching, "Disable prefix caching");
  cmd->add_option("--load-format", f.load_format, "auto | dummy (random weights from config)");
  cmd->add_option("--device", f.device, "auto (default: cuda when a GPU exists), cpu, cuda[:N]");
  cmd->add_option("--chat-template", f.chat_template,
                  "Chat template file (or the template text) replacing the model's");
  cmd->add_flag("--enable-auto-tool-choice", f.enable_auto_tool_choice,
                "Let the model decide to call tools (tool_choice auto)");
  cmd->add_option("--tool-call-parser", f.tool_call_parser, "Tool-call output format")
      ->check(CLI::IsMember(chat::tool_parser_names()));
  cmd->add_option("--reasoning-parser", f.reasoning_parser,
                  "Split <think> reasoning out of the content")
      ->check(CLI::IsMember(kThinkParsers));
  cmd->add_option("--generation-config", f.generation_config,
                  "auto: sampling defaults from generation_config.json; vllm: none")
      ->check(CLI::IsMember({"auto", "vllm"}));
  // Test-only: the model "says" the tokenization of this file instead of sampling.
  cmd->add_option("--test-script", f.test_script)->group("");
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return fmt::format("{:.2f} {}", b, units[u]);
}

std::unique_ptr<ModelRunner> load_model(const ServeFlags& f, const std::string& model) {
  int files = 0;
  uintmax_t bytes = 0;
  for (const auto& e : fs::directory_iterator(model))
    if (e.path().extension() == ".safetensors") {
      ++files;
      bytes += e.file_size();
    }
  MLS_LOG_INFO("Loading weights from {}: {} safetensors file(s), {}", model, files,
               human_bytes(static_cast<double>(bytes)));
  const auto t0 = std::chrono::steady_clock::now();
  auto runner =
      std::make_unique<ModelRunner>(RunnerOptions{.model = model,
                                                  .load_format = parse_load_format(f.load_format),
                                                  .tensor_parallel_size = f.tensor_parallel_size,
                                                  .sequence_parallel = f.sequence_parallel,
                                                  .device = parse_device(f.device)});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MLS_LOG_INFO(
      "Loading weights took {:.2f} s ({}/s); weights use {} per rank", s,
      human_bytes(static_cast<double>(bytes) / std::max(s, 1e-9)),
      human_bytes(static_cast<double>(runner->allocator(0).stats().cur(MemTag::kWeights))));
  return runner;
}

// Plans memory (the profiling pass at max_num_batched_tokens, docs/memory-planning.md), logs
// the report and allocates the planned KV pool. On a GPU the pass runs for real and the KV
// cache gets --gpu-memory-utilization of the device less what the pass measured; on the CPU it
// is traced (meta) and the KV budget defaults to kDefaultKvBytes (host memory is shared with
// everything else). --kv-cache-memory-bytes overrides the budget on any device.
void allocate_kv(ModelRunner& runner, const ServeFlags& f) {
  const PlanLimits limits{.max_num_batched_tokens = f.max_num_batched_tokens,
                          .max_num_seqs = f.max_num_seqs,
                          .max_model_len = f.max_model_len,
                          .block_size = f.block_size};
  const bool cpu = runner.device().is_cpu();
  PlanBudget budget{.device_bytes = device_memory_bytes(runner.device()),
                    .utilization = f.gpu_memory_utilization,
                    .kv_cache_memory_bytes = {}};
  if (f.kv_cache_memory_bytes > 0)
    budget.kv_cache_memory_bytes = f.kv_cache_memory_bytes;
  else if (cpu)
    budget.kv_cache_memory_bytes = kDefaultKvBytes;
  const MemoryPlan plan =
      plan_memory(runner, limits, budget, cpu ? ProfileMode::kMeta : ProfileMode::kReal);
  std::istringstream lines(plan.report());
  for (std::string line; std::getline(lines, line);) MLS_LOG_INFO("{}", line);
  apply_plan(runner, plan);
}

std::optional<chat::ChatTemplate> load_chat_template(const ServeFlags& f,
                                                     const std::string& model) {
  try {
    if (f.chat_template.empty()) return chat::ChatTemplate::from_dir(model);
    if (fs::exists(f.chat_template)) return chat::ChatTemplate::from_dir(model, f.chat_template);
    // Not a file: the template text itself, as vLLM accepts.
    const tok::TokenizerConfig cfg = tok::TokenizerConfig::from_dir(model);
    return chat::ChatTemplate(f.chat_template, {{"bos_token", cfg.bos_token},
                                                {"eos_token", cfg.eos_token},
                                                {"pad_token", cfg.pad_token},
                                                {"unk_token", cfg.unk_token}});
  } catch (const ConfigError& e) {
    if (!f.chat_template.empty()) throw;
    MLS_LOG_WARN("no chat template ({}); /v1/chat/completions will answer 400", e.what());
    return std::nullopt;
  }
}

// SIGINT and SIGTERM are blocked in every thread and taken synchronously by sigwait, so no
// handler runs in signal context.
sigset_t shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

void run_serve(ServeFlags f) {
  std::string model = !f.model.empty() ? f.model : f.model_positional;
  if (model.empty()) {
    // No model named: the bundled demo model, found relative to build/mlaserve.
    const fs::path bundled =
        fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "models" / "demo-glm5";
    if (!fs::is_directory(bundled))
      raise<InvalidArgument>(
          "serve: give the model directory (--model DIR); the bundled demo "
          "model was not found at {}",
          bundled.string());
    model = bundled.string();
  }
  if (!f.model.empty() && !f.model_positional.empty() && f.model != f.model_positional)
    raise<InvalidArgument>("serve: the positional model '{}' and --model '{}' differ",
                           f.model_positional, f.model);
  if (!fs::is_directory(model)) raise<InvalidArgument>("--model {}: not a directory", model);
  if (f.enable_auto_tool_choice && f.tool_call_parser.empty())
    raise<InvalidArgument>("--enable-auto-tool-choice needs --tool-call-parser");
  if (f.served_model_name.empty()) f.served_model_name.push_back(model);

  const sigset_t signals = shutdown_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  server::HttpOptions http_opts;
  http_opts.host = f.host;
  http_opts.port = f.port;
  http_opts.api_key = f.api_key;
  server::HttpServer http(http_opts);
  const int port = http.start();
  MLS_LOG_INFO(
      "mlaserve {} listening on http://{}:{} (loading the model; /health is 503 until "
      "ready)",
      server::version(), f.host, port);

  std::unique_ptr<ModelRunner> runner = load_model(f, model);
  allocate_kv(*runner, f);
  Engine engine(*runner, {.max_num_batched_tokens = f.max_num_batched_tokens,
                          .max_num_seqs = f.max_num_seqs,
                          .max_model_len = f.max_model_len,
                          .enable_prefix_caching = !f.no_enable_prefix_caching});
  MLS_LOG_INFO("max_model_len {}, max_num_seqs {}, max_num_batched_tokens {}",
               engine.config().max_model_len, f.max_num_seqs, f.max_num_batched_tokens);
  const tok::Tokenizer tokenizer = tok::Tokenizer::from_dir(model);
  const std::optional<chat::ChatTemplate> tmpl = load_chat_template(f, model);

  server::ServingOptions opts{
      .served_model_names = f.served_model_name,
      .model_path = model,
      .tool_call_parser = f.tool_call_parser,
      .reasoning_parser = f.reasoning_parser,
      .enable_auto_tool_choice = f.enable_auto_tool_choice,
      .defaults = server::GenerationDefaults::load(model, f.generation_config),
      .test_script = nullptr};
  if (!f.test_script.empty()) {
    opts.test_script = std::make_shared<const std::vector<int32_t>>(
        tokenizer.encode(tok::read_text_file(f.test_script), false));
    MLS_LOG_WARN("--test-script {}: every request outputs its {} scripted tokens", f.test_script,
                 opts.test_script->size());
  }
  server::Metrics metrics(f.served_model_name.front());
  server::EngineLoop loop(engine);
  grammar::GrammarCompiler grammars(std::make_shared<const grammar::Vocabulary>(
      grammar::Vocabulary::from_tokenizer(tokenizer, runner->config().vocab_size)));
  server::ServingContext ctx{.opts = std::move(opts),
                             .tokenizer = tokenizer,
                             .chat_template = tmpl ? &*tmpl : nullptr,
                             .loop = loop,
                             .metrics = metrics,
                             .grammars = &grammars};
  http.log_routes();
  http.set_context(&ctx);
  MLS_LOG_INFO("Application startup complete: serving '{}' on http://{}:{}", ctx.model_name(),
               f.host, port);

  int sig = 0;
  sigwait(&signals, &sig);
  MLS_LOG_INFO("{} received: no new connections; finishing the requests in flight",
               sig == SIGINT ? "SIGINT" : "SIGTERM");
  http.stop();
  loop.stop();
  MLS_LOG_INFO("Shutdown complete");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve the model over an OpenAI-compatible HTTP API (vllm serve flags)");
  add_flags(cmd, *flags);
  cmd->callback([flags] { run_serve(*flags); });
}

}  // namespace mls::cli
