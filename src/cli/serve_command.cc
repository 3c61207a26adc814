#include "cli/serve_command.h"

#include <fmt/format.h>
#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "cli/hf_cache.h"
#include "cli/load_progress.h"
#include "cli/serve_flags.h"
#include "core/device.h"
#include "core/error.h"
#include "core/logging.h"
#include "engine/engine.h"
#include "engine/memory_planner.h"
#include "engine/model_runner.h"
#include "engine/serving_limits.h"
#include "io/model_config.h"
#include "parallel/world.h"
#include "server/cors.h"
#include "server/engine_loop.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/serving_context.h"
#include "tokenizer/tokenizer.h"

namespace mls::cli {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

// Until the memory planner lands, the KV pool defaults to this much.
constexpr int64_t kDefaultKvBytes = int64_t{256} << 20;
// How often a log (not a terminal) gets a weight-loading progress line.
constexpr auto kProgressInterval = std::chrono::seconds(5);

// Everything about the command line that can be checked without reading weights.
struct Checked {
  fs::path model_dir;
  fs::path tokenizer_dir;
  io::ModelConfig config;
  Device device;
  server::GenerationDefaults defaults;
  std::string generation_source;
  std::string chat_template_source;
};

fs::path bundled_demo_model() {
  return fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "models" / "demo-glm5";
}

// Applies --override-generation-config over the defaults.
void apply_generation_overrides(server::GenerationDefaults& d, const ojson& o) {
  for (const auto& [k, v] : o.items()) {
    const double x = v.get<double>();
    if (k == "temperature") d.temperature = x;
    if (k == "top_p") d.top_p = x;
    if (k == "min_p") d.min_p = x;
    if (k == "repetition_penalty") d.repetition_penalty = x;
    if (k == "top_k") d.top_k = static_cast<int64_t>(x);
    if (k == "max_new_tokens") d.max_tokens = static_cast<int64_t>(x);
  }
}

std::string describe_defaults(const server::GenerationDefaults& d) {
  std::string s;
  const auto add = [&](const char* k, const auto& v) {
    if (v) s += fmt::format("{}{}={}", s.empty() ? "" : ",", k, *v);
  };
  add("temperature", d.temperature);
  add("top_p", d.top_p);
  add("top_k", d.top_k);
  add("min_p", d.min_p);
  add("repetition_penalty", d.repetition_penalty);
  add("max_tokens", d.max_tokens);
  return s.empty() ? "none" : s;
}

// Every check that needs no weights, each problem added to `errors`: the model and tokenizer
// found, config.json valid, the limits within the model's, the device known.
Checked check(ServeFlags& f, std::vector<std::string>& errors) {
  Checked c;
  if (f.model.empty()) {
    c.model_dir = bundled_demo_model();
    if (!fs::is_directory(c.model_dir)) {
      errors.push_back(
          fmt::format("no model given (serve MODEL) and the bundled demo model is not at {}",
                      c.model_dir.string()));
      return c;
    }
    f.model = c.model_dir.string();
  } else {
    try {
      c.model_dir = resolve_model_dir(f.model, f.revision, f.download_dir);
    } catch (const Error& e) {
      errors.push_back(e.what());
    }
  }
  if (f.served_model_name.empty()) f.served_model_name.push_back(f.model);
  try {
    c.device = parse_device(f.device);
  } catch (const Error& e) {
    errors.push_back(fmt::format("--device {}: {}", f.device, e.what()));
  }
  if (!c.model_dir.empty()) {
    try {
      c.config = io::ModelConfig::load(c.model_dir);
      const int64_t mpe = c.config.max_position_embeddings;
      if (f.max_model_len > mpe)
        errors.push_back(
            fmt::format("--max-model-len {}: longer than the model's max_position_embeddings ({})",
                        f.max_model_len, mpe));
      const std::string own = c.config.quant.fp8 ? "fp8" : "none";
      if (!f.quantization.empty() && f.quantization != own)
        errors.push_back(fmt::format(
            "--quantization {}: this checkpoint is {}; checkpoints are served as they ship, "
            "never quantised on the fly: drop --quantization{}",
            f.quantization, c.config.quant.fp8 ? "block-FP8" : "not quantised (bf16)",
            c.config.quant.fp8 ? " or pass fp8" : ""));
      if (c.config.num_attention_heads % f.tensor_parallel_size != 0)
        errors.push_back(
            fmt::format("--tensor-parallel-size {}: must divide the model's {} attention heads",
                        f.tensor_parallel_size, c.config.num_attention_heads));
      if (f.speculative && f.sequence_parallel && f.tensor_parallel_size > 1)
        errors.push_back(
            "--speculative-config with --sequence-parallel: the MTP layer runs with a replicated "
            "residual stream; drop --sequence-parallel");
      if (f.speculative) f.speculative->check_model(c.config);
    } catch (const Error& e) {
      errors.push_back(e.what());
    }
  }
  if (!f.tokenizer.empty()) {
    try {
      c.tokenizer_dir = resolve_model_dir(f.tokenizer, "", f.download_dir);
    } catch (const Error& e) {
      errors.push_back(fmt::format("--tokenizer {}: {}", f.tokenizer, e.what()));
    }
  } else {
    c.tokenizer_dir = c.model_dir;
  }
  if (!f.skip_tokenizer_init && !c.tokenizer_dir.empty() &&
      !fs::exists(c.tokenizer_dir / "tokenizer.json"))
    errors.push_back(fmt::format("no tokenizer.json in {}{}", c.tokenizer_dir.string(),
                                 f.tokenizer.empty() ? " (pass --tokenizer DIR, or "
                                                       "--skip-tokenizer-init to serve token ids)"
                                                     : ""));
  if (f.generation_config == "auto" || f.generation_config == "vllm") {
    if (!c.model_dir.empty()) {
      c.defaults = server::GenerationDefaults::load(c.model_dir, f.generation_config);
      c.generation_source = f.generation_config == "vllm"
                                ? "vllm (none)"
                                : (c.model_dir / "generation_config.json").string();
    }
  } else if (!fs::exists(fs::path(f.generation_config) / "generation_config.json")) {
    errors.push_back(fmt::format(
        "--generation-config {}: expected auto, vllm or a directory with generation_config.json",
        f.generation_config));
  } else {
    c.defaults = server::GenerationDefaults::load(f.generation_config, "auto");
    c.generation_source = (fs::path(f.generation_config) / "generation_config.json").string();
  }
  apply_generation_overrides(c.defaults, f.override_generation_config);
  if (!f.override_generation_config.empty()) c.generation_source += " + overrides";
  if (!f.test_script.empty() && !fs::exists(f.test_script))
    errors.push_back(fmt::format("--test-script {}: no such file", f.test_script));
  if (f.skip_tokenizer_init)
    c.chat_template_source = "none (--skip-tokenizer-init)";
  else if (!f.chat_template.empty())
    c.chat_template_source = fs::exists(f.chat_template)
                                 ? "--chat-template " + f.chat_template
                                 : std::string("--chat-template (inline text)");
  else if (fs::exists(c.tokenizer_dir / "chat_template.jinja"))
    c.chat_template_source = (c.tokenizer_dir / "chat_template.jinja").string();
  else
    c.chat_template_source = (c.tokenizer_dir / "tokenizer_config.json").string();
  return c;
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

std::unique_ptr<ModelRunner> load_model(const ServeFlags& f, const Checked& c) {
  int files = 0;
  uintmax_t bytes = 0;
  for (const auto& e : fs::directory_iterator(c.model_dir))
    if (e.path().extension() == ".safetensors") {
      ++files;
      bytes += e.file_size();
    }
  MLS_LOG_INFO("Loading weights from {}: {} safetensors file(s), {}", c.model_dir.string(), files,
               human_bytes(static_cast<double>(bytes)));
  const bool terminal = isatty(STDERR_FILENO) == 1;
  LoadProgress progress(
      files, f.tensor_parallel_size, terminal,
      [terminal](const std::string& line) {
        if (terminal) {
          std::fputs(line.c_str(), stderr);
          std::fflush(stderr);
        } else {
          MLS_LOG_INFO("{}", line);
        }
      },
      kProgressInterval);
  const auto t0 = std::chrono::steady_clock::now();
  auto runner = std::make_unique<ModelRunner>(RunnerOptions{
      .model = c.model_dir,
      .load_format = parse_load_format(f.load_format),
      .tensor_parallel_size = f.tensor_parallel_size,
      .sequence_parallel = f.sequence_parallel,
      .device = c.device,
      .ranks_per_device = f.ranks_per_device,
      .meta = false,
      .enforce_eager = f.enforce_eager,
      .batch_invariant = batch_invariant(f.batch_invariant),
      .load_progress = [&progress](int rank, int64_t done,
                                   int64_t total) { progress.update(rank, done, total); },
      .mtp = f.speculative.has_value()});
  if (terminal) std::fputs("\n", stderr);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Rank 0 lives on the leader; followers' loads reach its log (ModelRunner).
  if (runner->leader())
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
MemoryPlan allocate_kv(ModelRunner& runner, const ServeFlags& f) {
  const ServingLimits limits{
      .max_num_batched_tokens = f.max_num_batched_tokens,
      .max_num_seqs = f.max_num_seqs,
      .max_model_len = f.max_model_len,
      .block_size = f.block_size,
      .num_speculative_tokens = f.speculative ? f.speculative->num_speculative_tokens : 0};
  const bool cpu = runner.device().is_cpu();
  PlanBudget budget{
      .device_bytes = device_memory_bytes(runner.device()) / runner.ranks_per_device(),
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
  if (f.speculative) {
    const io::ModelConfig& mc = runner.config();
    const DType act = activation_dtype(runner.device());
    MLS_LOG_INFO(
        "Speculative decoding: method {}, {} draft tokens per step, {} MTP layer(s) loaded of {}; "
        "their KV {} bytes/token, hidden-state carry {} per rank",
        f.speculative->method, f.speculative->num_speculative_tokens, runner.num_mtp_layers(),
        mc.num_nextn_predict_layers,
        KvCache::bytes_per_token(mc, act, true) - KvCache::bytes_per_token(mc, act),
        human_bytes(static_cast<double>(plan.ranks[0].mtp_carry_bytes)));
  }
  apply_plan(runner, plan);
  return plan;
}

std::optional<chat::ChatTemplate> load_chat_template(const ServeFlags& f, const fs::path& dir) {
  try {
    if (f.chat_template.empty()) return chat::ChatTemplate::from_dir(dir);
    if (fs::exists(f.chat_template)) return chat::ChatTemplate::from_dir(dir, f.chat_template);
    // Not a file: the template text itself, as vLLM accepts.
    const tok::TokenizerConfig cfg = tok::TokenizerConfig::from_dir(dir);
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

// The effective configuration: one start-up line and what /load and /v1/models/{id} report.
ojson effective_config(const ServeFlags& f, const Checked& c, const ModelRunner& runner,
                       const EngineConfig& engine) {
  const bool cpu = runner.device().is_cpu();
  return ojson{{"model", c.model_dir.string()},
               {"served_model_name", f.served_model_name},
               {"device", runner.device().str()},
               {"dtype", cpu ? "float32" : "bfloat16"},
               {"kv_cache_dtype", cpu ? "float32" : "bfloat16"},
               {"tensor_parallel_size", f.tensor_parallel_size},
               {"sequence_parallel", f.sequence_parallel},
               {"block_size", runner.block_size()},
               {"num_kv_blocks", runner.num_blocks()},
               {"max_model_len", engine.limits.max_model_len},
               {"max_num_seqs", engine.limits.max_num_seqs},
               {"max_num_batched_tokens", engine.limits.max_num_batched_tokens},
               {"enable_prefix_caching", engine.enable_prefix_caching},
               {"seed", f.seed ? ojson(*f.seed) : ojson("random")},
               {"tool_call_parser", f.tool_call_parser.empty() ? "none" : f.tool_call_parser},
               {"enable_auto_tool_choice", f.enable_auto_tool_choice},
               {"reasoning_parser", f.reasoning_parser.empty() ? "none" : f.reasoning_parser},
               {"chat_template", c.chat_template_source},
               {"generation_config", c.generation_source},
               {"generation_defaults", describe_defaults(c.defaults)},
               {"response_role", f.response_role},
               {"ui", !f.disable_ui},
               {"skip_tokenizer_init", f.skip_tokenizer_init}};
}

std::string config_line(const ojson& cfg) {
  std::string line;
  for (const auto& [k, v] : cfg.items())
    line += fmt::format("{}{}={}", line.empty() ? "" : " ", k,
                        v.is_string() ? v.get<std::string>() : v.dump());
  return "Effective configuration: " + line;
}

server::HttpOptions http_options(const ServeFlags& f) {
  server::HttpOptions o;
  o.transport = {.host = f.host,
                 .port = f.port,
                 .uds = f.uds,
                 .ssl_certfile = f.ssl_certfile,
                 .ssl_keyfile = f.ssl_keyfile,
                 .limits = f.http_limits};
  o.api_keys = f.api_key;
  for (const char* env : {"VLLM_API_KEY", "MLASERVE_API_KEY"})
    if (const char* v = std::getenv(env); o.api_keys.empty() && v && *v) o.api_keys.push_back(v);
  o.cors = {.allowed_origins = server::parse_cors_list("--allowed-origins", f.allowed_origins),
            .allowed_methods = server::parse_cors_list("--allowed-methods", f.allowed_methods),
            .allowed_headers = server::parse_cors_list("--allowed-headers", f.allowed_headers),
            .allow_credentials = f.allow_credentials};
  o.root_path = f.root_path;
  while (o.root_path.size() > 1 && o.root_path.back() == '/') o.root_path.pop_back();
  if (o.root_path == "/") o.root_path.clear();
  return o;
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

void run_serve(const std::vector<std::string>& args) {
  ParsedServe parsed = parse_serve_args(args);
  ServeFlags& f = parsed.flags;
  if (f.help || f.flags_markdown) {
    std::fputs((f.help ? serve_help() : flags_markdown()).c_str(), stdout);
    return;
  }
  std::vector<std::string> errors = std::move(parsed.errors);
  Checked c = check(f, errors);
  if (!errors.empty()) {
    std::string msg =
        fmt::format("serve: {} problem{} with the command line (nothing loaded):", errors.size(),
                    errors.size() == 1 ? "" : "s");
    for (const std::string& e : errors) msg += "\n  - " + e;
    raise<InvalidArgument>("{}", msg);
  }
  set_log_level(f.log_level != "info" ? f.log_level : f.uvicorn_log_level);
  if (f.distributed_timeout_seconds > 0)
    World::get().set_timeout(
        std::chrono::milliseconds(static_cast<int64_t>(f.distributed_timeout_seconds * 1e3)));
  for (const std::string& note : f.no_effect_notes) MLS_LOG_WARN("{}", note);

  const sigset_t signals = shutdown_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  if (!World::get().leader()) {
    // A follower process under mpirun: no HTTP server; SIGTERM stays blocked, the leader's
    // drain ends the job (docs/multi-node.md).
    load_model(f, c)->follow();
    return;
  }

  server::HttpServer http(http_options(f));
  const int port = http.start();
  MLS_LOG_INFO("mlaserve {} listening on {} (loading the model; /health is 503 until ready)",
               server::version(), http.url(port));

  std::unique_ptr<ModelRunner> runner = load_model(f, c);
  const MemoryPlan plan = allocate_kv(*runner, f);
  server::Metrics* metrics_ptr = nullptr;
  Engine engine(*runner, {.limits = plan.limits,
                          .enable_prefix_caching = f.enable_prefix_caching,
                          .device_sampling = true,
                          .seed = f.seed,
                          .on_step = [&metrics_ptr](int64_t tokens) {
                            if (metrics_ptr) metrics_ptr->observe_iteration(tokens);
                          }});
  // --skip-tokenizer-init: no tokenizer, template or grammar vocabulary (token ids only).
  std::optional<tok::Tokenizer> tokenizer;
  std::optional<chat::ChatTemplate> tmpl;
  std::optional<grammar::GrammarCompiler> grammars;
  if (!f.skip_tokenizer_init) {
    tokenizer.emplace(tok::Tokenizer::from_dir(c.tokenizer_dir));
    tmpl = load_chat_template(f, c.tokenizer_dir);
  } else {
    MLS_LOG_INFO(
        "--skip-tokenizer-init: no tokenizer loaded; /v1/completions takes and returns token ids, "
        "requests that need text answer 400");
  }

  const ojson cfg = effective_config(f, c, *runner, engine.config());
  server::ServingOptions opts{
      .served_model_names = f.served_model_name,
      .model_path = c.model_dir.string(),
      .tool_call_parser = f.tool_call_parser,
      .reasoning_parser = f.reasoning_parser,
      .enable_auto_tool_choice = f.enable_auto_tool_choice,
      .defaults = c.defaults,
      .test_script = nullptr,
      .response_role = f.response_role,
      .exclude_tools_when_tool_choice_none = f.exclude_tools_when_tool_choice_none,
      .default_chat_template_kwargs = f.default_chat_template_kwargs,
      .log_requests = f.log_requests,
      .max_log_len = f.max_log_len,
      .server_info = cfg,
      .enable_ui = !f.disable_ui,
      .enable_timings = f.enable_timings};
  if (!f.test_script.empty()) {
    opts.test_script = std::make_shared<const std::vector<int32_t>>(
        tokenizer->encode(tok::read_text_file(f.test_script), false));
    MLS_LOG_WARN("--test-script {}: every request outputs its {} scripted tokens", f.test_script,
                 opts.test_script->size());
  }
  server::Metrics metrics(
      f.served_model_name.front(),
      {.max_model_len = engine.config().limits.max_model_len,
       .max_num_batched_tokens = engine.config().limits.max_num_batched_tokens});
  metrics.set_cache_config({{"block_size", std::to_string(runner->block_size())},
                            {"cache_dtype", cfg["kv_cache_dtype"].get<std::string>()},
                            {"enable_prefix_caching", f.enable_prefix_caching ? "True" : "False"},
                            {"gpu_memory_utilization", fmt::format("{}", f.gpu_memory_utilization)},
                            {"num_gpu_blocks", std::to_string(runner->num_blocks())}});
  metrics_ptr = &metrics;
  server::EngineLoop loop(engine, f.log_stats);
  if (tokenizer)
    grammars.emplace(std::make_shared<const grammar::Vocabulary>(
        grammar::Vocabulary::from_tokenizer(*tokenizer, runner->config().vocab_size)));
  server::ServingContext ctx{.opts = std::move(opts),
                             .tokenizer = tokenizer ? &*tokenizer : nullptr,
                             .chat_template = tmpl ? &*tmpl : nullptr,
                             .loop = loop,
                             .metrics = metrics,
                             .grammars = grammars ? &*grammars : nullptr};
  MLS_LOG_INFO("{}", config_line(cfg));
  http.log_routes();
  http.set_context(&ctx);
  MLS_LOG_INFO("Application startup complete: serving '{}' on {}", ctx.model_name(),
               http.url(port));

  int sig = 0;
  sigwait(&signals, &sig);
  MLS_LOG_INFO(
      "{} received: no new connections; requests in flight may finish within {} s "
      "(--shutdown-timeout), then are aborted",
      sig == SIGINT ? "SIGINT" : "SIGTERM", f.shutdown_timeout);
  http.stop(std::chrono::milliseconds(static_cast<int64_t>(f.shutdown_timeout * 1000)));
  loop.stop();
  metrics_ptr = nullptr;
  MLS_LOG_INFO("Shutdown complete");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Serve the model over an OpenAI-compatible HTTP API (vllm serve flags; serve --help)");
  // The flag table parses every argument (serve_flags.h): CLI11 passes them through untouched.
  cmd->set_help_flag();
  cmd->prefix_command();
  // Not the parent's options either: the table parses --distributed-timeout-seconds too.
  cmd->fallthrough(false);
  cmd->callback([cmd] { run_serve(cmd->remaining()); });
}

}  // namespace mls::cli
