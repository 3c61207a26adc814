#include "io/checkpoint.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <system_error>

#include "core/error.h"
#include "core/json.h"

namespace fs = std::filesystem;

namespace mls::io {
namespace {

using nlohmann::json;

constexpr std::string_view kIndexName = "model.safetensors.index.json";
constexpr std::string_view kSingleName = "model.safetensors";
constexpr std::string_view kScaleSuffix = "_scale_inv";

std::string shape_string(std::span<const int64_t> shape) {
  return format_shape(std::vector<int64_t>(shape.begin(), shape.end()));
}

// The tensor seen as [rows, cols, inner]: dim 0, dim 1 and the product of the rest, with the
// requested row and column ranges resolved against it.
struct Block {
  int64_t cols = 1;
  int64_t inner = 1;
  int64_t row0 = 0, nrows = 0;
  int64_t col0 = 0, ncols = 0;
};

void resolve(const TensorInfo& t, Slice s, int64_t extent, std::string_view what, int64_t* start,
             int64_t* len) {
  const int64_t n = s.len == -1 ? extent - s.start : s.len;
  if (s.start < 0 || n < 0 || s.start > extent || n > extent - s.start)
    raise<ShapeError>("{} in {}: {} slice (start {}, len {}) is outside its extent {}", t.name,
                      t.file, what, s.start, s.len, extent);
  *start = s.start;
  *len = n;
}

Block make_block(const TensorInfo& t, Slice rows, Slice cols) {
  const size_t rank = t.shape.size();
  if (rank < 2 && (cols.start != 0 || cols.len != -1))
    raise<ShapeError>("{} in {}: column slice requested from a {}-D tensor", t.name, t.file, rank);
  Block b;
  const int64_t nrows = rank >= 1 ? t.shape[0] : 1;
  b.cols = rank >= 2 ? t.shape[1] : 1;
  for (size_t d = 2; d < rank; ++d) b.inner *= t.shape[d];
  resolve(t, rows, nrows, "row", &b.row0, &b.nrows);
  resolve(t, cols, b.cols, "column", &b.col0, &b.ncols);
  return b;
}

const std::array<float, 256>& fp8_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = fp8e4m3_to_f32(static_cast<uint8_t>(i));
    return t;
  }();
  return table;
}

json read_json_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) raise<CheckpointError>("cannot read {}", path.string());
  const std::string text(std::istreambuf_iterator<char>(in), {});
  return parse_json<CheckpointError, json>(text, path.string());
}

}  // namespace

