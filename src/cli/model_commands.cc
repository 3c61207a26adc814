#include "cli/model_commands.h"

#include "cli/id_list.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "core/error.h"
#include "core/json.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "io/safetensors_writer.h"
#include "tokenizer/tokenizer.h"

namespace mls::cli {
namespace {

struct ModelFlags {
  std::string model;
  std::string device = "cpu";
  std::string load_format = "auto";
  int tensor_parallel_size = 1;
  int ranks_per_device = 1;
  bool sequence_parallel = false;
  std::string prompt_ids;
};

// Scheduler and KV pool flags (vllm serve names). num_kv_blocks stands in for the memory
// planner: 0 sizes the pool for the prompts at hand.
struct EngineFlags {
  ServingLimits limits;
  int64_t num_kv_blocks = 0;
};

void add_model_flags(CLI::App* cmd, ModelFlags& f) {
  cmd->add_option("--model", f.model, "Model directory (config.json + safetensors)")->required();
  cmd->add_option("--device", f.device, "cpu (default) or cuda[:N]");
  cmd->add_option("--load-format", f.load_format, "auto | dummy (random weights from config)");
  cmd->add_option("--tensor-parallel-size", f.tensor_parallel_size, "Ranks (one device each)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--sequence-parallel", f.sequence_parallel,
                "Shard tokens across ranks between layers");
  cmd->add_option("--ranks-per-device", f.ranks_per_device,
                  "1 (one GPU per rank) or --tensor-parallel-size (every rank on one GPU)")
      ->check(CLI::PositiveNumber);
}

void add_engine_flags(CLI::App* cmd, EngineFlags& f) {
  cmd->add_option("--block-size", f.limits.block_size, "Tokens per KV block")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-num-batched-tokens", f.limits.max_num_batched_tokens,
                  "Token budget per step")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-num-seqs", f.limits.max_num_seqs, "Sequences per step")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-model-len", f.limits.max_model_len,
                  "Longest sequence (default: max_position_embeddings, capped to the pool)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--num-kv-blocks", f.num_kv_blocks,
                  "KV blocks to allocate (default: enough for the given prompts)")
      ->check(CLI::PositiveNumber);
}

// One JSON list of token ids per non-empty line.
std::vector<std::vector<int32_t>> read_prompt_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) raise<IoError>("--prompt-file {}: cannot open", path);
  std::vector<std::vector<int32_t>> prompts;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      prompts.push_back(
          parse_json<InvalidArgument, nlohmann::json>(line, "JSON").get<std::vector<int32_t>>());
    } catch (const nlohmann::json::exception& e) {
      raise<InvalidArgument>("--prompt-file {}:{}: expected a JSON list of token ids ({})", path, n,
                             e.what());
    }
  }
  if (prompts.empty()) raise<InvalidArgument>("--prompt-file {}: no prompts", path);
  return prompts;
}

std::unique_ptr<ModelRunner> load_runner(const ModelFlags& f) {
  return std::make_unique<ModelRunner>(
      RunnerOptions{.model = f.model,
                    .load_format = parse_load_format(f.load_format),
                    .tensor_parallel_size = f.tensor_parallel_size,
                    .sequence_parallel = f.sequence_parallel,
                    .device = parse_device(f.device),
                    .ranks_per_device = f.ranks_per_device});
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

void run_logits(const ModelFlags& f, const EngineFlags& e, const std::string& out) {
  const std::vector<int32_t> ids = parse_id_list(f.prompt_ids, "--prompt-ids");
  std::unique_ptr<ModelRunner> runner = load_runner(f);
  if (!runner->leader()) return runner->follow();
  const auto n = static_cast<int64_t>(ids.size());
  const int64_t mml = e.limits.max_model_len > 0 ? e.limits.max_model_len
                                                 : runner->config().max_position_embeddings;
  if (n > mml)
    raise<InvalidArgument>("--prompt-ids has {} tokens, more than max_model_len {}", n, mml);
  const int64_t blocks = std::max(e.num_kv_blocks, ceil_div(n, e.limits.block_size));
  runner->allocate_kv_cache(blocks, e.limits.block_size);
  const int64_t vocab = runner->config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(n * vocab));
  ForwardBatch batch;
  batch.seqs.resize(1);
  SequenceChunk& sc = batch.seqs[0];
  for (int64_t b = 0; b < ceil_div(n, e.limits.block_size); ++b)
    sc.block_table.push_back(static_cast<int32_t>(b));
  sc.prompt_len = n;
  sc.logits = SequenceChunk::Logits::kAll;
  // The prompt runs in chunks of the step budget, as the engine would prefill it.
  for (int64_t done = 0; done < n; done += sc.num_new) {
    sc.num_cached = done;
    sc.num_new = std::min(e.limits.max_num_batched_tokens, n - done);
    batch.token_ids.assign(ids.begin() + done, ids.begin() + done + sc.num_new);
    const Tensor part = runner->forward(batch);
    std::copy(part.data<float>(), part.data<float>() + part.numel(), logits.begin() + done * vocab);
  }
  const io::TensorData td{
      "logits",
      "F32",
      {n, vocab},
      {reinterpret_cast<const std::byte*>(logits.data()), logits.size() * sizeof(float)}};
  io::write_safetensors(out, std::span(&td, 1));
}

