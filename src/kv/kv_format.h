// KV cache formats: which formats exist, the block sizes and value group sizes they allow,
// and how many bytes one token costs in each (steady state, per DESIGN.md). The byte layout
// inside an int4_kivi block is documented in docs/kv-format.md, not here. Depends only on
// common.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace s4kv::kv {

enum class KvCacheDtype {
  k16Bit,     // the model's 16-bit dtype (bf16 or fp16): K and V as computed
  kInt4Kivi,  // int4, keys per channel (per block, before RoPE), values per token per group
  kFp8E4M3,   // vLLM's default fp8 cache (per-tensor scale 1.0), kept for comparison
};

// Tokens per KV block (--block-size) and channels per value quantization group (Gv).
inline constexpr int kDefaultBlockSize = 64;
inline constexpr int kDefaultValueGroupSize = 128;
inline constexpr std::array<int, 3> kAllowedBlockSizes = {32, 64, 128};
inline constexpr std::array<int, 3> kAllowedValueGroupSizes = {32, 64, 128};
// The CUDA kernels split a position into block and row by shifts (int4_kivi_device.cuh).
static_assert(
    [] {
      for (int b : kAllowedBlockSizes) {
        if ((b & (b - 1)) != 0) return false;
      }
      return true;
    }(),
    "block sizes are powers of two");

// Short name used in reports and JSON: "16bit", "int4_kivi", "fp8_e4m3".
std::string_view kv_cache_dtype_name(KvCacheDtype dtype);

// Refuses a block size or value group size outside the allowed sets, naming the value:
// "unsupported block_size=48 (supported: 32, 64, 128)".
Status validate_block_size(int block_size);
Status validate_value_group_size(int value_group_size);
// Both, block size first.
Status validate_kv_layout(int block_size, int value_group_size);

// Bytes one token occupies in the cache once its block is full (the 16-bit residual of a
// partly filled block is not counted), summed over all layers and KV heads:
//   16-bit:    2 * 2 * D            (K and V, 2 bytes each)
//   int4_kivi: D/2 + 4D/B + D/2 + 4D/Gv
//              (K codes, K fp16 scale+zero per channel over B tokens, V codes,
//               V fp16 scale+zero per token per Gv channels)
//   fp8_e4m3:  2 * D
// per layer per KV head. A double because 4D/B need not be whole for every D. The arguments
// must be positive and block_size / value_group_size valid (S4KV_CHECK: callers validate).
double kv_bytes_per_token(KvCacheDtype dtype, int64_t num_layers, int64_t num_kv_heads,
                          int64_t head_dim, int block_size = kDefaultBlockSize,
                          int value_group_size = kDefaultValueGroupSize);

// The int4_kivi format version (docs/kv-format.md), chosen by measurement (docs/fidelity.md):
// 2 keeps the first block of every sequence 16-bit (a sink block) and the last full block
// 16-bit too (a window block), and quantizes values after a Hadamard rotation; 1, every full
// block int4 with plain values, is kept for `s4kv eval` comparisons only.
inline constexpr int kInt4KiviFormatVersion = 2;

// An int4_kivi variant as `s4kv eval` measures it (issue 12, docs/kv-format.md "Candidates");
// the default-constructed one is the serving format, v2.
struct Int4KiviVariant {
  // The first block of every sequence stays 16-bit (attention sinks): 0..kMaxSinkBlocks.
  int sink_blocks = 1;
  // The last full block also stays 16-bit (beside the partly filled one), so the newest
  // B .. 2B - 1 tokens are read 16-bit: 0..kMaxWindowBlocks.
  int window_blocks = 1;
  // Values rotated by the normalized head_dim-point Hadamard transform (kv/hadamard.h) before
  // per-token quantization; attention rotates its output back once per head.
  bool value_hadamard = true;

  bool is_default() const { return sink_blocks == 1 && window_blocks == 1 && value_hadamard; }
  bool is_v1() const { return sink_blocks == 0 && window_blocks == 0 && !value_hadamard; }
};
inline constexpr int kMaxSinkBlocks = 1;
inline constexpr int kMaxWindowBlocks = 1;
// The residual ring (1 + window blocks) is a power of two for the CUDA kernels' masks.
static_assert(kMaxWindowBlocks <= 1, "a ring of 1 or 2 blocks");

// Refuses sink_blocks outside 0..kMaxSinkBlocks and value_hadamard with a head_dim that is not
// a power of two, naming the value.
Status validate_int4_variant(const Int4KiviVariant& variant, int64_t head_dim);

// Bytes one sequence of `context` tokens occupies, all layers and KV heads, everything counted:
// for int4_kivi its full blocks (the first sink and the last window blocks at 16-bit) and the
// 16-bit residual of the partly filled last block; for 16-bit and fp8 context times the per-token
// bytes. The density of a format at a context is the 16-bit bytes over these.
double kv_bytes_at_context(KvCacheDtype dtype, int64_t context, int64_t num_layers,
                           int64_t num_kv_heads, int64_t head_dim,
                           int block_size = kDefaultBlockSize,
                           int value_group_size = kDefaultValueGroupSize,
                           const Int4KiviVariant& variant = {});

}  // namespace s4kv::kv
