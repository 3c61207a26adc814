// Writes safetensors files in the layout of the reference implementation (header padded with
// spaces to 8 bytes so that every tensor is aligned, tensors in the given order). Used to make
// synthetic models and, in tests, sharded copies of fixtures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace mls::io {

struct TensorData {
  std::string name;
  std::string dtype;  // safetensors spelling: "F32", "BF16", "F8_E4M3", ...
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;  // numel x element size, row-major
};

// Throws mls::InvalidArgument for an unknown dtype or a size that does not match the shape, and
// mls::IoError when the file cannot be written.
void write_safetensors(const std::filesystem::path& path, std::span<const TensorData> tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace mls::io
