// The CPU backend's copy of the model weights, made once at start-up: matrices in the
// checkpoint's dtype (bf16 and fp16 kept 16-bit, fp32 as fp32; copied, since mapped safetensors
// data may be unaligned), with q/k/v and gate/up concatenated so that each takes one GEMM; the
// norms' small vectors and biases in fp32.
//
// Why 16-bit: decode reads every weight once per step, so its speed is the weights' bytes over
// the memory bandwidth; 16-bit halves them (s4kv-tiny's 37 MB then fit a 32 MB L3 nearly whole).
// linear() widens each weight to fp32 exactly in registers (gemm16.h), so the products are the
// fp32 ones; only the summation order differs from an fp32 GEMM.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"
#include "model/weights.h"

namespace s4kv::backend::cpu {

// A weight matrix [rows, cols], row-major (Hugging Face's [out_features, in_features]), in
// the checkpoint's dtype: bf16 / fp16 in h16, fp32 in f32 (the other vector empty).
struct WeightMatrix {
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint16_t> h16;
  std::vector<float> f32;

  bool is_16bit() const { return dtype == DType::kBF16 || dtype == DType::kF16; }
  // Appends t's rows (t: [r, cols], or [cols] as one row). Tensors of different dtypes in one
  // matrix make it fp32. S4KV_CHECK on dtypes other than bf16/fp16/fp32 or a column mismatch.
  void append(const model::TensorView& t);
  // Row r as fp32 into out[0, cols).
  void row_as_f32(int64_t r, float* out) const;
  int64_t num_bytes() const;
};

struct CpuLayerWeights {
  std::vector<float> input_layernorm;  // [hidden_size]
  WeightMatrix qkv_proj;               // [(num_heads + 2 * num_kv_heads) * head_dim, hidden]
  std::vector<float> qkv_bias;         // [(num_heads + 2 * num_kv_heads) * head_dim]; empty
                                       // without qkv_bias
  WeightMatrix o_proj;                 // [hidden_size, num_heads * head_dim]
  std::vector<float> post_attention_layernorm;  // [hidden_size]
  WeightMatrix gate_up_proj;                    // [2 * intermediate_size, hidden_size]
  WeightMatrix down_proj;                       // [hidden_size, intermediate_size]
};

struct CpuWeights {
  WeightMatrix embed_tokens;  // [vocab_size, hidden_size]
  std::vector<CpuLayerWeights> layers;
  std::vector<float> norm;  // [hidden_size]
  // [vocab_size, hidden_size]; empty when tie_word_embeddings (the LM head is embed_tokens).
  WeightMatrix lm_head;

  const WeightMatrix& lm_head_matrix() const { return lm_head.rows == 0 ? embed_tokens : lm_head; }
  int64_t num_bytes() const;
};

// Appends a tensor's values as fp32 to out. S4KV_CHECK on dtypes other than bf16/fp16/fp32
// (the loader refuses them before this point).
void append_as_f32(const model::TensorView& t, std::vector<float>& out);

// Converts every tensor the forward pass needs. The weights were checked against the config
// by load_weights; the returned copy does not refer to `weights` afterwards.
CpuWeights convert_weights(const model::ModelConfig& config, const model::ModelWeights& weights);

}  // namespace s4kv::backend::cpu
