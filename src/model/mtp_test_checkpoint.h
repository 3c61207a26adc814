// Test helper: a copy of a fixture model directory with one MTP layer of random weights, since
// the fixtures hold none. The MTP layer's decoder block is the last main layer's tensors under
// the MTP layer's index (FP8 codes and block scales kept as stored); enorm, hnorm,
// shared_head.norm and eh_proj are drawn from a seeded generator. `edit` may drop or reshape
// the MTP tensors before they are written (malformed-checkpoint tests).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "io/safetensors_writer.h"

namespace mls::testing {

struct MtpTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
};

inline std::vector<std::byte> random_f32(int64_t n, float offset, float bound, std::mt19937& gen) {
  std::uniform_real_distribution<float> u(-bound, bound);
  std::vector<std::byte> out(static_cast<size_t>(n) * sizeof(float));
  for (int64_t i = 0; i < n; ++i) {
    const float v = offset + u(gen);
    std::memcpy(out.data() + i * sizeof(float), &v, sizeof(float));
  }
  return out;
}

inline void write_mtp_checkpoint(
    const std::filesystem::path& fixture, const std::filesystem::path& out, uint32_t seed,
    const std::function<void(std::vector<MtpTensor>&)>& edit = nullptr) {
  namespace fs = std::filesystem;
  fs::create_directories(out);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(fixture / "config.json"));
  config["num_nextn_predict_layers"] = 1;
  std::ofstream(out / "config.json") << config.dump(2);
  for (const char* extra : {"generation_config.json", "tokenizer.json", "tokenizer_config.json"})
    if (fs::exists(fixture / extra)) fs::copy_file(fixture / extra, out / extra);
  // Two files without an index: the checkpoint reads every *.safetensors of the directory.
  fs::copy_file(fixture / "model.safetensors", out / "model-00001-of-00002.safetensors");

  const int64_t n = config["num_hidden_layers"].get<int64_t>();
  const int64_t H = config["hidden_size"].get<int64_t>();
  const std::string last = "model.layers." + std::to_string(n - 1) + ".";
  const std::string mtp = "model.layers." + std::to_string(n) + ".";
  std::vector<MtpTensor> tensors;
  const io::SafetensorsFile main = io::SafetensorsFile::open(fixture / "model.safetensors");
  auto copy = [&](const io::TensorInfo& t, const std::string& from) {
    const auto* p = t.data;
    tensors.push_back({mtp + t.name.substr(from.size()), t.stored_dtype, t.shape,
                       std::vector<std::byte>(p, p + t.nbytes)});
  };
  for (const io::TensorInfo& t : main)
    if (t.name.starts_with(last)) copy(t, last);
  // An MTP layer owns an indexer on DSA models: when the last layer shares one (glm_moe_dsa),
  // the indexer of the latest layer that has one.
  const bool has_indexer = config.contains("index_n_heads");
  const auto owns = [](const MtpTensor& t) {
    return t.name.find(".indexer.") != std::string::npos;
  };
  for (int64_t L = n - 2;
       has_indexer && std::none_of(tensors.begin(), tensors.end(), owns) && L >= 0; --L) {
    const std::string from = "model.layers." + std::to_string(L) + ".";
    for (const io::TensorInfo& t : main)
      if (t.name.starts_with(from + "self_attn.indexer.")) copy(t, from);
  }
  std::mt19937 gen(seed);
  for (const char* norm : {"enorm.weight", "hnorm.weight", "shared_head.norm.weight"})
    tensors.push_back({mtp + norm, "F32", {H}, random_f32(H, 1.0f, 0.1f, gen)});
  tensors.push_back(
      {mtp + "eh_proj.weight",
       "F32",
       {H, 2 * H},
       random_f32(2 * H * H, 0.0f, std::sqrt(3.0f / static_cast<float>(2 * H)), gen)});
  if (edit) edit(tensors);
  std::vector<io::TensorData> data;
  for (const MtpTensor& t : tensors) data.push_back({t.name, t.dtype, t.shape, t.bytes});
  io::write_safetensors(out / "model-00002-of-00002.safetensors", data);
}

}  // namespace mls::testing
