// The CPU backend's copy of the model weights: every tensor converted once, at start-up, to
// fp32 (from bf16, fp16 or fp32 sources, read with memcpy since mapped safetensors data may be
// unaligned), with q/k/v and gate/up concatenated so that each takes one GEMM.
//
// Why fp32 at start-up rather than bf16 converted per GEMM: the CPU backend is the reference
// and runs models of tens of millions of parameters (tests, the demo), where twice the
// memory is small; converting per GEMM re-reads and widens every weight on every step, which
// on s4kv-tiny costs about as much as a whole decode step (bench/cpu_forward_bench.cc prints
// the conversion time next to the step times; bench/results/cpu_forward_s4kv-tiny.json).
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"
#include "model/weights.h"

namespace s4kv::backend::cpu {

struct CpuLayerWeights {
  std::vector<float> input_layernorm;  // [hidden_size]
  std::vector<float> qkv_proj;         // [(num_heads + 2 * num_kv_heads) * head_dim, hidden]
  std::vector<float> qkv_bias;         // [(num_heads + 2 * num_kv_heads) * head_dim]; empty
                                       // without qkv_bias
  std::vector<float> o_proj;           // [hidden_size, num_heads * head_dim]
  std::vector<float> post_attention_layernorm;  // [hidden_size]
  std::vector<float> gate_up_proj;              // [2 * intermediate_size, hidden_size]
  std::vector<float> down_proj;                 // [hidden_size, intermediate_size]
};

struct CpuWeights {
  std::vector<float> embed_tokens;  // [vocab_size, hidden_size]
  std::vector<CpuLayerWeights> layers;
  std::vector<float> norm;  // [hidden_size]
  // [vocab_size, hidden_size]; empty when tie_word_embeddings (the LM head is embed_tokens).
  std::vector<float> lm_head;

  const std::vector<float>& lm_head_matrix() const {
    return lm_head.empty() ? embed_tokens : lm_head;
  }
  int64_t num_bytes() const;
};

// Appends a tensor's values as fp32 to out. S4KV_CHECK on dtypes other than bf16/fp16/fp32
// (the loader refuses them before this point).
void append_as_f32(const model::TensorView& t, std::vector<float>& out);

// Converts every tensor the forward pass needs. The weights were checked against the config
// by load_weights; the returned copy does not refer to `weights` afterwards.
CpuWeights convert_weights(const model::ModelConfig& config, const model::ModelWeights& weights);

}  // namespace s4kv::backend::cpu