struct GenerateFlags {
  std::string prompt_file;
  std::string prompt;  // text, tokenized with the model's tokenizer
  std::string chat;    // a user message, rendered with the model's chat template
  int64_t max_tokens = 16;
  double temperature = 0.0;
  double top_p = 1.0;
  int64_t top_k = 0;
  int64_t seed = -1;
  bool ignore_eos = false;
  bool json = false;
};

void run_generate(const ModelFlags& f, const EngineFlags& e, const GenerateFlags& g) {
  const int given =
      !f.prompt_ids.empty() + !g.prompt_file.empty() + !g.prompt.empty() + !g.chat.empty();
  if (given != 1)
    raise<InvalidArgument>(
        "generate: give exactly one of --prompt-ids, --prompt-file, --prompt and --chat");
  // Text in, text out: the model's tokenizer (and chat template for --chat).
  std::optional<tok::Tokenizer> tokenizer;
  if (!g.prompt.empty() || !g.chat.empty()) tokenizer = tok::Tokenizer::from_dir(f.model);
  std::vector<std::vector<int32_t>> prompts;
  if (!g.prompt.empty()) {
    prompts.push_back(tokenizer->encode(g.prompt, true));
  } else if (!g.chat.empty()) {
    const chat::ChatTemplate tmpl = chat::ChatTemplate::from_dir(f.model);
    const nlohmann::ordered_json request = {{"messages", {{{"role", "user"}, {"content", g.chat}}}},
                                            {"add_generation_prompt", true}};
    prompts.push_back(tokenizer->encode(chat::render_chat(tmpl, request), false));
  } else if (!g.prompt_file.empty()) {
    prompts = read_prompt_file(g.prompt_file);
  } else {
    prompts.push_back(parse_id_list(f.prompt_ids, "--prompt-ids"));
  }
  std::unique_ptr<ModelRunner> runner = load_runner(f);
  if (!runner->leader()) return runner->follow();
  const int64_t mml = e.limits.max_model_len > 0 ? e.limits.max_model_len
                                                 : runner->config().max_position_embeddings;
  int64_t blocks = e.num_kv_blocks;
  if (blocks == 0) {
    for (const auto& p : prompts)
      blocks += ceil_div(std::min(mml, static_cast<int64_t>(p.size()) + g.max_tokens),
                         e.limits.block_size);
    blocks = std::min(blocks, e.limits.max_num_seqs * ceil_div(mml, e.limits.block_size));
    if (e.limits.max_model_len > 0)
      blocks = std::max(blocks, ceil_div(e.limits.max_model_len, e.limits.block_size));
  }
  runner->allocate_kv_cache(blocks, e.limits.block_size);
  Engine engine(*runner, {.limits = e.limits});

  SamplingParams sp;
  sp.max_tokens = g.max_tokens;
  sp.temperature = g.temperature;
  sp.top_p = g.top_p;
  sp.top_k = g.top_k;
  if (g.seed >= 0) sp.seed = static_cast<uint64_t>(g.seed);
  sp.ignore_eos = g.ignore_eos;
  std::vector<std::vector<int32_t>> outputs(prompts.size());
  std::vector<FinishReason> finish(prompts.size());
  const auto t0 = Clock::now();
  for (size_t i = 0; i < prompts.size(); ++i)
    engine.add_request({.id = std::to_string(i),
                        .prompt_ids = prompts[i],
                        .params = sp,
                        .on_token =
                            [&outputs, &finish, i](const TokenEvent& ev) {
                              if (ev.token_id >= 0) outputs[i].push_back(ev.token_id);
                              finish[i] = ev.finish;
                              return Verdict::kContinue;
                            },
                        .constraint = nullptr});
  while (engine.step()) {
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();

  const EngineStats st = engine.stats();
  if (tokenizer) {
    // Decoded output; the chat form leaves out special tokens, as the server's answers do.
    const std::string text = tokenizer->decode(outputs[0], !g.chat.empty());
    if (g.json)
      std::printf("%s\n", nlohmann::json{{"output_ids", outputs[0]},
                                         {"text", text},
                                         {"finish_reason", finish_reason_name(finish[0])}}
                              .dump()
                              .c_str());
    else
      std::printf("%s\n", text.c_str());
    return;
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (!g.json)
      std::printf("%s\n", fmt::format("{}", fmt::join(outputs[i], ",")).c_str());
    else if (g.prompt_file.empty())
      std::printf("%s\n", nlohmann::json{{"output_ids", outputs[i]}}.dump().c_str());
    else
      std::printf("%s\n", nlohmann::json{{"output_ids", outputs[i]},
                                         {"finish_reason", finish_reason_name(finish[i])}}
                              .dump()
                              .c_str());
  }
  if (g.prompt_file.empty()) return;
  const auto total = static_cast<double>(st.prompt_tokens + st.generation_tokens);
  const nlohmann::json summary{
      {"throughput",
       {{"requests_per_s", static_cast<double>(prompts.size()) / elapsed},
        {"output_tokens_per_s", static_cast<double>(st.generation_tokens) / elapsed},
        {"total_tokens_per_s", total / elapsed},
        {"elapsed_s", elapsed},
        {"prompt_tokens", st.prompt_tokens},
        {"output_tokens", st.generation_tokens},
        {"num_kv_blocks", blocks},
        {"block_size", e.limits.block_size},
        {"kv_cache_bytes", runner->allocator(0).stats().cur(MemTag::kKv)},
        {"preemptions", st.num_preemptions}}}};
  std::fprintf(g.json ? stdout : stderr, "%s\n", summary.dump().c_str());
}

}  // namespace

