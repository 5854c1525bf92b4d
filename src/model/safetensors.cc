// Safetensors parsing and sharded-index resolution. Layout of a file: u64 little-endian
// header length N, N bytes of JSON header, then the data section that data_offsets index.
// Validation follows the reference implementation (huggingface/safetensors) where it is
// stricter than the format text: integers only, checked shape products, no overlaps.
#include "model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "common/dtype.h"
#include "common/json.h"

namespace s4kv::model {
namespace {

constexpr std::string_view kMetadataKey = "__metadata__";
// Headers nest at most three levels ({tensor: {shape: [..]}}); a little room, no more.
constexpr JsonLimits kHeaderJsonLimits{.max_depth = 8, .allow_duplicate_keys = false};

// A string as a JSON literal, escaped and shortened: tensor names come from the file.
std::string quoted(const std::string& s) { return json_brief(Json(s)); }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// A JSON integer >= 0 (nlohmann keeps big literals unsigned and negative ones signed).
std::optional<uint64_t> as_u64(const Json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

struct ParsedEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// Prefixes messages with the file and the tensor.
struct EntryContext {
  const std::string& file;
  const std::string& tensor;
  Status error(const std::string& what) const {
    return invalid_argument(file + ": tensor " + quoted(tensor) + ": " + what);
  }
};

Result<DType> parse_dtype(const EntryContext& ctx, const Json& entry) {
  auto it = entry.find("dtype");
  if (it == entry.end()) return ctx.error("missing \"dtype\"");
  if (!it->is_string()) return ctx.error("dtype must be a string, found " + json_brief(*it));
  std::optional<DType> dtype = dtype_from_safetensors(it->get<std::string>());
  if (!dtype) {
    return ctx.error("unknown dtype " + json_brief(*it) +
                     " (known: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL F8_E4M3 F8_E5M2)");
  }
  return *dtype;
}

// Shape entries and their product, refusing anything that does not fit in int64.
Result<std::vector<int64_t>> parse_shape(const EntryContext& ctx, const Json& entry,
                                         uint64_t* numel) {
  auto it = entry.find("shape");
  if (it == entry.end()) return ctx.error("missing \"shape\"");
  const std::string bad = "shape must be an array of non-negative integers, found ";
  if (!it->is_array()) return ctx.error(bad + json_brief(*it));
  std::vector<int64_t> shape;
  uint64_t product = 1;
  for (const Json& d : *it) {
    std::optional<uint64_t> dim = as_u64(d);
    if (!dim || *dim > static_cast<uint64_t>(INT64_MAX)) return ctx.error(bad + json_brief(*it));
    if (__builtin_mul_overflow(product, *dim, &product) || product > uint64_t{INT64_MAX}) {
      return ctx.error("shape " + json_brief(*it) + " has more elements than fit in 64 bits");
    }
    shape.push_back(static_cast<int64_t>(*dim));
  }
  *numel = product;
  return shape;
}

Status parse_offsets(const EntryContext& ctx, const Json& entry, uint64_t data_bytes,
                     ParsedEntry* out) {
  auto it = entry.find("data_offsets");
  if (it == entry.end()) return ctx.error("missing \"data_offsets\"");
  std::optional<uint64_t> begin, end;
  if (it->is_array() && it->size() == 2) {
    begin = as_u64((*it)[0]);
    end = as_u64((*it)[1]);
  }
  if (!begin || !end) {
    return ctx.error("data_offsets must be [begin, end] non-negative integers, found " +
                     json_brief(*it));
  }
  const std::string offsets = "data_offsets " + json_brief(*it);
  if (*begin > *end) return ctx.error(offsets + ": begin is after end");
  if (*end > data_bytes) {
    return ctx.error(offsets + ": end is beyond the data section of " + std::to_string(data_bytes) +
                     " bytes");
  }
  out->begin = *begin;
  out->end = *end;
  return Status::ok();
}

Result<ParsedEntry> parse_entry(const std::string& file, const std::string& name, const Json& entry,
                                uint64_t data_bytes) {
  const EntryContext ctx{file, name};
  if (!entry.is_object()) {
    return ctx.error("expected an object with dtype, shape and data_offsets, found " +
                     std::string(json_type_name(entry)));
  }
  ParsedEntry out;
  out.name = name;
  S4KV_ASSIGN_OR_RETURN(out.dtype, parse_dtype(ctx, entry));
  uint64_t numel = 0;
  S4KV_ASSIGN_OR_RETURN(out.shape, parse_shape(ctx, entry, &numel));
  S4KV_RETURN_IF_ERROR(parse_offsets(ctx, entry, data_bytes, &out));
  uint64_t needed = 0;
  const uint64_t held = out.end - out.begin;
  const bool overflow = __builtin_mul_overflow(numel, dtype_size(out.dtype), &needed);
  if (overflow || needed != held) {
    return ctx.error("data_offsets [" + std::to_string(out.begin) + ", " + std::to_string(out.end) +
                     "] hold " + std::to_string(held) + " bytes but shape " +
                     shape_text(out.shape) + " of " + std::string(dtype_name(out.dtype)) +
                     " needs " + (overflow ? "more than 2^64" : std::to_string(needed)));
  }
  return out;
}

Result<std::map<std::string, std::string>> parse_metadata(const std::string& file, const Json& v) {
  const std::string prefix = file + ": \"__metadata__\" must be an object of strings";
  if (!v.is_object()) return invalid_argument(prefix + ", found " + json_brief(v));
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string()) {
      return invalid_argument(prefix + "; key " + quoted(key) + " holds " +
                              std::string(json_type_name(value)) + " " + json_brief(value));
    }
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

// Tensors sorted by offset must each end before the next begins. Empty tensors occupy no
// bytes, but one sitting strictly inside another is refused (as the reference does).
Status check_overlaps(const std::string& file, std::vector<ParsedEntry>& entries) {
  std::sort(entries.begin(), entries.end(), [](const ParsedEntry& a, const ParsedEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < entries.size(); ++i) {
    const ParsedEntry& prev = entries[i - 1];
    const ParsedEntry& cur = entries[i];
    if (prev.end > cur.begin) {
      return invalid_argument(file + ": tensor " + quoted(cur.name) + ": data_offsets [" +
                              std::to_string(cur.begin) + ", " + std::to_string(cur.end) +
                              "] overlap tensor " + quoted(prev.name) + " at [" +
                              std::to_string(prev.begin) + ", " + std::to_string(prev.end) + "]");
    }
  }
  return Status::ok();
}

// Reads the length prefix and parses the header JSON; sets *data_start to the data section.
Result<Json> read_header(std::span<const std::byte> bytes, const std::string& name,
                         uint64_t* data_start) {
  if (bytes.size() < 8) {
    return invalid_argument(name + ": file is " + std::to_string(bytes.size()) +
                            " bytes, too short for the 8-byte header length");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  if (n > kMaxSafetensorsHeaderBytes) {
    return invalid_argument(name + ": header length " + std::to_string(n) +
                            " exceeds the limit of " + std::to_string(kMaxSafetensorsHeaderBytes) +
                            " bytes");
  }
  if (n > bytes.size() - 8) {
    return invalid_argument(name + ": header length " + std::to_string(n) + " exceeds the " +
                            std::to_string(bytes.size() - 8) + " bytes after the length field");
  }
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, n);
  S4KV_ASSIGN_OR_RETURN(Json header, parse_json(text, name + ": header", kHeaderJsonLimits));
  if (!header.is_object()) {
    return invalid_argument(name + ": header is a JSON " + std::string(json_type_name(header)) +
                            ", expected an object");
  }
  *data_start = 8 + n;
  return header;
}

// A shard name from an index must name a file beside it: no directories, no "..".
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name.find("..") == std::string::npos &&
         name.find_first_of(std::string("/\\\0", 3)) == std::string::npos;
}

std::string parent_dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// weight_map of an index: tensor name -> shard file name, every value checked.
Result<std::map<std::string, std::string>> parse_weight_map(const std::string& index,
                                                            const Json& doc) {
  if (!doc.is_object()) {
    return invalid_argument(index + ": expected a JSON object, found " +
                            std::string(json_type_name(doc)));
  }
  if (auto meta = doc.find("metadata"); meta != doc.end() && !meta->is_object()) {
    return invalid_argument(index + ": \"metadata\" must be an object, found " + json_brief(*meta));
  }
  auto it = doc.find("weight_map");
  if (it == doc.end() || !it->is_object()) {
    return invalid_argument(index + ": \"weight_map\" must be an object of tensor -> file");
  }
  std::map<std::string, std::string> out;
  for (const auto& [tensor, file] : it->items()) {
    if (!file.is_string() || !is_plain_file_name(file.get<std::string>())) {
      return invalid_argument(index + ": tensor " + quoted(tensor) + ": shard " + json_brief(file) +
                              " must be a plain file name in the model directory");
    }
    out.emplace(tensor, file.get<std::string>());
  }
  return out;
}

}  // namespace

Result<SafetensorsFile> SafetensorsFile::parse(std::span<const std::byte> bytes, std::string name) {
  uint64_t data_start = 0;
  S4KV_ASSIGN_OR_RETURN(Json header, read_header(bytes, name, &data_start));
  const std::span<const std::byte> data = bytes.subspan(data_start);
  SafetensorsFile file;
  std::vector<ParsedEntry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      S4KV_ASSIGN_OR_RETURN(file.metadata_, parse_metadata(name, value));
      continue;
    }
    S4KV_ASSIGN_OR_RETURN(ParsedEntry entry, parse_entry(name, key, value, data.size()));
    entries.push_back(std::move(entry));
  }
  // Duplicate names never get here: parse_json refuses duplicate keys.
  S4KV_RETURN_IF_ERROR(check_overlaps(name, entries));
  for (ParsedEntry& e : entries) {
    TensorView view;
    view.dtype = e.dtype;
    view.shape = std::move(e.shape);
    view.data = data.subspan(e.begin, e.end - e.begin);
    file.tensors_.emplace(std::move(e.name), std::move(view));
  }
  file.name_ = std::move(name);
  return file;
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  S4KV_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(path));
  auto map = std::make_shared<const MappedFile>(std::move(mapped));
  S4KV_ASSIGN_OR_RETURN(SafetensorsFile file, parse(map->bytes(), path));
  file.map_ = std::move(map);
  return file;
}

