// The tensors a qwen2/llama model needs, by Hugging Face name, with the shapes its config
// implies. The loader checks a checkpoint against this list and dummy weights are made from
// it; it says nothing about dtypes or where tensors live.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/model_config.h"

namespace s4kv::model {

enum class TensorRole {
  kEmbedding,  // model.embed_tokens.weight, lm_head.weight
  kMatrix,     // projection weights
  kBias,       // q/k/v_proj.bias
  kNorm,       // RMSNorm weights
};

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;  // row-major, as stored by Hugging Face: [out_features, in_features]
  TensorRole role = TensorRole::kMatrix;
  // lm_head.weight with tie_word_embeddings: checked when present, never required or used
  // (the LM head is model.embed_tokens.weight, as transformers ties it).
  bool optional = false;
};

// Every tensor of the model, in forward order: embedding, layers 0..L-1, final norm, LM head.
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config);

// Buffers some exporters store that carry no weights (rotary_emb.inv_freq): skipped silently.
bool is_ignorable_tensor(std::string_view name);

}  // namespace s4kv::model