void add_model_commands(CLI::App& app) {
  {
    auto flags = std::make_shared<ModelFlags>();
    auto engine = std::make_shared<EngineFlags>();
    auto out = std::make_shared<std::string>();
    CLI::App* cmd = app.add_subcommand("logits", "Write the logits of every prompt position");
    add_model_flags(cmd, *flags);
    add_engine_flags(cmd, *engine);
    cmd->add_option("--prompt-ids", flags->prompt_ids, "Comma-separated token ids, e.g. 3,17,42")
        ->required();
    cmd->add_option("--out", *out, "Output .safetensors (one f32 tensor `logits` [T, vocab])")
        ->required();
    cmd->callback([flags, engine, out] { run_logits(*flags, *engine, *out); });
  }
  {
    auto flags = std::make_shared<ModelFlags>();
    auto engine = std::make_shared<EngineFlags>();
    auto gen = std::make_shared<GenerateFlags>();
    CLI::App* cmd =
        app.add_subcommand("generate", "Generate from text, a chat message or token ids");
    add_model_flags(cmd, *flags);
    add_engine_flags(cmd, *engine);
    cmd->add_option("--prompt-ids", flags->prompt_ids, "Comma-separated token ids, e.g. 3,17,42");
    cmd->add_option(
        "--prompt", gen->prompt,
        "Prompt text (tokenized with the model's tokenizer); prints the decoded output");
    cmd->add_option("--chat", gen->chat,
                    "A user message rendered with the model's chat template; prints the decoded "
                    "answer");
    cmd->add_option("--prompt-file", gen->prompt_file,
                    "One JSON list of token ids per line, run as one batch");
    cmd->add_option("--max-tokens", gen->max_tokens, "Tokens to generate")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--temperature", gen->temperature, "0 = greedy (default)");
    cmd->add_option("--top-p", gen->top_p, "Nucleus mass in (0, 1]");
    cmd->add_option("--top-k", gen->top_k, "Keep the k most likely tokens (0: all)");
    cmd->add_option("--seed", gen->seed, "Sampling seed (default: random)");
    cmd->add_flag("--ignore-eos", gen->ignore_eos, "Do not stop at the EOS token");
    cmd->add_flag("--json", gen->json,
                  "JSON output: one object per prompt (and a throughput summary for "
                  "--prompt-file)");
    cmd->callback([flags, engine, gen] { run_generate(*flags, *engine, *gen); });
  }
}

}  // namespace mls::cli
