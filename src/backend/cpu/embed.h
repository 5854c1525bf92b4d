// Token embedding lookup, CPU reference: out[t] = table[token_ids[t]].
#pragma once

#include <cstdint>
#include <span>

namespace s4kv::backend::cpu {

struct WeightMatrix;

// table: [vocab_size, hidden_size] fp32; token_ids: [num_tokens] in 0..vocab_size-1
// (S4KV_CHECK); out: [num_tokens, hidden_size] fp32.
void embed_ref(std::span<const float> table, int64_t hidden_size,
               std::span<const int32_t> token_ids, std::span<float> out);

// The same from a weight matrix of any dtype (cpu_weights.h), rows widened to fp32.
void embed(const WeightMatrix& table, std::span<const int32_t> token_ids, std::span<float> out);

}  // namespace s4kv::backend::cpu
