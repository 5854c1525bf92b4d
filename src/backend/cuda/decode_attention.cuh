// Decode attention on tensor cores (docs/architecture.md, "Decode attention"): the rows of a step
// with q_len 1, when the compute dtype is 16-bit. One thread block per (work item, KV head): an
// item is a range of one sequence's context, so long contexts split over many blocks
// (split-KV) and a merge kernel combines the items of each sequence. Inside a block each warp
// takes 16 context positions at a time: S = Q K^T with the group's query heads as the MMA rows
// (mma.sync m16n8k16, fp32 accumulation), an online softmax in registers, then O^T += V^T P^T
// (channels as the MMA rows, the probabilities reused from the score registers).
//   int4_kivi pool blocks: codes unpacked to fp16 in registers (a shift and a LOP3 per pair);
//     keys dequantized per channel and rotated from pre-RoPE by the block offset's angle
//     (R(p0 + t) = R(p0) R(t): the query is turned back by the block start once per block, the
//     key by its offset from a table of B rows in shared memory); value scales multiply the
//     probabilities and value zeros add sum(p * zero) per group, so the codes go to the MMA
//     as they are; v2's Hadamard-domain values are summed apart and rotated back in the merge.
//   16-bit rows (the 16-bit cache; int4_kivi's sink block, window and tail from the residual
//     ring, the step's own token from staging) and fp8 rows (converted to fp16 pairwise).
// The reference is cpu::context_attention_ref; tests/backend/cuda_attention_test.cc holds the
// fast path to it within 16-bit tolerance (fp16 / bf16 operands).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/paged_attention.cuh"

