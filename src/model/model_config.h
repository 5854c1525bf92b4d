// ModelConfig: the fields of a Hugging Face config.json that S4 KV serves, parsed and
// validated fail-fast. Anything outside the supported family (qwen2/llama, head_dim 128,
// standard MHA/GQA, RoPE plain or llama3-scaled, RMSNorm, SwiGLU, bf16/fp16/fp32) is refused
// with a message naming the field, the value found and what is supported. Field names keep
// their config.json spelling so messages can quote them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/json.h"
#include "common/status.h"

namespace s4kv::model {

enum class ModelType { kQwen2, kLlama };

// rope_scaling (legacy key) or rope_parameters (newer transformers); rope_type "llama3" or none.
struct RopeScaling {
  bool llama3 = false;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  ModelType model_type = ModelType::kQwen2;
  std::string model_type_name;  // "qwen2" | "llama"
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // explicit, or hidden_size / num_attention_heads
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  DType dtype = DType::kBF16;  // torch_dtype / dtype
  bool qkv_bias = false;       // qwen2: always; llama: never (attention_bias must be false)
  bool tie_word_embeddings = false;
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // eos_token_id: integer or list
};

// Parses and validates a config.json document. On failure returns every problem found, each
// one line such as "unsupported model: head_dim=64 (supported: 128)" or
// "invalid model config <source>: hidden_size: expected integer, found string \"4096\"".
// `source` names the file in messages. The first message is the one printed at start-up.
struct ConfigParse {
  std::optional<ModelConfig> config;  // set iff errors is empty
  std::vector<std::string> errors;
  StatusCode code = StatusCode::kOk;  // of errors[0]: kUnsupported, kInvalidArgument, kNotFound ...
};
ConfigParse parse_model_config(const Json& doc, const std::string& source);

// Reads <model_dir>/config.json and parses it, keeping every error (check-model lists them
// all). A missing directory or config.json is kNotFound naming the path; a file that is not
// valid JSON is refused naming the file.
ConfigParse read_model_config(const std::string& model_dir);

// read_model_config reduced to its first error: what start-up prints.
Result<ModelConfig> load_model_config(const std::string& model_dir);

// Number of parameters the checkpoint of a valid config holds: embeddings, per layer
// q/k/v/o (+ q/k/v bias), gate/up/down and two RMSNorm weights, the final norm, and the LM
// head unless tied. Used when no weight files are present.
int64_t count_parameters(const ModelConfig& config);

}  // namespace s4kv::model
