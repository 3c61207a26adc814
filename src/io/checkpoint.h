// A Hugging Face checkpoint directory: one or more safetensors files seen as one name -> tensor
// map, and the weight reader that turns a (possibly block-FP8, possibly sharded) tensor into
// float32 for the rows and columns one tensor-parallel rank owns.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "io/safetensors.h"

namespace mls::io {

// A range of one dimension: [start, start + len); len = -1 means "to the end".
struct Slice {
  int64_t start = 0;
  int64_t len = -1;
};

class Checkpoint {
 public:
  // Opens `dir`: the files named by model.safetensors.index.json when it exists, else
  // model.safetensors, else every *.safetensors in the directory. Each file is mapped once.
  // Throws mls::CheckpointError (missing directory, no safetensors, an index naming a missing
  // file or a tensor its file lacks, a tensor in two files) and whatever SafetensorsFile::open
  // throws for a malformed file.
  static Checkpoint open(const std::filesystem::path& dir);

  Checkpoint(Checkpoint&&) noexcept = default;
  Checkpoint& operator=(Checkpoint&&) noexcept = default;

  const std::filesystem::path& dir() const { return dir_; }
  bool has(std::string_view name) const;
  // Throws mls::CheckpointError naming the tensor and the directory when absent.
  const TensorInfo& info(std::string_view name) const;
  std::vector<std::string> names() const;  // sorted
  const std::vector<SafetensorsFile>& files() const { return files_; }

  // The quantisation block of FP8 weights (config weight_block_size); 128 x 128 by default.
  void set_fp8_block_size(int64_t block_rows, int64_t block_cols);

  // Writes rows x cols of tensor `name` as row-major contiguous float32 into `out`
  // (rows.len x cols.len values; 1-D tensors take rows only, dimensions after the second stay
  // whole). The tensor's full shape must equal `expected_full_shape`. When the checkpoint holds
  // `name + "_scale_inv"` the weight is block-FP8 and is dequantised as
  // W[i, j] = q[i, j] * s[i / B0, j / B1] in global coordinates. Only the selected elements
  // (and their scales) are read.
  void read_f32(std::string_view name, std::span<const int64_t> expected_full_shape, float* out,
                Slice rows = {}, Slice cols = {}) const;
  void read_f32(std::string_view name, std::initializer_list<int64_t> expected_full_shape,
                float* out, Slice rows = {}, Slice cols = {}) const {
    read_f32(name,
             std::span<const int64_t>(expected_full_shape.begin(), expected_full_shape.size()), out,
             rows, cols);
  }

  // Copies the same sub-block as read_f32 without conversion (e.g. FP8 codes and their scales
  // for a GPU GEMM). The tensor's dtype must be `expected_dtype`.
  void read_raw(std::string_view name, DType expected_dtype,
                std::span<const int64_t> expected_full_shape, void* out, Slice rows = {},
                Slice cols = {}) const;

 private:
  Checkpoint() = default;
  const TensorInfo* find(std::string_view name) const;
  void check_shape(const TensorInfo& t, std::span<const int64_t> expected) const;

  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  std::filesystem::path dir_;
  std::vector<SafetensorsFile> files_;
  // Points into files_' tensor lists, which stay put when files_ moves.
  std::unordered_map<std::string, const TensorInfo*, NameHash, std::equal_to<>> tensors_;
  int64_t block_rows_ = 128;
  int64_t block_cols_ = 128;
};

}  // namespace mls::io
