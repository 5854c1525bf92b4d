// Paged attention over the 16-bit KV cache, CPU reference. For every sequence of a flat batch
// and every query head h (GQA: kv head h / (num_heads / num_kv_heads)), the new token j of a
// sequence with q_len new tokens and seq_len context attends to cache positions
// 0..seq_len - q_len + j (causal within the new tokens), reading K and V from the blocks of
// the sequence's block table: exactly the 16-bit values kv_write stored, its own included.
// Softmax in fp32 with max subtraction; scores scaled by `scale` (1/sqrt(head_dim)).
#pragma once

#include <cstdint>
#include <span>

#include "common/dtype.h"

namespace s4kv::backend::cpu {

class ThreadPool;

struct PagedAttentionArgs {
  std::span<const float> q;  // [num_tokens, q_stride] fp32, heads first: num_heads * head_dim
  int64_t q_stride = 0;
  std::span<const uint16_t> k_cache;  // [num_blocks, block_size, num_kv_heads, head_dim] 16-bit
  std::span<const uint16_t> v_cache;  // like k_cache
  DType cache_dtype = DType::kBF16;
  int64_t block_size = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 0.0f;
  std::span<const int32_t> query_start_loc;  // [num_seqs + 1]
  std::span<const int32_t> seq_lens;         // [num_seqs]
  std::span<const int32_t> block_tables;     // [num_seqs, max_num_blocks_per_seq]
  int64_t max_num_blocks_per_seq = 0;
  std::span<float> out;  // [num_tokens, num_heads * head_dim] fp32
};

// Work is split over (sequence, kv head, chunk of queries) items on pool (nullptr: inline).
void paged_attention_ref(const PagedAttentionArgs& args, ThreadPool* pool);

}  // namespace s4kv::backend::cpu
