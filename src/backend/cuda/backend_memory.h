// What the CUDA backend allocates, as arithmetic (host-only, no CUDA types): the per-step
// buffers of its limits (Sizes: the constructor allocates these, make_cuda_backend checks their
// sum against free memory), the KV cache's parts (init_kv_cache), the runtime reserve profile()
// keeps out of the cache, the decode kernels' view of the cache shape, the weights' bytes and
// the CUDA graph capture sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/decode_attention.cuh"
#include "common/dtype.h"
#include "kv/int4_kivi_layout.h"
#include "model/model_config.h"

namespace s4kv::backend::cuda {

inline constexpr int64_t kHeadDim = 128;

// Bytes of one GEMM input element in the compute dtype.
inline int64_t act_size(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The CUDA runtime's own allocations beyond what the backend asks for (module images, cuBLASLt
// handles, the stream): kept out of the KV cache.
inline constexpr int64_t kRuntimeReserveBytes = int64_t{512} << 20;

// A step's counts that graph replays read from the arena (CudaBackend's step_.live): int4 decode
// items, all decode items, fills, quantizer inputs, whether the decode items merge themselves.
inline constexpr int kStepLiveWords = 5;

// vLLM's CUDA graph capture sizes up to `largest` (a decode-only step's most rows).
std::vector<int64_t> cuda_graph_sizes(int64_t largest);

// The decode kernels' view of the cache (decode_attention.cuh).
DecodeShape decode_shape(const model::ModelConfig& c, const KvCacheConfig& kv, int num_sms);

// Whether the tensor-core attention kernels (decode and prefill) serve this compute dtype: bf16
// and fp16; fp32 runs the reference kernel (paged_attention.cuh), which needs none of their
// tables and rows (int4_kivi's rotations, fp16 RoPE rows and pool rows).
bool tensor_core_attention(DType compute_dtype);
// Sizes::rope: the fp32 RoPE tables, and for int4_kivi's kernels their rotations and fp16 rows.
int64_t rope_bytes(const KvCacheConfig& kv, const CudaBackendOptions& o);
// Sizes::pool_rows_capacity (positions): min(max_model_len, the cap), the cap 32,768 unless
// S4KV_PREFILL_POOL_ROW_CAP gives another (parse_pool_row_cap: its value, or the default for
// nullptr; anything but a multiple of 64 from 64 to 2^20 stops the process).
constexpr int64_t kDefaultPoolRowCap = 32768;
int64_t pool_row_capacity(const KvCacheConfig& kv, const CudaBackendOptions& o);
int64_t parse_pool_row_cap(const char* env);

// Every start-up allocation but the weights and the KV cache, in bytes.
struct Sizes {
  int64_t max_blocks_per_seq, max_fills, decode_items, partials, merge_counts, arena, rope, staging,
      scratch;
  // int4_kivi prefill: rows of pool positions made before the attention (launch_int4_pool_rows),
  // and the bytes of each of K and V: pool_row_capacity rows (32,768 at most by default), none with
  // S4KV_PREFILL_POOL_ROWS=0 (the prefill kernel then dequantizes every pool tile itself) or
  // without the tensor-core kernels.
  int64_t pool_rows_capacity, pool_rows;
  int64_t x, h, qkv, attn, gate_up, act, rows, logits, sample_rows, sampler;
  int64_t logit_rows;  // rows of logits a step may ask for (max_num_logits, else max_num_tokens)

  Sizes(const model::ModelConfig& c, const KvCacheConfig& kv, const CudaBackendOptions& o);
  int64_t total() const;
};

// Device bytes of the KV cache's parts (all layers): int4_kivi's pool (the residual rings in it)
// and sink blocks (plus the dummy block); or the paged K and V of the other dtypes (each
// num_blocks plus the dummy block). init_kv_cache checks their sum against free memory and
// allocates them.
struct KvParts {
  int64_t pool = 0, sink = 0, k = 0, v = 0;
  int64_t total() const { return pool + sink + k + v; }
};
KvParts kv_parts(const model::ModelConfig& c, const KvCacheConfig& kv,
                 const kv::Int4KiviLayout& layout);

// The cache of the profiling step (CudaBackend::profiling_step): the dummy block and seat alone,
// the sinks (int4_kivi v2) in memory of their own. One sink block stands for the cache's
// num_sink_blocks (padding's tables hold nothing but the dummy block, the sink past them), so
// the step's sink memory is two 16-bit blocks a layer, not num_sink_blocks + 1 (3.7 GB for
// Qwen2.5-7B at 1,024 sequences, 8.6 GB for Llama-3.1-8B, held while the step ran).
KvCacheConfig profiling_kv_config(const KvCacheConfig& kv);

}  // namespace s4kv::backend::cuda
