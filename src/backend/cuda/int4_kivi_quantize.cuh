// int4_kivi block quantization on the device, byte for byte the CPU reference
// (kv/int4_kivi_ref.h quantize_block_ref, docs/kv-format.md "Exactness"): keys per channel over
// the block's tokens, values per token per group of Gv channels, fp16 scale and zero from the
// fp32 min and max, codes rint((x - zero) / scale) clamped to 0..15, every step rounded on its
// own (explicit _rn intrinsics: no FMA contraction, no fast math). With value_hadamard (format
// v2) each value row is first rotated by the normalized 128-point Walsh-Hadamard transform in
// kv::hadamard_ref's stage order. One thread block of head_dim threads per quantized block.
// Tested against the CPU reference and the numpy goldens (tests/golden/kivi).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kv/int4_kivi_layout.h"

namespace s4kv::backend::cuda {

struct Int4KiviQuantizeArgs {
  const float* keys = nullptr;    // [num_blocks, B, D] fp32 pre-RoPE keys, device
  const float* values = nullptr;  // [num_blocks, B, D] fp32 values (unrotated), device
  std::byte* blocks = nullptr;    // [num_blocks, layout.block_bytes], device, 4-byte aligned
  int64_t num_blocks = 0;
  kv::Int4KiviLayout layout;  // D = 128 (the served head dim)
  bool value_hadamard = false;
};

// Checks the shapes (aborting on a bug) and launches on stream.
void launch_int4_kivi_quantize(const Int4KiviQuantizeArgs& args, cudaStream_t stream);

// The commit of full blocks from the 16-bit cache's bits, as the CPU backend's kv_commit does
// it: keys (after RoPE) and values widened exactly to fp32, keys rotated back with the shared
// RoPE table (backend/rope_table.h rope_unrotate: out[i] = x1*c + x2*s, out[i+h] = x2*c - x1*s,
// each product rounded, then the sum), then quantized as above.
struct Int4KiviCommitArgs {
  const uint16_t* keys = nullptr;    // [num_blocks, B, D] 16-bit bits, keys after RoPE, device
  const uint16_t* values = nullptr;  // [num_blocks, B, D] 16-bit bits, device
  bool bf16 = true;                  // else fp16
  const int32_t* first_position = nullptr;  // [num_blocks] position of each block's token 0
  const float* cos = nullptr;               // [num_positions, D/2] RopeTable::cos_table(), device
  const float* sin = nullptr;               // [num_positions, D/2]
  int64_t num_positions = 0;    // every first_position + B - 1 must be below it (not checked)
  bool keys_post_rope = false;  // comparison layout: no rotation back
  std::byte* blocks = nullptr;  // [*, layout.block_bytes], device
  // [num_blocks] where input block i goes: blocks + out_index[i] * block_bytes (a pool block
  // id times the kv heads plus the head); null: block i itself.
  const int64_t* out_index = nullptr;
  int64_t num_blocks = 0;
  kv::Int4KiviLayout layout;
  bool value_hadamard = false;
  // CUDA graph replay: num_blocks is the grid's capacity and *live_blocks (device) the count.
  const int32_t* live_blocks = nullptr;
};

void launch_int4_kivi_commit(const Int4KiviCommitArgs& args, cudaStream_t stream);

}  // namespace s4kv::backend::cuda
