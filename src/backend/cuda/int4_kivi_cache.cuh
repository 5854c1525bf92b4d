// The int4_kivi cache's upkeep on the device, around launch_int4_kivi_commit (the quantizer):
// what the CPU's Int4KiviKvCache::commit does after a layer's attention, in the same order.
//   1. gather_fills: the 16-bit K/V bits of every block that filled in this step (from the
//      residual ring for positions cached before the step, from staging for the step's own)
//      into contiguous [B, 128] blocks per kv head for the quantizer; a sink block's bits go to
//      the sink area instead (format v2: never quantized).
//   2. launch_int4_kivi_commit quantizes those blocks into the pool (out_index).
//   3. residual_write: the step's tokens from staging into the residual ring, from
//      max(start, kept) on, kept = (seq_len / B - (ring - 1)) * B (the tail, and with the window
//      the last full block). After 1: the ring rows it overwrites may be what 1 read.
// Pointers are device memory of one layer; the batch arrays are ForwardBatch's device copies.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/paged_attention.cuh"
#include "kv/int4_kivi_layout.h"

namespace s4kv::backend::cuda {

// One block that fills in this step, built on the host per step.
struct Int4FillBlock {
  int32_t seq = 0;    // batch sequence
  int32_t index = 0;  // block index in its table (positions index * B ..)
  int32_t dest = 0;   // its entry in the quantizer's input, or -1 for a sink block
};

struct Int4CacheBatch {
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1]
  const int32_t* seq_lens = nullptr;         // [num_seqs]
  const int32_t* block_tables = nullptr;     // [num_seqs, max_blocks_per_seq]
  int64_t max_blocks_per_seq = 0;
  const int32_t* seats = nullptr;      // [num_seqs]
  const int32_t* token_seq = nullptr;  // [num_tokens]
  const int32_t* positions = nullptr;  // [num_tokens]
  int64_t num_tokens = 0;
};

struct Int4CacheLayer {
  uint16_t* residual = nullptr;  // [num_slots] rings of seat_stride elements, [2, ring * B, kv_dim]
  int64_t seat_stride = 0;       // elements between seats' rings (PagedAttentionArgs')
  uint16_t* sink = nullptr;      // [num_sink] of sink_stride elements, each [2, B, kv_dim]
  int64_t sink_stride = 0;       // 0: packed (PagedAttentionArgs')
  const uint16_t* staging_k = nullptr;  // [num_tokens, kv_dim]
  const uint16_t* staging_v = nullptr;
  int64_t num_pool_blocks = 0;  // sink block ids start here
  int ring = 1;
  int block_size = 0;
  int num_kv_heads = 0;  // kv_dim = num_kv_heads * 128
};

// Host side, once per step: the blocks that fill in the batch (every block full at seq_len and
// not at start, in batch order; sink ids get dest -1) and, per quantized block and kv head in
// that order, its first position and pool index (block id * num_kv_heads + head): the
// quantizer's first_position and out_index.
struct Int4FillPlan {
  std::vector<Int4FillBlock> fills;
  std::vector<int32_t> first_position;
  std::vector<int64_t> out_index;
  int64_t num_quantized = 0;  // blocks (each num_kv_heads quantizer inputs)
};
void plan_int4_fills(const ForwardBatch& batch, int64_t num_pool_blocks, int64_t block_size,
                     int64_t num_kv_heads, Int4FillPlan& plan);

// scratch_k / scratch_v: [num_quantized, num_kv_heads, B, 128] 16-bit bits. live_fills (device,
// or null): CUDA graph replay, num_fills is the grid's capacity and *live_fills the step's count.
void launch_int4_kivi_gather_fills(const Int4FillBlock* fills, int64_t num_fills,
                                   const Int4CacheBatch& batch, const Int4CacheLayer& layer,
                                   uint16_t* scratch_k, uint16_t* scratch_v, cudaStream_t stream,
                                   const int32_t* live_fills = nullptr);

void launch_int4_kivi_residual_write(const Int4CacheBatch& batch, const Int4CacheLayer& layer,
                                     cudaStream_t stream);

}  // namespace s4kv::backend::cuda

namespace s4kv::backend::cuda {

// The commit reads the arrays the layer's attention read: its batch and its int4_kivi parts.
Int4CacheBatch int4_cache_batch(const PagedAttentionArgs& attention);
Int4CacheLayer int4_cache_layer(const PagedAttentionArgs& attention);

// A layer's whole kv_commit, the three launches in order: gather_fills -> the quantizer
// (launch_int4_kivi_commit into the pool at out_index) -> residual_write. In a decode-only step
// the ring row a token overwrites (position p - ring * B) is read by neither the attention nor
// gather_fills (a decode row's fill is its own block, p's ring row holds only p), so the decode
// merge writes the tokens instead (residual_written). Device arrays of the
// step's Int4FillPlan; pool is this layer's.
struct Int4CommitStep {
  const Int4FillBlock* fills = nullptr;
  int64_t num_fills = 0;
  const int32_t* first_position = nullptr;  // [num_quantized * num_kv_heads]
  const int64_t* out_index = nullptr;       // [num_quantized * num_kv_heads]
  int64_t num_quantized = 0;
  uint16_t* scratch_k = nullptr;  // [num_quantized, num_kv_heads, B, 128]
  uint16_t* scratch_v = nullptr;
  std::byte* pool = nullptr;
  kv::Int4KiviLayout layout;
  const float* cos = nullptr;  // the RoPE table's rows
  const float* sin = nullptr;
  int64_t num_positions = 0;
  bool bf16 = true;
  bool keys_post_rope = false;
  bool value_hadamard = false;
  // CUDA graph replay (grids fixed at capture): num_fills and num_quantized are capacities and
  // the step's counts are in device memory, live[0] fills and live[1] quantizer inputs (blocks
  // times kv heads). Null: the counts above.
  const int32_t* live = nullptr;
  // A decode-only step whose attention merge wrote the step's tokens into the residual ring
  // already (DecodeLaunch::write_residual): no residual_write.
  bool residual_written = false;
};
void launch_int4_kivi_commit_step(const Int4CommitStep& step, const Int4CacheBatch& batch,
                                  const Int4CacheLayer& layer, cudaStream_t stream);

}  // namespace s4kv::backend::cuda