Checkpoint Checkpoint::open(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    raise<CheckpointError>("checkpoint directory {} does not exist or is not a directory",
                           dir.string());
  Checkpoint ck;
  ck.dir_ = dir;

  const fs::path index_path = dir / kIndexName;
  if (fs::exists(index_path, ec)) {
    const json index = read_json_file(index_path);
    const auto map_it = index.is_object() ? index.find("weight_map") : index.end();
    if (map_it == index.end() || !map_it->is_object())
      raise<CheckpointError>("{}: missing 'weight_map' object", index_path.string());
    std::map<std::string, std::vector<std::string>> names_by_file;
    for (const auto& [name, file] : map_it->items()) {
      if (!file.is_string())
        raise<CheckpointError>("{}: weight_map entry of {} is not a file name", index_path.string(),
                               name);
      names_by_file[file.get<std::string>()].push_back(name);
    }
    ck.files_.reserve(names_by_file.size());
    for (const auto& [file, names] : names_by_file) {
      const fs::path path = dir / file;
      if (!fs::is_regular_file(path, ec))
        raise<CheckpointError>("{} maps {} (and {} other tensors) to {}, which does not exist",
                               index_path.string(), names.front(), names.size() - 1, path.string());
      const SafetensorsFile& f = ck.files_.emplace_back(SafetensorsFile::open(path));
      for (const std::string& name : names) {
        const TensorInfo* t = f.find(name);
        if (t == nullptr)
          raise<CheckpointError>("{} maps {} to {}, but that file has no such tensor",
                                 index_path.string(), name, path.string());
        ck.tensors_.emplace(name, t);
      }
    }
    return ck;
  }

  std::vector<fs::path> paths;
  if (fs::is_regular_file(dir / kSingleName, ec)) {
    paths.push_back(dir / kSingleName);
  } else {
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
      if (e.is_regular_file(ec) && e.path().extension() == ".safetensors")
        paths.push_back(e.path());
    if (ec) raise<CheckpointError>("cannot list {}: {}", dir.string(), ec.message());
    std::sort(paths.begin(), paths.end());
  }
  if (paths.empty())
    raise<CheckpointError>("{}: no {}, {} or other *.safetensors file", dir.string(), kIndexName,
                           kSingleName);
  ck.files_.reserve(paths.size());
  for (const fs::path& path : paths) {
    const SafetensorsFile& f = ck.files_.emplace_back(SafetensorsFile::open(path));
    for (const TensorInfo& t : f) {
      const auto [it, inserted] = ck.tensors_.emplace(t.name, &t);
      if (!inserted)
        raise<CheckpointError>("{}: tensor {} is in both {} and {}", dir.string(), t.name,
                               it->second->file, t.file);
    }
  }
  return ck;
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

bool Checkpoint::has(std::string_view name) const {
  return find(name) != nullptr;
}

const TensorInfo& Checkpoint::info(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (t == nullptr)
    raise<CheckpointError>("tensor {} not found in checkpoint {}", name, dir_.string());
  return *t;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

void Checkpoint::set_fp8_block_size(int64_t block_rows, int64_t block_cols) {
  if (block_rows <= 0 || block_cols <= 0)
    raise<ConfigError>("FP8 weight_block_size must be positive, got [{}, {}]", block_rows,
                       block_cols);
  block_rows_ = block_rows;
  block_cols_ = block_cols;
}

void Checkpoint::check_shape(const TensorInfo& t, std::span<const int64_t> expected) const {
  if (!std::equal(t.shape.begin(), t.shape.end(), expected.begin(), expected.end()))
    raise<CheckpointError>("{} in {}: expected shape {}, found {}", t.name, t.file,
                           shape_string(expected), format_shape(t.shape));
}

void Checkpoint::read_raw(std::string_view name, DType expected_dtype,
                          std::span<const int64_t> expected_full_shape, void* out, Slice rows,
                          Slice cols) const {
  const TensorInfo& t = info(name);
  check_shape(t, expected_full_shape);
  if (t.dtype != expected_dtype)
    raise<CheckpointError>("{} in {}: expected dtype {}, found {}", t.name, t.file,
                           dtype_name(expected_dtype), t.stored_dtype);
  const Block b = make_block(t, rows, cols);
  const size_t elem = dtype_size(expected_dtype);
  const size_t row_stride = static_cast<size_t>(b.cols * b.inner) * elem;
  const size_t row_bytes = static_cast<size_t>(b.ncols * b.inner) * elem;
  const std::byte* src = t.data + static_cast<size_t>(b.row0) * row_stride +
                         static_cast<size_t>(b.col0 * b.inner) * elem;
  auto* dst = static_cast<std::byte*>(out);
  for (int64_t i = 0; i < b.nrows; ++i)
    std::memcpy(dst + static_cast<size_t>(i) * row_bytes, src + static_cast<size_t>(i) * row_stride,
                row_bytes);
}

void Checkpoint::read_f32(std::string_view name, std::span<const int64_t> expected_full_shape,
                          float* out, Slice rows, Slice cols) const {
  const TensorInfo& t = info(name);
  check_shape(t, expected_full_shape);
  if (!t.dtype)
    raise<Unsupported>("{} in {} has dtype {}, which mlaserve does not load", t.name, t.file,
                       t.stored_dtype);
  const DType dtype = *t.dtype;
  if (!dtype_is_float(dtype))
    raise<CheckpointError>("{} in {}: expected a floating-point tensor, found {}", t.name, t.file,
                           t.stored_dtype);
  const Block b = make_block(t, rows, cols);
  const size_t elem = dtype_size(dtype);
  const size_t row_stride = static_cast<size_t>(b.cols * b.inner) * elem;
  const size_t row_len = static_cast<size_t>(b.ncols * b.inner);
  const std::byte* src = t.data + static_cast<size_t>(b.row0) * row_stride +
                         static_cast<size_t>(b.col0 * b.inner) * elem;

  const std::string scale_name = std::string(name) + std::string(kScaleSuffix);
  const TensorInfo* scale = find(scale_name);
  if (scale == nullptr) {
    if (dtype == DType::kFP8E4M3)
      raise<CheckpointError>("{} in {} is F8_E4M3 but the checkpoint has no {}", t.name, t.file,
                             scale_name);
    for (int64_t i = 0; i < b.nrows; ++i)
      convert_to_f32(src + static_cast<size_t>(i) * row_stride, dtype, out + i * row_len, row_len);
    return;
  }

  if (dtype != DType::kFP8E4M3 || t.shape.size() != 2)
    raise<CheckpointError>("{} in {} has a {} but is {} {}, not a 2-D F8_E4M3 weight", t.name,
                           t.file, scale_name, t.stored_dtype, format_shape(t.shape));
  const int64_t scale_shape[] = {(t.shape[0] + block_rows_ - 1) / block_rows_,
                                 (t.shape[1] + block_cols_ - 1) / block_cols_};
  check_shape(*scale, scale_shape);
  if (!scale->dtype || !dtype_is_float(*scale->dtype))
    raise<CheckpointError>("{} in {}: expected a floating-point scale, found {}", scale->name,
                           scale->file, scale->stored_dtype);
  if (b.nrows == 0 || b.ncols == 0) return;

  // The scale blocks this column range touches, read once per block row.
  const int64_t first_block_col = b.col0 / block_cols_;
  const int64_t n_block_cols = (b.col0 + b.ncols - 1) / block_cols_ - first_block_col + 1;
  const size_t scale_elem = dtype_size(*scale->dtype);
  std::vector<float> scale_row(static_cast<size_t>(n_block_cols));
  int64_t loaded_block_row = -1;
  const std::array<float, 256>& table = fp8_table();
  for (int64_t i = 0; i < b.nrows; ++i) {
    const int64_t block_row = (b.row0 + i) / block_rows_;
    if (block_row != loaded_block_row) {
      const std::byte* s =
          scale->data +
          static_cast<size_t>(block_row * scale_shape[1] + first_block_col) * scale_elem;
      convert_to_f32(s, *scale->dtype, scale_row.data(), scale_row.size());
      loaded_block_row = block_row;
    }
    const auto* q = reinterpret_cast<const uint8_t*>(src + static_cast<size_t>(i) * row_stride);
    float* dst = out + i * b.ncols;
    for (int64_t j = 0; j < b.ncols; ++j)
      dst[j] = table[q[j]] *
               scale_row[static_cast<size_t>((b.col0 + j) / block_cols_ - first_block_col)];
  }
}

}  // namespace mls::io
