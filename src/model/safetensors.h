// Safetensors reader: one file (memory-mapped, zero copy) or a sharded checkpoint listed by
// model.safetensors.index.json. The header is untrusted input and is validated completely
// before any tensor is handed out: header length, JSON shape, dtype names, shapes (no
// overflow), byte lengths, bounds and overlaps. Every error is a Status naming the file and,
// where there is one, the tensor. Never aborts on a malformed file (it has a fuzz target).
// Tensor data may be unaligned for its dtype when a writer packs tensors tightly; callers
// that need aligned loads copy. Does not check which tensors a model needs (weights.cc does).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/file.h"
#include "common/status.h"
#include "model/weights.h"

namespace s4kv::model {

// Largest header accepted, as the reference implementation (100 MB).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

class SafetensorsFile {
 public:
  // Maps path and parses it. Messages name the file by `path` as given.
  static Result<SafetensorsFile> open(const std::string& path);

  // Parses a whole file's bytes; `name` labels messages. The views returned by find() point
  // into `bytes`, which must outlive this object (open() keeps its map alive itself).
  static Result<SafetensorsFile> parse(std::span<const std::byte> bytes, std::string name);

  const std::string& name() const { return name_; }
  // Tensor names, sorted.
  std::vector<std::string> tensor_names() const;
  // nullptr when the file has no tensor of that name.
  const TensorView* find(const std::string& name) const;
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  // The "__metadata__" entries (string values only); empty when absent.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Owner of the mapped bytes (null for parse()); ModelWeights holds it to keep views valid.
  std::shared_ptr<const MappedFile> mapping() const { return map_; }

 private:
  std::string name_;
  std::shared_ptr<const MappedFile> map_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// The tensors of a whole checkpoint: a single file or every shard of an index.
class SafetensorsCheckpoint {
 public:
  // One model.safetensors (or any single file).
  static Result<SafetensorsCheckpoint> open_single(const std::string& path);
  // model.safetensors.index.json: {"metadata": {...}, "weight_map": {tensor: shard file}}.
  // Shard names must be plain file names beside the index; each shard is opened once; every
  // tensor must sit in the shard the map names, in one shard only, and every tensor of every
  // shard must be listed.
  static Result<SafetensorsCheckpoint> open_index(const std::string& index_path);

  const std::vector<SafetensorsFile>& files() const { return files_; }
  // Every tensor name -> index into files(). Indices, not pointers: moves stay safe.
  const std::map<std::string, size_t>& tensors() const { return tensors_; }
  // nullptr when absent.
  const TensorView* find(const std::string& name) const;
  // Name of the file holding `name`; S4KV_CHECK that it exists.
  const std::string& file_of(const std::string& name) const;
  // What messages call the checkpoint: the single file or the index path.
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> tensors_;
};

}  // namespace s4kv::model