namespace s4kv::backend::cuda {

// A range of one decode sequence's context.
// int4 items (the first num_int4_items of a plan): int4_kivi pool blocks [begin, end); row items:
// positions [begin, end) read as 16-bit or fp8 rows.
struct DecodeItem {
  int32_t seq = 0;  // the batch's sequence
  int32_t begin = 0;
  int32_t end = 0;
  int32_t merge = 0;  // its DecodeSeq (the plan's seqs): whose merge it joins
};

// One decode sequence: its int4 items and row items combine into output row `token`.
struct DecodeSeq {
  int32_t token = 0;
  int32_t int4_begin = 0, int4_end = 0;
  int32_t rows_begin = 0, rows_end = 0;
};

struct DecodeShape {
  kv::KvCacheDtype cache = kv::KvCacheDtype::k16Bit;
  int block_size = 0;
  int64_t num_pool_blocks = 0;  // int4_kivi: table ids at or above it are sink blocks
  int ring = 1;                 // int4_kivi: residual ring blocks (1 + window blocks)
  int num_kv_heads = 0;
  int num_sms = 0;  // the device's multiprocessors: how finely contexts split
  // Thread blocks of the split items' kernel (int4_kivi: the int4 kernel; else the row kernel)
  // resident on one multiprocessor at once: a wave is num_sms * blocks_per_sm blocks.
  int blocks_per_sm = 4;
};

// blocks_per_sm of a device and cache (the occupancy of the kernel that runs the split items).
int decode_blocks_per_sm(kv::KvCacheDtype cache, int block_size, int64_t value_group_size);
// Whether the int4_kivi decode kernel copies its pool blocks with the bulk tensor copy engine
// (sm_90 machine code on an sm_90 device, S4KV_INT4_COPY unset) rather than cp.async.
bool decode_int4_bulk_copies();
// The int4_kivi decode kernel's rotations R(t), t < block_size, from the RoPE tables' rows
// ([row][64] cos, sin): the shared-memory image every thread block copies (fp16 pairs in the
// kernel's lane order), made once; PagedAttentionArgs::int4_rotations holds it on the device.
std::vector<uint32_t> int4_rotation_image(std::span<const float> cos, std::span<const float> sin,
                                          int block_size);

// The host's plan of a step's attention rows.
struct DecodePlan {
  std::vector<DecodeItem> items;  // int4 items first, then row items
  int32_t num_int4_items = 0;
  std::vector<DecodeSeq> seqs;
  std::vector<int32_t> other_tokens;  // the rows of prefill chunks: the reference kernel's
  std::vector<int32_t> pool_ends;     // int4_kivi, per sequence: blocks before it are pool or
                                      // sink blocks; the rest is read from the residual ring
};

// The most items a step of num_seqs decode sequences can make, per kind (the grids of a
// captured step), and in all (sizes the partial sums at start-up).
struct DecodeCapacity {
  int64_t int4_items = 0, row_items = 0;
};
DecodeCapacity decode_capacity(int64_t num_seqs, const DecodeShape& shape);
int64_t max_decode_items(int64_t max_num_seqs, const DecodeShape& shape);

// Plans a step: every q_len 1 row goes to the decode kernels when `decode` is true, other rows
// (and all rows when it is false) to launch_paged_attention through other_tokens.
void plan_attention(const ForwardBatch& b, const DecodeShape& shape, bool decode, DecodePlan& plan);

// Whether the decode kernels serve this shape: head_dim 128 (paged_attention.cuh), at most 8
// query heads per KV head, pre-RoPE int4 keys.
bool decode_kernels_support(int num_heads, int num_kv_heads, const PagedAttentionArgs& a);

struct DecodeLaunch {
  const DecodeItem* items = nullptr;  // device copies of the plan's arrays
  int32_t num_items = 0;
  int32_t num_int4_items = 0;
  const DecodeSeq* seqs = nullptr;
  int32_t num_seqs = 0;
  float* partials = nullptr;  // [max items, num_heads, 130]
  // CUDA graph replay (the grids fixed at capture): num_int4_items and num_items - num_int4_items
  // are capacities (decode_capacity) and the step's counts are in device memory, live[0] int4
  // items and live[1] all items; blocks past them return at once. Null: the counts above.
  const int32_t* live = nullptr;
  // int4_kivi, a decode-only step: the merge also writes each sequence's token from staging into
  // its residual ring (int4_kivi_cache.cuh's residual_write, which the step then skips).
  bool write_residual = false;
  // Null: the merge kernel combines the items' partials after the item kernels. Else the merge
  // is fused into them: [num_seqs, num_kv_heads] counts, zero between launches; each item's
  // thread block counts itself done in its (sequence, KV head)'s, and the last of them merges
  // the group's query heads and sets the count back to zero (S4KV_DECODE_MERGE,
  // decode_merge_mode()).
  int32_t* merge_counts = nullptr;
  // With merge_counts, for CUDA graph replay: the step's choice in device memory (1: the items
  // merge, merge_in_items; 0: they do not count and the merge kernel, launched too, merges; its
  // blocks return at once on 1). Null: the items merge, no merge kernel.
  const int32_t* merge_flag = nullptr;
};

// Whether a plan's items should merge themselves (with S4KV_DECODE_MERGE=fused): every decode
// sequence has at most kFusedMergeItems items. The fused merge reads a sequence's partials in
// one thread block a KV head, where the merge kernel spreads them over a block a query head, so
// past a few items (small batches at long contexts) the merge kernel is the faster (H100,
// bench/results/cuda_h100/attention_fused_sweep_h100_e7aa609.json: even at 8-9 items a
// sequence, 4-25 % slower at 26-100).
inline constexpr int kFusedMergeItems = 16;
bool merge_in_items(const DecodePlan& plan);

// How the decode rows are merged: the merge kernel (DecodeLaunch::merge_counts null) or in the
// item kernels' last thread block of each (sequence, KV head). S4KV_DECODE_MERGE=kernel (the
// default) or fused, read once; any other value is an error.
enum class DecodeMerge { kKernel, kFused };
DecodeMerge decode_merge_mode();

// A second stream for the row items' kernel, so that it runs beside the int4 kernel (they
// write separate partials; the merge waits for both): `side` waits for `fork` recorded on the
// main stream, the main stream for `join` recorded on `side` (graph capture makes them edges).
struct DecodeFork {
  cudaStream_t side = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
};

// The decode rows: item kernels, then the merge into a.out (a.token_list is not used). fork:
// null, or where the row kernel runs when a step has both kinds of items.
void launch_decode_attention(const PagedAttentionArgs& a, const DecodeLaunch& d,
                             cudaStream_t stream, const DecodeFork* fork = nullptr);

inline constexpr int64_t kDecodePartialFloats = 130;  // m, l, 128 sums per head per item

}  // namespace s4kv::backend::cuda
