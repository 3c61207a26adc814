#include "io/safetensors_writer.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"

namespace mls::io {

void write_safetensors(const std::filesystem::path& path, std::span<const TensorData> tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorData& t : tensors) {
    const std::optional<uint64_t> elem = safetensors_dtype_size(t.dtype);
    if (!elem)
      raise<InvalidArgument>("{}: tensor {} has unknown dtype '{}'", path.string(), t.name,
                             t.dtype);
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    if (numel * *elem != t.bytes.size())
      raise<InvalidArgument>("{}: tensor {} is {} {} but has {} bytes", path.string(), t.name,
                             t.dtype, format_shape(t.shape), t.bytes.size());
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) raise<IoError>("cannot create {}", path.string());
  const uint64_t len = text.size();
  char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  out.write(len_bytes, 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const TensorData& t : tensors)
    out.write(reinterpret_cast<const char*>(t.bytes.data()),
              static_cast<std::streamsize>(t.bytes.size()));
  out.close();
  if (!out) raise<IoError>("error writing {}", path.string());
}

}  // namespace mls::io
