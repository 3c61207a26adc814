// One safetensors file, memory-mapped read-only and validated up front, so that a corrupt or
// truncated checkpoint fails at open time with the file and tensor named, never later as a
// crash inside a kernel.
//
// Format: 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {"k": "v"}}, then the data region; offsets are relative to its start.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"

namespace mls::io {

struct TensorInfo {
  std::string name;
  // The element type, or nullopt for types that are mapped and listed but that mlaserve never
  // converts (I8, U8, BOOL, F64): reading such a tensor raises mls::Unsupported.
  std::optional<DType> dtype;
  std::string stored_dtype;  // as spelled in the file: "BF16", "F8_E4M3", "F64", ...
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;  // into the file mapping; valid while the file is open
  uint64_t nbytes = 0;
  std::string file;  // path of the file that holds it, for messages

  int64_t numel() const;
};

// Element size of a safetensors dtype spelling ("BF16" -> 2), nullopt for one this reader rejects.
std::optional<uint64_t> safetensors_dtype_size(std::string_view stored_dtype);

// "[384, 96]", the spelling every shape message uses.
std::string format_shape(const std::vector<int64_t>& shape);

class SafetensorsFile {
 public:
  // Maps and validates the file. Throws mls::IoError when the OS cannot open or map it and
  // mls::CheckpointError when its content is malformed; both name the file.
  static SafetensorsFile open(const std::filesystem::path& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::filesystem::path& path() const { return path_; }
  // nullptr when the file has no tensor of that name.
  const TensorInfo* find(std::string_view name) const;
  // In the order of their data offsets.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  std::vector<TensorInfo>::const_iterator begin() const { return tensors_.begin(); }
  std::vector<TensorInfo>::const_iterator end() const { return tensors_.end(); }
  size_t size() const { return tensors_.size(); }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  void parse_header();
  void unmap();

  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  std::filesystem::path path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t, NameHash, std::equal_to<>> by_name_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace mls::io
