// Rotary position embedding (RoPE), CPU reference, in the "rotate half" (GPT-NeoX) layout the
// Hugging Face qwen2/llama checkpoints use: channel i pairs with channel i + head_dim/2.
//
// The inverse frequencies follow transformers' modeling_rope_utils step by step in fp32 (the
// dtype it computes them in), so angles match it to the last bit or one: rope_type "default"
// and "llama3". cos/sin of the fp32 angle pos * inv_freq are computed in double and rounded
// (torch's fp32 cos/sin are within 1 ulp of that). Keys are rotated here before kv_write
// rounds them to 16 bits, so the bits stored match a transformers run closely.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/model_config.h"

namespace s4kv::backend::cpu {

// [head_dim / 2] fp32 inverse frequencies for rope_theta and rope_scaling of config.
std::vector<float> rope_inv_freq(const model::ModelConfig& config);

// The same from explicit parameters (rope_scaling.llama3 false: plain RoPE).
std::vector<float> rope_inv_freq(int64_t head_dim, double rope_theta,
                                 const model::RopeScaling& scaling);

// Rotates, in place, heads [0, num_heads) of every row of x: row t starts at
// x[t * row_stride] and holds num_heads * head_dim values, rotated by angle positions[t] *
// inv_freq. x: [num_tokens, row_stride] fp32 (row_stride >= num_heads * head_dim);
// positions: [num_tokens]; inv_freq: [head_dim / 2].
void rope_ref(std::span<float> x, int64_t row_stride, int64_t num_heads, int64_t head_dim,
              std::span<const int32_t> positions, std::span<const float> inv_freq);

}  // namespace s4kv::backend::cpu