std::vector<std::string> SafetensorsFile::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, view] : tensors_) names.push_back(name);
  return names;
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Result<SafetensorsCheckpoint> SafetensorsCheckpoint::open_single(const std::string& path) {
  S4KV_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(path));
  SafetensorsCheckpoint ckpt;
  ckpt.name_ = path;
  for (const auto& [name, view] : file.tensors()) ckpt.tensors_.emplace(name, 0);
  ckpt.files_.push_back(std::move(file));
  return ckpt;
}

Result<SafetensorsCheckpoint> SafetensorsCheckpoint::open_index(const std::string& index_path) {
  S4KV_ASSIGN_OR_RETURN(Json doc, read_json_file(index_path, 64u << 20, kHeaderJsonLimits));
  S4KV_ASSIGN_OR_RETURN(auto weight_map, parse_weight_map(index_path, doc));
  const std::string dir = parent_dir(index_path);
  SafetensorsCheckpoint ckpt;
  ckpt.name_ = index_path;
  std::map<std::string, size_t> shard_index;  // shard file name -> files_ index
  for (const auto& [tensor, shard] : weight_map) {
    if (shard_index.count(shard)) continue;
    Result<SafetensorsFile> file = SafetensorsFile::open(dir + "/" + shard);
    if (!file.is_ok()) {
      return Status(file.status().code(), index_path + ": tensor " + quoted(tensor) +
                                              " is in shard " + quoted(shard) + ": " +
                                              file.status().message());
    }
    shard_index.emplace(shard, ckpt.files_.size());
    ckpt.files_.push_back(std::move(file).value());
  }
  // Every tensor of every shard: in one shard only, and listed by the index.
  for (size_t i = 0; i < ckpt.files_.size(); ++i) {
    for (const auto& [tensor, view] : ckpt.files_[i].tensors()) {
      auto [it, inserted] = ckpt.tensors_.emplace(tensor, i);
      if (!inserted) {
        return invalid_argument(index_path + ": tensor " + quoted(tensor) + " is in two shards, " +
                                ckpt.files_[it->second].name() + " and " + ckpt.files_[i].name());
      }
      if (!weight_map.count(tensor)) {
        return invalid_argument(index_path + ": tensor " + quoted(tensor) + " is in " +
                                ckpt.files_[i].name() + " but not in weight_map");
      }
    }
  }
  // Every listed tensor in the shard the index names.
  for (const auto& [tensor, shard] : weight_map) {
    const size_t want = shard_index.at(shard);
    auto found = ckpt.tensors_.find(tensor);
    if (found == ckpt.tensors_.end() || found->second != want) {
      return invalid_argument(
          index_path + ": tensor " + quoted(tensor) + " is listed in shard " + quoted(shard) +
          " but " + ckpt.files_[want].name() + " does not hold it" +
          (found == ckpt.tensors_.end() ? ""
                                        : " (it is in " + ckpt.files_[found->second].name() + ")"));
    }
  }
  return ckpt;
}

const TensorView* SafetensorsCheckpoint::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : files_[it->second].find(name);
}

const std::string& SafetensorsCheckpoint::file_of(const std::string& name) const {
  auto it = tensors_.find(name);
  S4KV_CHECK(it != tensors_.end(), "file_of: no tensor ", name);
  return files_[it->second].name();
}

}  // namespace s4kv::model
