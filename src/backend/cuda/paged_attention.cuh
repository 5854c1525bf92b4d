// Paged attention on the device for every KV cache dtype, the first (simple, exact-first)
// version: one thread block of four warps per (query token, query head); each warp walks every
// fourth context position with its own online softmax (lane l owns channels l, l+32, l+64,
// l+96, so RoPE's channel pairs stay in a lane), then the warps merge through shared memory.
// Decode rows (q_len 1) and prefill / chunked-prefill rows (causal over the cached context
// plus the chunk) run in one launch, grouped-query heads read their kv head. The cache is read
// in place, in its own format:
//   16-bit / fp8_e4m3: the paged rows kv_write stored (the step's tokens included);
//   int4_kivi (docs/kv-format.md): full pool blocks dequantized in registers (keys rotated
//   with the shared RoPE table unless keys_post_rope; values in the Hadamard domain for v2,
//   summed apart and rotated back once per head), sink blocks and the window block 16-bit,
//   the tail from the residual ring, the step's own tokens from staging.
// Reference: backend/cpu/attention.h context_attention_ref with each CPU cache's gather;
// tested through the whole-backend equivalence test. head_dim 128 only (what is served).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"
#include "kv/int4_kivi_layout.h"
#include "kv/kv_format.h"

namespace s4kv::backend::cuda {

struct PagedAttentionArgs {
  const float* q = nullptr;  // [num_tokens, q_stride] fp32, heads first (after RoPE)
  int64_t q_stride = 0;
  void* out = nullptr;  // [num_tokens, num_heads * 128] in out_dtype
  DType out_dtype = DType::kBF16;
  int64_t num_tokens = 0;
  // The rows to compute (num_listed of them), or null for all num_tokens rows.
  const int32_t* token_list = nullptr;
  int64_t num_listed = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int block_size = 0;
  float scale = 0.0f;
  // The batch (ForwardBatch's arrays, device copies) and each token's sequence.
  const int32_t* token_seq = nullptr;        // [num_tokens]
  const int32_t* positions = nullptr;        // [num_tokens]
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1]
  const int32_t* seq_lens = nullptr;         // [num_seqs]
  const int32_t* block_tables = nullptr;     // [num_seqs, max_blocks_per_seq]
  int64_t max_blocks_per_seq = 0;

  kv::KvCacheDtype cache = kv::KvCacheDtype::k16Bit;
  bool bf16 = true;  // the 16-bit element type of 16-bit caches, residual, sink, staging
  // 16-bit and fp8: this layer's [num_blocks, block_size, num_kv_heads, 128] elements.
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  // int4_kivi: this layer's parts (int4_kivi_kv_cache.h has the same arrays on the CPU).
  const std::byte* pool = nullptr;  // [num_blocks, num_kv_heads, block_bytes]
  kv::Int4KiviLayout layout;
  int64_t num_pool_blocks = 0;  // block ids >= this are sink blocks
  // [num_slots] rings seat_stride elements apart (int4_kivi_device.cuh's ring_k_offset), each
  // [2, ring * B, num_kv_heads * 128]
  const uint16_t* residual = nullptr;
  int64_t seat_stride = 0;
  int ring = 1;
  // [num_sink] sink blocks sink_stride elements apart (0: 2 * B * num_kv_heads * 128, packed),
  // each [2, B, num_kv_heads * 128] (KvCacheConfig::sink_base_block: runs of pool blocks)
  const uint16_t* sink = nullptr;
  int64_t sink_stride = 0;
  const uint16_t* staging_k = nullptr;  // [num_tokens, num_kv_heads * 128]
  const uint16_t* staging_v = nullptr;
  const int32_t* pool_ends = nullptr;    // [num_seqs] DecodePlan::pool_ends
  const int32_t* seats = nullptr;        // [num_seqs]
  const int32_t* seat_starts = nullptr;  // [num_seqs]
  // [positions, 64] RopeTable rows: every position of the batch, and at least rows 0 ..
  // block_size (the int4_kivi decode kernel turns its query a block at a time by row block_size).
  const float* rope_cos = nullptr;
  const float* rope_sin = nullptr;
  // int4_kivi decode: int4_rotation_image of those tables for block_size, in device memory
  // (16-byte aligned), made once beside them.
  const uint32_t* int4_rotations = nullptr;
  // int4_kivi prefill: int4_prefill_rope_image of the tables (their rows rounded to fp16, a
  // position's 64 cos then 64 sin), in device memory (16-byte aligned), made once beside them.
  const uint16_t* rope_f16 = nullptr;
  // int4_kivi prefill: the pool rows of sequences whose pool tiles launch_int4_pool_rows made
  // before the attention ([rows][num_kv_heads * 128] 16-bit operands each of K and V): the first
  // pool_row_tiles[s] pool tiles (64 positions from pa) of sequence s from row pool_row_base[s];
  // its other pool tiles, and every pool tile of a sequence with pool_row_base[s] = -1 (or
  // without pool_row_base), dequantized by the prefill kernel itself.
  uint16_t* pool_rows_k = nullptr;
  uint16_t* pool_rows_v = nullptr;
  const int32_t* pool_row_base = nullptr;
  const int32_t* pool_row_tiles = nullptr;
  bool keys_post_rope = false;
  bool value_hadamard = false;
};

void launch_paged_attention(const PagedAttentionArgs& args, cudaStream_t stream);

}  // namespace s4kv::backend::cuda
