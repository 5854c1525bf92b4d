// Prefill and chunked-prefill attention on tensor cores (FlashAttention-2 style) for the rows of
// a step whose sequence has q_len >= 2, when the compute dtype is 16-bit; sm_80+ (mma.sync
// m16n8k16 with fp32 accumulation, ldmatrix, cp.async). The cache is read in place in every
// format, exactly where launch_paged_attention's load_kv reads it (paged_attention.cu).
//
// Grid: one thread block of 4 warps per (tile, query head), flattened to one dimension with the
// head fastest (block = tile * num_heads + head). A tile is up to 64 consecutive query rows of
// one sequence; warp w takes rows 16 w .. 16 w + 15. Why one query head per block rather than a
// KV head's whole group: a block's K/V tile loads (and int4 dequantizations) are shared by its
// 64 query rows either way; packing the group's heads into the 64 rows shares them the same
// amount (64 rows per K/V tile) but needs groups that divide 64 (Qwen's 7 does not) and more
// index arithmetic per row. With the head fastest, the group's heads run side by side and read
// the same K/V through L2, and plan_prefill's heaviest tiles (longest contexts) start first.
// int4_kivi, where a group has two heads or more, runs 8 warps a block instead: two heads of the
// group (the last block of an odd group has one), 64 rows each, so that a pool tile is
// dequantized once for 128 rows (S4KV_PREFILL_HEAD_PAIRS=0 keeps one head a block).
//
// Per block, the context streams in KV tiles of 64 positions, staged in shared memory as 16-bit
// K and V rows [64][128 + 8 pad] (two stages, cp.async): S = Q K^T (Q scaled by scale * log2 e
// and rounded to the operand type once, held in registers), an online softmax in fp32 (causal
// mask where a tile reaches past a row's position), O += P V (P rounded to the operand type).
// The MMA part is one code path; the formats differ only in how a tile reaches shared memory:
//   16-bit cache, int4_kivi's sink block / residual ring / staging: rows copied as they are;
//   fp8_e4m3: bytes staged, then widened to fp16 (exact);
//   int4_kivi pool blocks: code words, parameters and the positions' RoPE rows in fp16
//     (PagedAttentionArgs::rope_f16) staged, then dequantized in fp16 pairs as the decode kernel
//     does (exact codes, q * scale + zero in one FMA), keys rotated from pre-RoPE with the RoPE
//     table row of their own position rounded to fp16, then the operand type.
// Operands: fp16 for fp8 caches, else the cache's 16-bit type (PagedAttentionArgs::bf16); the
// output in out_dtype (bf16 or fp16). int4_kivi v2's Hadamard-domain pool values: the pool's
// KV tiles come first and, after the last of them, the accumulator is rotated back (the
// transform is linear, so later rescaling commutes with it); the sink block and 16-bit tail
// accumulate on top in the channel domain.
// Reference: launch_paged_attention (tests/backend/cuda_prefill_attention_test.cc).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/paged_attention.cuh"

