// Model weights: every tensor the forward pass needs, by Hugging Face name, checked against
// the shapes the config implies. Real weights are memory-mapped safetensors (zero copy);
// `dummy` weights are deterministic random values for a config without weight files (as
// vLLM's --load-format dummy). Loading either succeeds completely or fails with one error
// naming the file and tensor: a model is never partly loaded.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/dtype.h"
#include "common/status.h"
#include "model/model_config.h"

namespace s4kv::model {

enum class LoadFormat { kAuto, kDummy };

// A view of one tensor's bytes, row-major. Valid while its ModelWeights lives.
struct TensorView {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;  // host memory: a file map or an owned buffer
  int64_t numel() const;

  // The elements as a typed vector (copied: file data may be unaligned for T). sizeof(T) must
  // equal the dtype's size (S4KV_CHECK).
  template <typename T>
  std::vector<T> to_vector() const {
    S4KV_CHECK(sizeof(T) == dtype_size(dtype), "TensorView::to_vector: element size mismatch");
    std::vector<T> v(static_cast<size_t>(numel()));
    if (!v.empty()) std::memcpy(v.data(), data.data(), v.size() * sizeof(T));
    return v;
  }
};

class ModelWeights {
 public:
  const TensorView& get(const std::string& name) const;  // S4KV_CHECK that it exists
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  int64_t num_parameters() const;

 private:
  friend class WeightsBuilder;
  std::map<std::string, TensorView> tensors_;
  std::vector<std::shared_ptr<const void>> storage_;  // keeps maps and buffers alive
};

// True when model_dir holds model.safetensors or model.safetensors.index.json.
bool has_weight_files(const std::string& model_dir);

// Loads the weights of model_dir for config. kAuto reads safetensors (single or sharded);
// kDummy fills every expected tensor with deterministic values derived from seed.
Result<ModelWeights> load_weights(const std::string& model_dir, const ModelConfig& config,
                                  LoadFormat format, uint64_t seed = 0);

}  // namespace s4kv::model
