// The CPU backend's KV cache of any --kv-cache-dtype, as the forward recipe sees it: per layer,
// kv_write stores the step's new keys (after RoPE) and values, attention gathers each
// sequence's context as fp32 rows (or reads what paged16_run / int4_run name in place), and
// kv_commit runs after the layer's attention (int4_kivi: quantize the blocks that filled, keep the
// tail 16-bit). One implementation per dtype, chosen once by make_cpu_kv_cache (the one dtype
// switch). docs/kv-format.md "The CPU backend" has the step order and what each dtype stores.
// Engine thread only, except gather (pool threads, read-only). Memory is allocated at construction;
// the engine owns which blocks are live.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "backend/backend.h"
#include "backend/cpu/attention.h"
#include "common/dtype.h"
#include "common/status.h"
#include "kv/kv_format.h"

namespace s4kv::backend::cpu {

class ThreadPool;

struct CpuKvCacheShape {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  DType dtype = DType::kBF16;  // the model's 16-bit dtype (kBF16 or kF16)
};

// The raw arrays of one layer of a CPU cache, for tests that load the same bytes into another
// backend (the CUDA equivalence tests); empty spans for parts a dtype does not have. Layouts
// as each cache documents them (paged_kv_cache.h, int4_kivi_kv_cache.h), one layer each.
struct KvStorageView {
  std::span<const std::byte> k, v;  // 16-bit / fp8: [num_blocks, B, nkv, D] elements
  std::span<const std::byte> pool;  // int4_kivi: [int4_pool_blocks, nkv, block_bytes]
  // int4_kivi: the seats' rings in the pool ([slots] of seat_stride bytes, each [2, ring * B,
  // nkv * D] 16-bit), a view of the pool's memory.
  std::span<const std::byte> residual;
  int64_t seat_stride = 0;
  std::span<const std::byte> sink;       // int4_kivi: [num_sink, 2, B, nkv * D] 16-bit
  std::span<const std::byte> staging_k;  // int4_kivi: [num_tokens, nkv * D] 16-bit (this
  std::span<const std::byte> staging_v;  //   step's write, until commit)
};

class CpuKvCache {
 public:
  virtual ~CpuKvCache() = default;

  // Once per forward(), before the first layer (batch already checked).
  virtual void begin_step(const ForwardBatch& batch) { (void)batch; }

  // kv_write: k, v: [num_tokens, row_stride] fp32 rows, each starting with the token's
  // num_kv_heads * head_dim values (K after RoPE).
  virtual void write(int64_t layer, const ForwardBatch& batch, std::span<const float> k,
                     std::span<const float> v, int64_t row_stride) = 0;

  // attention's view of positions [begin, end) of sequence seq, kv head kv_head, in this step:
  // row p - begin of keys, values ([end - begin, head_dim] fp32; keys after RoPE; either may be
  // null: not wanted) holds position p. Returns the positions of [begin, end) whose values are
  // left in the Hadamard domain (none but for int4_kivi's value_hadamard variant; one run).
  // Thread-safe.
  virtual RotatedValues gather_range(int64_t layer, const ForwardBatch& batch, int64_t seq,
                                     int64_t kv_head, int64_t begin, int64_t end, float* keys,
                                     float* values) const = 0;
  // The blocks of sequence seq (kv head kv_head) that attention may read in place instead of
  // gathering them (attention.h): int4_kivi's pool blocks before the step; empty for the other
  // dtypes. Thread-safe.
  virtual Int4BlockRun int4_run(int64_t layer, const ForwardBatch& batch, int64_t seq,
                                int64_t kv_head) const {
    (void)layer, (void)batch, (void)seq, (void)kv_head;
    return {};
  }
  // The same for a paged 16-bit cache: the sequence's whole context. Empty for other dtypes.
  // Thread-safe.
  virtual Paged16BitRun paged16_run(int64_t layer, const ForwardBatch& batch, int64_t seq,
                                    int64_t kv_head) const {
    (void)layer, (void)batch, (void)seq, (void)kv_head;
    return {};
  }

  // Positions [0, num_positions).
  RotatedValues gather(int64_t layer, const ForwardBatch& batch, int64_t seq, int64_t kv_head,
                       int64_t num_positions, float* keys, float* values) const {
    return gather_range(layer, batch, seq, kv_head, 0, num_positions, keys, values);
  }

  // kv_commit, after the layer's attention. Nothing for 16-bit and fp8.
  virtual void commit(int64_t layer, const ForwardBatch& batch, ThreadPool* pool) {
    (void)layer, (void)batch, (void)pool;
  }

  virtual int64_t num_bytes() const = 0;

  // Tests only: the layer's arrays as they are now.
  virtual KvStorageView storage(int64_t layer) const = 0;
};

// Refuses (kInvalidArgument) a bad int4_kivi layout (block size, value group size, head dim), a
// non-positive num_seats for int4_kivi, a negative num_sink_blocks, and sink blocks or
// Hadamard values with another dtype (or Hadamard values with a head dim that is not a power of
// two). inv_freq: [head_dim / 2] (int4_kivi's RoPE table).
Result<std::unique_ptr<CpuKvCache>> make_cpu_kv_cache(const KvCacheConfig& config,
                                                      const CpuKvCacheShape& shape,
                                                      std::span<const float> inv_freq);

}  // namespace s4kv::backend::cpu
