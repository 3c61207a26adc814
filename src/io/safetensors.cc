#include "io/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/error.h"
#include "core/json.h"

namespace mls::io {
namespace {

using nlohmann::json;

struct StoredType {
  std::string_view name;
  std::optional<DType> dtype;
  uint64_t size;
};

constexpr StoredType kStoredTypes[] = {
    {"F32", DType::kF32, 4},         {"BF16", DType::kBF16, 2}, {"F16", DType::kF16, 2},
    {"F8_E4M3", DType::kFP8E4M3, 1}, {"I32", DType::kI32, 4},   {"I64", DType::kI64, 8},
    {"I8", std::nullopt, 1},         {"U8", std::nullopt, 1},   {"BOOL", std::nullopt, 1},
    {"F64", std::nullopt, 8},
};

const StoredType* find_stored_type(std::string_view name) {
  for (const StoredType& t : kStoredTypes)
    if (t.name == name) return &t;
  return nullptr;
}

// A JSON number that is a non-negative integer representable as int64 (shapes and offsets).
std::optional<uint64_t> as_count(const json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return u;
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < 0) return std::nullopt;
    return static_cast<uint64_t>(i);
  }
  return std::nullopt;
}

}  // namespace

std::optional<uint64_t> safetensors_dtype_size(std::string_view stored_dtype) {
  const StoredType* t = find_stored_type(stored_dtype);
  return t == nullptr ? std::nullopt : std::optional<uint64_t>(t->size);
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // the header check guarantees no overflow
  return n;
}

std::string format_shape(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile f;
  f.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) raise<IoError>("cannot open {}: {}", path.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    raise<IoError>("cannot stat {}: {}", path.string(), std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    raise<CheckpointError>("{}: not a regular file", path.string());
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    raise<CheckpointError>("{}: file is {} bytes, too short for the 8-byte header length",
                           path.string(), size);
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED)
    raise<IoError>("cannot mmap {}: {}", path.string(), std::strerror(map_err));
  f.map_ = map;
  f.map_size_ = size;
  f.parse_header();  // on throw, f's destructor unmaps
  return f;
}

void SafetensorsFile::parse_header() {
  const std::string file = path_.string();
  const auto* bytes = static_cast<const std::byte*>(map_);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | std::to_integer<uint64_t>(bytes[i]);
  // The reference implementation's bound: a larger header is corrupt, not a real checkpoint.
  constexpr uint64_t kMaxHeaderBytes = 100'000'000;
  if (header_len > kMaxHeaderBytes)
    raise<CheckpointError>("{}: header length {} exceeds the format's limit of {} bytes", file,
                           header_len, kMaxHeaderBytes);
  if (header_len > map_size_ - 8)
    raise<CheckpointError>("{}: header length {} exceeds the {} bytes after it (truncated file?)",
                           file, header_len, map_size_ - 8);
  const auto* header_begin = reinterpret_cast<const char*>(bytes + 8);
  const json header = parse_json<CheckpointError, json>(std::string_view(header_begin, header_len),
                                                        file + ": header");
  if (!header.is_object()) raise<CheckpointError>("{}: header is not a JSON object", file);

  const std::byte* data = bytes + 8 + header_len;
  const uint64_t data_size = map_size_ - 8 - header_len;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) raise<CheckpointError>("{}: __metadata__ is not a JSON object", file);
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string())
          raise<CheckpointError>("{}: __metadata__ value of '{}' is not a string", file, key);
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object())
      raise<CheckpointError>("{}: tensor {}: header entry is not a JSON object", file, name);
    const auto dtype_it = entry.find("dtype");
    const auto shape_it = entry.find("shape");
    const auto offsets_it = entry.find("data_offsets");
    if (dtype_it == entry.end() || !dtype_it->is_string())
      raise<CheckpointError>("{}: tensor {}: missing or non-string 'dtype'", file, name);
    if (shape_it == entry.end() || !shape_it->is_array())
      raise<CheckpointError>("{}: tensor {}: missing or non-array 'shape'", file, name);
    if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2)
      raise<CheckpointError>("{}: tensor {}: 'data_offsets' must be an array of two integers", file,
                             name);

    const std::string stored = dtype_it->get<std::string>();
    const StoredType* type = find_stored_type(stored);
    if (type == nullptr)
      raise<CheckpointError>("{}: tensor {}: unknown dtype '{}'", file, name, stored);

    TensorInfo t;
    t.name = name;
    t.dtype = type->dtype;
    t.stored_dtype = stored;
    t.file = file;
    uint64_t numel = 1;
    for (const json& d : *shape_it) {
      const std::optional<uint64_t> dim = as_count(d);
      if (!dim)
        raise<CheckpointError>(
            "{}: tensor {}: shape {} has an entry that is not a non-negative integer", file, name,
            shape_it->dump());
      if (__builtin_mul_overflow(numel, *dim, &numel) ||
          numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        raise<CheckpointError>("{}: tensor {}: shape {} overflows", file, name, shape_it->dump());
      t.shape.push_back(static_cast<int64_t>(*dim));
    }
    const std::optional<uint64_t> begin = as_count((*offsets_it)[0]);
    const std::optional<uint64_t> end = as_count((*offsets_it)[1]);
    if (!begin || !end || *begin > *end)
      raise<CheckpointError>("{}: tensor {}: invalid data_offsets {}", file, name,
                             offsets_it->dump());
    if (*end > data_size)
      raise<CheckpointError>(
          "{}: tensor {}: data_offsets [{}, {}] run past the {}-byte data region (truncated "
          "file?)",
          file, name, *begin, *end, data_size);
    uint64_t expected_bytes = 0;
    if (__builtin_mul_overflow(numel, type->size, &expected_bytes))
      raise<CheckpointError>("{}: tensor {}: shape {} overflows", file, name, shape_it->dump());
    if (*end - *begin != expected_bytes)
      raise<CheckpointError>(
          "{}: tensor {}: data_offsets [{}, {}] hold {} bytes but {} {} needs {}", file, name,
          *begin, *end, *end - *begin, stored, format_shape(t.shape), expected_bytes);
    t.data = data + *begin;
    t.nbytes = expected_bytes;
    tensors_.push_back(std::move(t));
  }

  // Gaps between tensors are tolerated (a writer may align them); overlaps would alias data.
  std::sort(tensors_.begin(), tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.data < b.data; });
  for (size_t i = 1; i < tensors_.size(); ++i) {
    const TensorInfo& prev = tensors_[i - 1];
    if (tensors_[i].data < prev.data + prev.nbytes)
      raise<CheckpointError>("{}: tensors {} and {} overlap in the data region", file, prev.name,
                             tensors_[i].name);
  }
  for (size_t i = 0; i < tensors_.size(); ++i) by_name_.emplace(tensors_[i].name, i);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_size_(std::exchange(other.map_size_, 0)),
      tensors_(std::move(other.tensors_)),
      by_name_(std::move(other.by_name_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    tensors_ = std::move(other.tensors_);
    by_name_ = std::move(other.by_name_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() {
  unmap();
}

void SafetensorsFile::unmap() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
  map_ = nullptr;
  map_size_ = 0;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace mls::io
