#include "cli/model_commands.h"

#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/simple_generator.h"
#include "io/safetensors_writer.h"
#include "model/model.h"

namespace mls::cli {
namespace {

struct ModelFlags {
  std::string model;
  std::string device = "cpu";
  std::string load_format = "auto";
  std::string prompt_ids;
};

void add_model_flags(CLI::App* cmd, ModelFlags& f) {
  cmd->add_option("--model", f.model, "Model directory (config.json + safetensors)")->required();
  cmd->add_option("--device", f.device, "cpu (default) or cuda[:N]");
  cmd->add_option("--load-format", f.load_format, "auto | dummy (random weights from config)");
  cmd->add_option("--prompt-ids", f.prompt_ids, "Comma-separated token ids, e.g. 3,17,42")
      ->required();
}

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i <= s.size()) {
    const size_t j = std::min(s.find(',', i), s.size());
    const std::string tok = s.substr(i, j - i);
    try {
      size_t used = 0;
      const long v = std::stol(tok, &used);
      if (used != tok.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(tok);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      raise<InvalidArgument>("--prompt-ids: '{}' is not a token id (expected e.g. 3,17,42)", tok);
    }
    i = j + 1;
  }
  return ids;
}

std::unique_ptr<Model> load_model(const ModelFlags& f) {
  const Device dev = parse_device(f.device);
  if (!dev.is_cpu()) raise<Unsupported>("--device {}: this build runs on the cpu only", f.device);
  LoadOptions opts;
  opts.format = parse_load_format(f.load_format);
  return Model::load(f.model, opts);
}

void run_logits(const ModelFlags& f, const std::string& out) {
  const std::vector<int32_t> ids = parse_ids(f.prompt_ids);
  std::unique_ptr<Model> model = load_model(f);
  const auto n = static_cast<int64_t>(ids.size());
  KvCache kv = KvCache::allocate(model->config(), 1, n, model->allocator());
  ForwardBatch batch;
  batch.token_ids = ids;
  batch.seqs.push_back({.num_cached = 0,
                        .num_new = n,
                        .block_table = {0},
                        .logits = SequenceChunk::Logits::kAll});
  Tensor logits = model->forward(batch, kv);
  const io::TensorData td{"logits",
                          "F32",
                          {logits.dim(0), logits.dim(1)},
                          {static_cast<const std::byte*>(logits.raw()), logits.nbytes()}};
  io::write_safetensors(out, std::span(&td, 1));
}

void run_generate(const ModelFlags& f, int64_t max_tokens, double temperature, bool json) {
  if (temperature != 0.0)
    raise<InvalidArgument>("generate: only --temperature 0 (greedy) is supported here; sampling "
                           "runs in the serving engine");
  const std::vector<int32_t> ids = parse_ids(f.prompt_ids);
  std::unique_ptr<Model> model = load_model(f);
  GreedyResult r = generate_greedy(*model, ids, max_tokens, model->config().eos_token_ids);
  if (json) {
    std::printf("%s\n", nlohmann::json{{"output_ids", r.output_ids}}.dump().c_str());
  } else {
    std::printf("%s\n", fmt::format("{}", fmt::join(r.output_ids, ",")).c_str());
  }
}

}  // namespace

void add_model_commands(CLI::App& app) {
  {
    auto flags = std::make_shared<ModelFlags>();
    auto out = std::make_shared<std::string>();
    CLI::App* cmd = app.add_subcommand("logits", "Write the logits of every prompt position");
    add_model_flags(cmd, *flags);
    cmd->add_option("--out", *out, "Output .safetensors (one f32 tensor `logits` [T, vocab])")
        ->required();
    cmd->callback([flags, out] { run_logits(*flags, *out); });
  }
  {
    auto flags = std::make_shared<ModelFlags>();
    auto max_tokens = std::make_shared<int64_t>(16);
    auto temperature = std::make_shared<double>(0.0);
    auto json = std::make_shared<bool>(false);
    CLI::App* cmd = app.add_subcommand("generate", "Generate from token ids");
    add_model_flags(cmd, *flags);
    cmd->add_option("--max-tokens", *max_tokens, "Tokens to generate")->check(CLI::PositiveNumber);
    cmd->add_option("--temperature", *temperature, "0 = greedy");
    cmd->add_flag("--json", *json, "Print one JSON object");
    cmd->callback([=] { run_generate(*flags, *max_tokens, *temperature, *json); });
  }
}

}  // namespace mls::cli
