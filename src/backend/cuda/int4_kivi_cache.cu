// int4_kivi_cache.cuh's launchers: plain copies of 16-bit bits (gather_fills: a thread block per
// 8 tokens of a filled block; residual_write: one per token).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/int4_kivi_cache.cuh"
#include "backend/cuda/int4_kivi_device.cuh"
#include "backend/cuda/int4_kivi_quantize.cuh"
#include "backend/cuda/launch.cuh"

namespace s4kv::backend::cuda {
namespace {

constexpr int kD = 128;

// Thread block j of fill j / chunks (chunks = ceil(B / kFillTokens)): the 16-bit K and V rows
// (every kv head) of kFillTokens of the fill's positions index * B + t, 16 bytes per thread and
// load. A graph replay's grid is its capacity, so blocks past the step's fills return at once.
constexpr int kFillTokens = 8;
constexpr int kFillThreads = 256;

__global__ void __launch_bounds__(kFillThreads)
    gather_fills_kernel(const Int4FillBlock* fills, Int4CacheBatch batch, Int4CacheLayer layer,
                        uint16_t* scratch_k, uint16_t* scratch_v, const int32_t* live_fills) {
  const int b = layer.block_size;
  const int chunks = (b + kFillTokens - 1) / kFillTokens;
  const int fill = static_cast<int>(blockIdx.x) / chunks;
  allow_dependent_launch();
  grid_dependency_wait();
  if (live_fills != nullptr && fill >= *live_fills) return;
  const Int4FillBlock f = fills[fill];
  const int t0 = (static_cast<int>(blockIdx.x) % chunks) * kFillTokens;
  const int64_t kv_dim = static_cast<int64_t>(layer.num_kv_heads) * kD;
  const int64_t row_vecs = kv_dim / 8;  // uint4 per row
  const int q_begin = batch.query_start_loc[f.seq];
  const int start = batch.seq_lens[f.seq] - (batch.query_start_loc[f.seq + 1] - q_begin);
  for (int64_t e = threadIdx.x; e < kFillTokens * row_vecs; e += kFillThreads) {
    const int t = t0 + static_cast<int>(e / row_vecs);
    if (t >= b) break;
    const int64_t i = (e % row_vecs) * 8;
    const int64_t pos = static_cast<int64_t>(f.index) * b + t;
    const uint16_t *k, *v;
    if (pos >= start) {
      k = layer.staging_k + (q_begin + pos - start) * kv_dim;
      v = layer.staging_v + (q_begin + pos - start) * kv_dim;
    } else {
      const int64_t slot = batch.seats[f.seq];
      k = layer.residual + ring_k_offset(slot, pos, b, layer.ring, kv_dim, layer.seat_stride);
      v = k + ring_v_offset(b, layer.ring, kv_dim);
    }
    uint16_t *dk, *dv;
    if (f.dest < 0) {
      const int32_t id = batch.block_tables[f.seq * batch.max_blocks_per_seq + f.index];
      dk = layer.sink +
           (id - layer.num_pool_blocks) * sink_stride_or_packed(layer.sink_stride, b, kv_dim) +
           static_cast<int64_t>(t) * kv_dim + i;
      dv = dk + static_cast<int64_t>(b) * kv_dim;
    } else {
      const int64_t g = i / kD, c = i % kD;
      const int64_t dst =
          ((static_cast<int64_t>(f.dest) * layer.num_kv_heads + g) * b + t) * kD + c;
      dk = scratch_k + dst;
      dv = scratch_v + dst;
    }
    *reinterpret_cast<uint4*>(dk) = *reinterpret_cast<const uint4*>(k + i);
    *reinterpret_cast<uint4*>(dv) = *reinterpret_cast<const uint4*>(v + i);
  }
}

__global__ void residual_write_kernel(Int4CacheBatch batch, Int4CacheLayer layer) {
  allow_dependent_launch();
  grid_dependency_wait();
  const int64_t tok = blockIdx.x;
  const int s = batch.token_seq[tok];
  const int64_t p = batch.positions[tok];
  const int b = layer.block_size;
  if (!ring_keeps(p, batch.seq_lens[s], b, layer.ring)) return;
  const int64_t kv_dim = static_cast<int64_t>(layer.num_kv_heads) * kD;
  const int64_t slot = batch.seats[s];
  uint16_t* k = layer.residual + ring_k_offset(slot, p, b, layer.ring, kv_dim, layer.seat_stride);
  uint16_t* v = k + ring_v_offset(b, layer.ring, kv_dim);
  for (int64_t i = threadIdx.x * 8; i < kv_dim; i += blockDim.x * 8) {  // 16 bytes a load
    *reinterpret_cast<uint4*>(k + i) =
        *reinterpret_cast<const uint4*>(layer.staging_k + tok * kv_dim + i);
    *reinterpret_cast<uint4*>(v + i) =
        *reinterpret_cast<const uint4*>(layer.staging_v + tok * kv_dim + i);
  }
}

}  // namespace

void plan_int4_fills(const ForwardBatch& b, int64_t num_pool_blocks, int64_t block_size,
                     int64_t num_kv_heads, Int4FillPlan& plan) {
  plan.fills.clear();
  plan.first_position.clear();
  plan.out_index.clear();
  int32_t quantized = 0;
  for (int64_t s = 0; s < b.num_seqs(); ++s) {
    const int64_t seq_len = b.seq_lens[s];
    const int64_t start = seq_len - (b.query_start_loc[s + 1] - b.query_start_loc[s]);
    const int32_t* table = b.block_tables.data() + s * b.max_num_blocks_per_seq;
    for (int64_t i = start / block_size; i < seq_len / block_size; ++i) {
      const bool sink = table[i] >= num_pool_blocks;
      plan.fills.push_back(
          {static_cast<int32_t>(s), static_cast<int32_t>(i), sink ? -1 : quantized});
      if (sink) continue;
      ++quantized;
      for (int64_t g = 0; g < num_kv_heads; ++g) {
        plan.first_position.push_back(static_cast<int32_t>(i * block_size));
        plan.out_index.push_back(static_cast<int64_t>(table[i]) * num_kv_heads + g);
      }
    }
  }
  plan.num_quantized = quantized;
}

void launch_int4_kivi_gather_fills(const Int4FillBlock* fills, int64_t num_fills,
                                   const Int4CacheBatch& batch, const Int4CacheLayer& layer,
                                   uint16_t* scratch_k, uint16_t* scratch_v, cudaStream_t stream,
                                   const int32_t* live_fills) {
  S4KV_CHECK(num_fills >= 0 && num_fills <= 0x7fffffff && layer.block_size > 0 &&
                 layer.block_size <= 65535 && layer.num_kv_heads > 0 && layer.ring >= 1 &&
                 ring_stride_fits(layer.seat_stride, layer.block_size, layer.ring,
                                  int64_t{layer.num_kv_heads} * kD),
             "int4_kivi gather_fills: shape");
  if (num_fills == 0) return;
  const int64_t chunks = (layer.block_size + kFillTokens - 1) / kFillTokens;
  S4KV_CHECK(num_fills * chunks <= 0x7fffffff, "int4_kivi gather_fills: grid");
  launch_dependent(gather_fills_kernel, static_cast<unsigned>(num_fills * chunks), kFillThreads, 0,
                   stream, fills, batch, layer, scratch_k, scratch_v, live_fills);
  S4KV_CUDA_CHECK(cudaGetLastError());
}

void launch_int4_kivi_residual_write(const Int4CacheBatch& batch, const Int4CacheLayer& layer,
                                     cudaStream_t stream) {
  S4KV_CHECK(batch.num_tokens >= 0 && batch.num_tokens <= 0x7fffffff &&
                 ring_stride_fits(layer.seat_stride, layer.block_size, layer.ring,
                                  int64_t{layer.num_kv_heads} * kD),
             "residual_write: tokens or ring stride");
  if (batch.num_tokens == 0) return;
  launch_dependent(residual_write_kernel, static_cast<unsigned>(batch.num_tokens), 128, 0, stream,
                   batch, layer);
  S4KV_CUDA_CHECK(cudaGetLastError());
}

Int4CacheBatch int4_cache_batch(const PagedAttentionArgs& at) {
  Int4CacheBatch cb;
  cb.query_start_loc = at.query_start_loc;
  cb.seq_lens = at.seq_lens;
  cb.block_tables = at.block_tables;
  cb.max_blocks_per_seq = at.max_blocks_per_seq;
  cb.seats = at.seats;
  cb.token_seq = at.token_seq;
  cb.positions = at.positions;
  cb.num_tokens = at.num_tokens;
  return cb;
}

Int4CacheLayer int4_cache_layer(const PagedAttentionArgs& at) {
  Int4CacheLayer cl;
  cl.residual = const_cast<uint16_t*>(at.residual);
  cl.seat_stride = at.seat_stride;
  cl.sink = const_cast<uint16_t*>(at.sink);
  cl.sink_stride = at.sink_stride;
  cl.staging_k = at.staging_k;
  cl.staging_v = at.staging_v;
  cl.num_pool_blocks = at.num_pool_blocks;
  cl.ring = at.ring;
  cl.block_size = at.block_size;
  cl.num_kv_heads = at.num_kv_heads;
  return cl;
}

void launch_int4_kivi_commit_step(const Int4CommitStep& st, const Int4CacheBatch& batch,
                                  const Int4CacheLayer& layer, cudaStream_t stream) {
  launch_int4_kivi_gather_fills(st.fills, st.num_fills, batch, layer, st.scratch_k, st.scratch_v,
                                stream, st.live);
  Int4KiviCommitArgs cm;
  cm.keys = st.scratch_k;
  cm.values = st.scratch_v;
  cm.bf16 = st.bf16;
  cm.first_position = st.first_position;
  cm.cos = st.cos;
  cm.sin = st.sin;
  cm.num_positions = st.num_positions;
  cm.keys_post_rope = st.keys_post_rope;
  cm.blocks = st.pool;
  cm.out_index = st.out_index;
  cm.num_blocks = st.num_quantized * layer.num_kv_heads;
  cm.live_blocks = st.live == nullptr ? nullptr : st.live + 1;
  cm.layout = st.layout;
  cm.value_hadamard = st.value_hadamard;
  launch_int4_kivi_commit(cm, stream);
  if (!st.residual_written) launch_int4_kivi_residual_write(batch, layer, stream);
}

}  // namespace s4kv::backend::cuda