namespace s4kv::backend::cuda {

inline constexpr int kPrefillTileRows = 64;

// Query rows [q_begin, q_end) (token rows of the step, at most kPrefillTileRows) of sequence
// `seq`; token j of the sequence has position seq_lens[seq] - q_len + j.
// parts > 1 (split_prefill): the tile's context, in KV tiles of 64 positions, is split into
// `parts` equal runs; this block takes run `part` and writes its rows' partial sums (max, sum,
// unnormalized output) to partial slot `slot` for a merge (PrefillMerge) instead of the output.
struct PrefillTile {
  int32_t seq = 0;
  int32_t q_begin = 0;
  int32_t q_end = 0;
  int32_t parts = 1;
  int32_t part = 0;
  int32_t slot = -1;
};

// The rows of a split tile: partial slots [first_slot, first_slot + parts) combine into them.
struct PrefillMerge {
  int32_t q_begin = 0;
  int32_t q_end = 0;
  int32_t first_slot = 0;
  int32_t parts = 0;
};

// The most partial slots a step's split tiles take (each kPrefillTileRows x num_heads x
// kPrefillPartialFloats floats of the backend's partial sums).
inline constexpr int kPrefillSplitSlots = 16;
inline constexpr int64_t kPrefillPartialFloats = 130;  // max, sum, 128 output sums
// A split run is at least this many KV tiles of 64 positions.
inline constexpr int kPrefillMinRunTiles = 4;
// The floats of the partial sums that a step's split tiles may write (PrefillSplitLaunch).
inline constexpr int64_t prefill_split_partial_floats(int64_t num_heads) {
  return int64_t{kPrefillSplitSlots} * kPrefillTileRows * num_heads * kPrefillPartialFloats;
}

// Tiles for every row of every sequence with q_len >= min_q_len (>= 1), heaviest first (by the
// context of the tile's last row). Host code; allocates nothing once `tiles` has capacity.
void plan_prefill(const ForwardBatch& b, int min_q_len, std::vector<PrefillTile>& tiles);

// Split-KV for steps whose tiles leave most of the device idle (a short chunk of a long
// prompt: one or two tiles a head, each walking the whole context alone): when the tiles' thread
// blocks (tiles x num_heads) fill at most half of `wave_blocks` (the prefill kernel's resident
// blocks over the device), each tile whose context holds at least 2 kPrefillMinRunTiles KV tiles
// becomes `parts` tiles (runs of at least kPrefillMinRunTiles KV tiles), about one wave in all,
// taking at most kPrefillSplitSlots slots; `merges` gets one entry a split tile. Host code;
// allocates nothing once `tiles` and `merges` have capacity.
void split_prefill(const ForwardBatch& b, int num_heads, int64_t wave_blocks,
                   std::vector<PrefillTile>& tiles, std::vector<PrefillMerge>& merges);

// Whether plan_prefill(b, min_q_len, ...) computes token row `row` (its sequence has
// q_len >= min_q_len); and `rows` (e.g. DecodePlan::other_tokens) with those rows removed, the
// others kept in order: what stays goes to launch_paged_attention.
bool prefill_covers(const ForwardBatch& b, int min_q_len, int32_t row);
void remove_prefill_rows(const ForwardBatch& b, int min_q_len, std::vector<int32_t>& rows);

// Whether the prefill kernels serve this shape: head_dim 128 (paged_attention.cuh), any GQA
// group, a bf16 / fp16 output (not the float32 compute mode), and for int4_kivi pre-RoPE keys
// and B, Gv in 32 / 64 / 128.
bool prefill_kernels_support(int num_heads, int num_kv_heads, const PagedAttentionArgs& a);

// The int4_kivi prefill kernel's RoPE rows (PagedAttentionArgs::rope_f16) from the tables'
// ([row][64] cos, sin): per row its 64 cos then its 64 sin rounded to fp16 (round to nearest
// even, as __float2half_rn). Made once.
std::vector<uint16_t> int4_prefill_rope_image(std::span<const float> cos,
                                              std::span<const float> sin);

// int4_kivi's pool rows for a step's prefill tiles (PagedAttentionArgs::pool_rows_k / _v): each
// sequence of `tiles` whose pool holds positions pa .. pb - 1 (pa: B after a sink block, i.e. a
// first table entry of b at or above num_pool_blocks, else 0; pb = pool_ends[s] * B) gets pb - pa
// rows from base[s] (tiles[s] pool tiles of 64 positions), in the order of first appearance,
// while they fit in capacity_rows; the sequence that does not fit takes the whole tiles the room
// left holds (its later pool tiles dequantized in the prefill kernel), the rest none (base -1,
// tiles 0). `seqs` lists the sequences given rows, max_tiles the most pool tiles one of them has
// in rows. Host code.
struct Int4PoolRows {
  std::vector<int32_t> base;   // [num_seqs]
  std::vector<int32_t> tiles;  // [num_seqs]
  std::vector<int32_t> seqs;
  int32_t max_tiles = 0;
  int64_t rows = 0;
  void clear() {  // no rows (the vectors keep their memory for the next step)
    base.clear();
    tiles.clear();
    seqs.clear();
    max_tiles = 0;
    rows = 0;
  }
};
void plan_int4_pool_rows(const ForwardBatch& b, std::span<const PrefillTile> tiles,
                         std::span<const int32_t> pool_ends, int64_t num_pool_blocks,
                         int block_size, int64_t capacity_rows, Int4PoolRows& out);

// The pool rows planned by plan_int4_pool_rows (seqs_device: its seqs, device copies): each pool
// tile dequantized once per KV head, exactly as the prefill kernel dequantizes it, and written to
// a.pool_rows_k / _v at a.pool_row_base (a.pool_row_tiles of them a sequence; device arrays).
void launch_int4_pool_rows(const PagedAttentionArgs& a, const int32_t* seqs_device,
                           int32_t num_seqs, int32_t max_tiles, cudaStream_t stream);

// Resident thread blocks of the prefill kernel for this cache format on one multiprocessor, in
// blocks of one head (int4_kivi's blocks of two heads count twice).
int prefill_blocks_per_sm(kv::KvCacheDtype cache);

// Split tiles' partial sums and their merges (split_prefill), device copies.
struct PrefillSplitLaunch {
  float* partials = nullptr;  // [kPrefillSplitSlots, kPrefillTileRows, num_heads, 130]
  const PrefillMerge* merges = nullptr;
  int32_t num_merges = 0;
};

// The tiles' rows for every query head, into a.out (a.token_list is not used). tiles_device:
// [num_tiles] device copies of plan_prefill's tiles (split_prefill's, with `split` then).
void launch_prefill_attention(const PagedAttentionArgs& a, const PrefillTile* tiles_device,
                              int32_t num_tiles, cudaStream_t stream,
                              const PrefillSplitLaunch* split = nullptr);

}  // namespace s4kv::backend::cuda
