// Rotary position embedding (RoPE), CPU reference, in the "rotate half" (GPT-NeoX) layout the
// Hugging Face qwen2/llama checkpoints use: channel i pairs with channel i + head_dim/2.
//
// The inverse frequencies follow transformers' modeling_rope_utils step by step in fp32 (the
// dtype it computes them in), so angles match it to the last bit or one: rope_type "default"
// and "llama3". cos/sin of the fp32 angle pos * inv_freq are computed in double and rounded
// (torch's fp32 cos/sin are within 1 ulp of that). Keys are rotated here before kv_write
// rounds them to 16 bits, so the bits stored match a transformers run closely.
//
// rope_ref computes cos/sin per token and is the reference; rope, which the forward pass runs,
// reads them from a RopeTable (rope_table.h), whose entries are the same expression evaluated
// once per position, and spreads the rows over the backend's thread pool: the same bits as
// rope_ref for any thread count (tests/backend/cpu_ops_test.cc compares them).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/rope_table.h"
#include "model/model_config.h"

namespace s4kv::backend::cpu {

class ThreadPool;

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

// rope_ref's rotation with cos/sin rows from table, which must hold every position (grow it
// with RopeTable::ensure first; checked). Rows are split into contiguous runs of tokens over
// pool's threads (nullptr: the calling thread); q and k heads of a fused qkv row are adjacent,
// so one call with num_heads = num_attention_heads + num_key_value_heads rotates both.
void rope(std::span<float> x, int64_t row_stride, int64_t num_heads, int64_t head_dim,
          std::span<const int32_t> positions, const RopeTable& table, ThreadPool* pool);

}  // namespace s4kv::backend::cpu
