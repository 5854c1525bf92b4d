// What the CUDA backend allocates, as arithmetic (backend_memory.h), which needs no device: the
// profiling step's cache (profiling_kv_config) holds the dummy block and seat alone, whatever
// the cache it stands for, and its sink memory is two 16-bit blocks a layer; int4_kivi's kernel
// rows only where its kernels run.
#include <gtest/gtest.h>

#include <cstdlib>

#include "backend/backend.h"
#include "backend/cuda/backend_memory.h"
#include "kv/int4_kivi_layout.h"
#include "kv/kv_cache_manager.h"
#include "model/model_config.h"

namespace s4kv::backend::cuda {
namespace {

model::ModelConfig qwen25_7b_shape() {  // the KV cache's dimensions of Qwen2.5-7B
  model::ModelConfig c;
  c.hidden_size = 3584;
  c.num_hidden_layers = 28;
  c.num_attention_heads = 28;
  c.num_key_value_heads = 4;
  c.head_dim = 128;
  return c;
}

// An int4_kivi v2 cache as the engine gives it: 1,024 seats, their rings and the sinks' runs
// in the pool (the runs under the rings, the dummy sink's run too).
KvCacheConfig int4_v2_cache(const kv::Int4KiviLayout& layout) {
  KvCacheConfig kv;
  kv.dtype = kv::KvCacheDtype::kInt4Kivi;
  kv.block_size = 64;
  kv.value_group_size = 128;
  kv.num_blocks = 200000;
  kv.num_seats = 1024;
  kv.num_sink_blocks = 1024;
  kv.num_window_blocks = 1;
  kv.int4_value_hadamard = true;
  kv.sink_run_blocks = 4;
  kv.ring_base_block = kv::KvCacheManager::seat_runs_begin(kv.num_blocks, kv.num_seats,
                                                           int4_ring_blocks(kv, layout));
  kv.sink_base_block = kv::KvCacheManager::sink_runs_begin(kv.ring_base_block, kv.num_sink_blocks,
                                                           kv.sink_run_blocks);
  return kv;
}

TEST(ProfilingCache, Int4KiviHoldsTheDummyBlockSeatAndOneSink) {
  const model::ModelConfig c = qwen25_7b_shape();
  const kv::Int4KiviLayout layout = *kv::Int4KiviLayout::create(64, 128, 128);
  const KvCacheConfig kv = int4_v2_cache(layout);
  const KvCacheConfig p = profiling_kv_config(kv);
  EXPECT_EQ(p.num_blocks, 0);
  EXPECT_EQ(p.num_seats, 0);
  EXPECT_EQ(p.ring_base_block, -1);
  EXPECT_EQ(p.sink_base_block, -1);  // the sinks in memory of their own
  EXPECT_EQ(p.sink_run_blocks, 0);
  EXPECT_EQ(p.num_sink_blocks, 1);  // still a v2 cache: every table's first block a sink
  EXPECT_EQ(p.dummy_block(), 1);    // past the pool: the sink memory's second block
  EXPECT_EQ(p.dtype, kv.dtype);
  EXPECT_EQ(p.block_size, kv.block_size);
  EXPECT_EQ(p.value_group_size, kv.value_group_size);
  EXPECT_EQ(p.num_window_blocks, kv.num_window_blocks);
  EXPECT_EQ(p.int4_value_hadamard, kv.int4_value_hadamard);
  const KvParts parts = kv_parts(c, p, layout);
  const int64_t sink_block_bytes = 2 * 64 * 4 * 128 * 2;  // K and V, 16-bit
  EXPECT_EQ(parts.sink, 28 * 2 * sink_block_bytes);       // 7.3 MB, not 3.7 GB
  // The pool: the dummy seat's ring alone.
  EXPECT_EQ(parts.pool,
            28 * int4_ring_blocks(kv, layout) * 4 * static_cast<int64_t>(layout.block_bytes));
  EXPECT_EQ(parts.k + parts.v, 0);
  // The cache it stands for keeps its sinks in the pool's runs.
  EXPECT_EQ(kv_parts(c, kv, layout).sink, 0);
}

TEST(ProfilingCache, V1AndPagedCachesHaveNoSinks) {
  const model::ModelConfig c = qwen25_7b_shape();
  const kv::Int4KiviLayout layout = *kv::Int4KiviLayout::create(64, 128, 128);
  KvCacheConfig v1 = int4_v2_cache(layout);
  v1.num_sink_blocks = 0;
  v1.sink_base_block = -1;
  v1.sink_run_blocks = 0;
  const KvCacheConfig p1 = profiling_kv_config(v1);
  EXPECT_EQ(p1.num_sink_blocks, 0);
  EXPECT_EQ(p1.dummy_block(), 0);
  EXPECT_EQ(kv_parts(c, p1, layout).sink, 28 * 2 * 64 * 4 * 128 * 2);  // the dummy block's

  KvCacheConfig paged;
  paged.dtype = kv::KvCacheDtype::k16Bit;
  paged.block_size = 16;
  paged.num_blocks = 50000;
  paged.num_seats = 256;
  const KvCacheConfig p = profiling_kv_config(paged);
  EXPECT_EQ(p.num_blocks, 0);
  EXPECT_EQ(p.num_sink_blocks, 0);
  const KvParts parts = kv_parts(c, p, layout);
  EXPECT_EQ(parts.k, 28 * 16 * 4 * 128 * 2);  // the dummy block alone
  EXPECT_EQ(parts.v, parts.k);
  EXPECT_EQ(parts.pool + parts.sink, 0);
}

// int4_kivi's kernel tables (the decode kernel's rotations, the prefill kernel's fp16 RoPE rows)
// and pool rows exist for the tensor-core kernels alone: fp32 compute runs the reference kernel
// and allocates none of them (72 MB at 32,768 positions on Qwen2.5-7B), nor does a 16-bit cache.
TEST(Sizes, Int4KernelRowsOnlyWhereTheTensorCoreKernelsRun) {
  // The defaults, whatever an A/B run left in the environment (both are read once, here first).
  unsetenv("S4KV_PREFILL_POOL_ROWS");
  unsetenv("S4KV_PREFILL_POOL_ROW_CAP");
  const kv::Int4KiviLayout layout = *kv::Int4KiviLayout::create(64, 128, 128);
  const KvCacheConfig kv = int4_v2_cache(layout);
  CudaBackendOptions o;
  o.max_model_len = 32768;
  const int64_t tables = 2 * int64_t{32768} * 64 * 4;  // cos and sin in fp32, every format
  const int64_t int4_rows = 64 / 16 * 4096 + int64_t{32768} * 128 * 2;
  for (const DType d : {DType::kBF16, DType::kF16}) {
    o.compute_dtype = d;
    EXPECT_TRUE(tensor_core_attention(d));
    EXPECT_EQ(pool_row_capacity(kv, o), 32768);
    EXPECT_EQ(rope_bytes(kv, o), tables + int4_rows);
  }
  o.max_model_len = 131072;  // the rows stop at 32,768 positions, the tables go on
  EXPECT_EQ(pool_row_capacity(kv, o), 32768);
  EXPECT_EQ(rope_bytes(kv, o), 4 * (tables + int4_rows) - 3 * 64 / 16 * 4096);

  o.max_model_len = 32768;
  o.compute_dtype = DType::kF32;
  EXPECT_FALSE(tensor_core_attention(o.compute_dtype));
  EXPECT_EQ(pool_row_capacity(kv, o), 0);
  EXPECT_EQ(rope_bytes(kv, o), tables);

  KvCacheConfig paged;
  paged.dtype = kv::KvCacheDtype::k16Bit;
  paged.block_size = 16;
  o.compute_dtype = DType::kBF16;
  EXPECT_EQ(pool_row_capacity(paged, o), 0);
  EXPECT_EQ(rope_bytes(paged, o), tables);
}

// The rows' cap for A/B runs (S4KV_PREFILL_POOL_ROW_CAP): whole tiles of 64 positions.
TEST(Sizes, PoolRowCapFromTheEnvironment) {
  EXPECT_EQ(parse_pool_row_cap(nullptr), kDefaultPoolRowCap);
  EXPECT_EQ(parse_pool_row_cap("131072"), 131072);
  EXPECT_EQ(parse_pool_row_cap("64"), 64);
  for (const char* bad : {"", "0", "100", "-64", "131072x", " 64", "2097152", "1e5"}) {
    EXPECT_DEATH(parse_pool_row_cap(bad), "S4KV_PREFILL_POOL_ROW_CAP") << bad;
  }
}

}  // namespace
}  // namespace s4kv::backend::cuda
