// int4_kivi blocks back to fp32 on the device, bit for bit the CPU reference
// (kv::dequantize_keys_block_ref / dequantize_values_block_ref): x = float(q) * scale + zero,
// multiply then add, each rounded (no FMA). Keys come back pre-RoPE, values as stored (in the
// Hadamard domain for format v2). The device functions are what attention kernels use to read
// the cache in place; the launcher (one thread block of head_dim threads per block) tests them.
// Also the normalized Walsh-Hadamard transform of rows (kv::hadamard_ref's stage order), which
// attention applies once per head to its output for v2.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kv/int4_kivi_layout.h"

namespace s4kv::backend::cuda {

struct Int4KiviDequantizeArgs {
  const std::byte* blocks = nullptr;  // [num_blocks, layout.block_bytes], device
  float* keys = nullptr;              // [num_blocks, B, D] fp32 out, device (pre-RoPE)
  float* values = nullptr;            // [num_blocks, B, D] fp32 out, device
  int64_t num_blocks = 0;
  kv::Int4KiviLayout layout;  // D = 128
};

void launch_int4_kivi_dequantize(const Int4KiviDequantizeArgs& args, cudaStream_t stream);

// In place on [num_rows, 128] fp32 rows, device: each row through hadamard_ref's stages and
// its fp32(1/sqrt(128)) product, bit for bit.
void launch_hadamard128_rows(float* rows, int64_t num_rows, cudaStream_t stream);

}  // namespace s4kv::backend::cuda
