// Decode attention on tensor cores (decode_attention.cuh) and the host's plan of a step: the
// 16-bit and fp8 row kernel and the merge here, the int4_kivi kernel in decode_int4.cu, what
// they share (and the MMA fragment layout) in decode_attention_common.cuh.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "backend/cuda/act_types.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_attention.cuh"
#include "backend/cuda/decode_attention_common.cuh"
#include "backend/cuda/decode_timeline.cuh"
#include "backend/cuda/hadamard.cuh"
#include "backend/cuda/int4_kivi_device.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/tensor_core.cuh"
#include "common/check.h"

namespace s4kv::backend::cuda {
namespace {

using namespace decode_detail;  // NOLINT(google-build-using-namespace): the kernels' own pieces

constexpr int kRowWarps = 4;  // warps of the row kernel: 2 threads per position of a tile

// ---- 16-bit and fp8 rows ------------------------------------------------------------------

enum class RowFormat { kBf16, kF16, kFp8 };

// Where the positions of one sequence live for KV head g, as byte addresses of their K and V
// rows: the sequence's bases worked out once a thread block (of()), so that a position costs a
// few integer operations (the copy asks for kTile of them a tile). b is a power of two
// (kv_format.h): block p >> lb, row p & (b - 1); int4_kivi's ring row is p & ring_mask
// (int4_kivi_device.cuh's ring_row).
struct RowLocator {
  const int32_t* table;
  const unsigned char* k0;  // paged: the K cache at head g; int4_kivi: the sink blocks at head g
  const unsigned char* v0;  // paged: the V cache at head g
  int64_t row_bytes;        // from a position's row to the next row of the cache (kv_dim elements)
  int lb = 0;
  // int4_kivi: the sink block's rows (blocks before pool_end), the seat's ring (before start),
  // this step's token (staging, row q_begin - start + p).
  int start = 0, pool_end = 0, ring_mask = 0;
  int64_t num_pool = 0, sink_bytes = 0, sink_v = 0, ring_v = 0, stage_off = 0;
  const unsigned char* ring_k = nullptr;
  const unsigned char* stage_k = nullptr;
  const unsigned char* stage_v = nullptr;

  __device__ static RowLocator of(const PagedAttentionArgs& a, int seq, int g) {
    RowLocator l;
    const int64_t kv_dim = static_cast<int64_t>(a.num_kv_heads) * kD;
    const int b = a.block_size;
    l.table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks_per_seq;
    l.lb = __ffs(b) - 1;
    const int64_t es = a.cache == kv::KvCacheDtype::kFp8E4M3 ? 1 : 2;
    l.row_bytes = kv_dim * es;
    if (a.cache != kv::KvCacheDtype::kInt4Kivi) {
      l.k0 = static_cast<const unsigned char*>(a.k_cache) + g * kD * es;
      l.v0 = static_cast<const unsigned char*>(a.v_cache) + g * kD * es;
      return l;
    }
    l.start = a.seq_lens[seq] - 1;
    l.pool_end = a.pool_ends != nullptr ? a.pool_ends[seq] : 0;
    l.num_pool = a.num_pool_blocks;
    l.k0 = reinterpret_cast<const unsigned char*>(a.sink + g * kD);
    l.sink_bytes = sink_stride_or_packed(a.sink_stride, b, kv_dim) * 2;
    l.sink_v = b * l.row_bytes;
    const int64_t seat = a.seats != nullptr ? a.seats[seq] : 0;
    l.ring_k = reinterpret_cast<const unsigned char*>(
        a.residual + ring_k_offset(seat, 0, b, a.ring, kv_dim, a.seat_stride) + g * kD);
    l.ring_v = 2 * ring_v_offset(b, a.ring, kv_dim);
    l.ring_mask = ring_row_mask(b, a.ring);
    l.stage_k = reinterpret_cast<const unsigned char*>(a.staging_k);
    l.stage_v = reinterpret_cast<const unsigned char*>(a.staging_v);
    l.stage_off = ((a.query_start_loc[seq] - static_cast<int64_t>(l.start)) * kv_dim + g * kD) * 2;
    return l;
  }

  // kInt4: the locator of an int4_kivi cache, else of a paged cache.
  template <bool kInt4>
  __device__ void rows(int p, const unsigned char*& k, const unsigned char*& v) const {
    const int blk = p >> lb, in_block = p & ((1 << lb) - 1);
    if constexpr (!kInt4) {
      const int64_t off = ((static_cast<int64_t>(__ldg(table + blk)) << lb) | in_block) * row_bytes;
      k = k0 + off;
      v = v0 + off;
    } else if (blk < pool_end) {  // the sink block
      k = k0 + (__ldg(table + blk) - num_pool) * sink_bytes + in_block * row_bytes;
      v = k + sink_v;
    } else if (p < start) {  // the residual ring
      k = ring_k + static_cast<int64_t>(p & ring_mask) * row_bytes;
      v = k + ring_v;
    } else {  // this step's token
      const int64_t off = stage_off + static_cast<int64_t>(p) * row_bytes;
      k = stage_k + off;
      v = stage_v + off;
    }
  }
};

// Tiles in flight per thread block: this one and the next (S4KV_ROW_STAGES overrides it for a
// measurement, tools/device_attention.sh ab).
#ifndef S4KV_ROW_STAGES
#define S4KV_ROW_STAGES 2
#endif
constexpr int kRowStages = S4KV_ROW_STAGES;
static_assert(kRowStages >= 2, "the row kernel's pipeline");

template <RowFormat F>
__host__ __device__ constexpr int row_bytes() {  // a staged row: 128 values and 16 bytes of pad
  return (F == RowFormat::kFp8 ? kD : 2 * kD) + 16;
}
template <RowFormat F>
__host__ __device__ constexpr int rows_smem_bytes() {
  return kRowStages * 2 * 16 * kRowWarps * row_bytes<F>();
}

// Tiles of 16 kRowWarps positions stream through shared memory (cp.async, K rows then V rows,
// each padded by 16 bytes against bank conflicts); warp w takes positions 16 w .. 16 w + 15
// of each tile.
// kInt4Rows: int4_kivi's row items (its sink block, window, tail and staging), else a paged
// cache's.
template <RowFormat F, bool kFusedMerge, bool kInt4Rows>
__global__ void __launch_bounds__(kRowWarps * 32)
    decode_rows_kernel(PagedAttentionArgs a, DecodeLaunch d) {
  constexpr bool kBf16 = F == RowFormat::kBf16;
  constexpr bool kFp8 = F == RowFormat::kFp8;
  constexpr int kTile = 16 * kRowWarps;
  constexpr int kRowBytes = row_bytes<F>();
  constexpr int kChunks = (kRowBytes - 16) / 16;
  constexpr int kStageBytes = 2 * kTile * kRowBytes;
  S4KV_DYNAMIC_SHARED(dsmem);
  S4KV_TIMELINE_BEGIN(kTimelineRows);
  allow_dependent_launch();
  grid_dependency_wait();
  // Graph replay: the grid is the plan's capacity; the step's counts are in d.live. Item
  // blockIdx.y, KV head blockIdx.x (live items first in dispatch order, as the int4 kernel).
  const int item =
      (d.live != nullptr ? d.live[0] : d.num_int4_items) + static_cast<int>(blockIdx.y);
  if (d.live != nullptr && item >= d.live[1]) return;
  const DecodeItem it = d.items[item];
  const int g = blockIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, r = lane / 4, i = lane % 4;
  const int group = a.num_heads / a.num_kv_heads;
  const int token = a.query_start_loc[it.seq];

  const RowLocator loc = RowLocator::of(a, it.seq, g);
  const int n = (it.end - it.begin + kTile - 1) / kTile;
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(dsmem));
  // Stage k % kRowStages <- the K and V rows of tile k (zeros past the item's end).
  auto issue = [&](int k) {
    if (k < n) {
      // kChunks consecutive threads copy one row, so that a warp's copy reads whole 128-byte
      // lines (2 16-bit rows or 4 fp8 rows): thread t takes chunk t % kChunks of the K and V
      // rows of positions t / kChunks + kPer j. (A lane pair a row, 16 rows a warp, made the
      // L2 the limit, at 84 % of its throughput with the DRAM at 52 %: ncu, B 16, ctx 8192.)
      constexpr int kPer = kRowWarps * 32 / kChunks;  // positions a pass
      static_assert(kRowWarps * 32 % kChunks == 0 && kTile % kPer == 0, "the copy's passes");
      const int chunk = 16 * (static_cast<int>(threadIdx.x) % kChunks);
      const uint32_t dst = (k % kRowStages) * kStageBytes + chunk;
      const int first = it.begin + k * kTile;
#pragma unroll
      for (int j = 0; j < kTile / kPer; ++j) {
        const int pos = static_cast<int>(threadIdx.x) / kChunks + kPer * j;
        const uint32_t kd = dst + pos * kRowBytes, vd = kd + kTile * kRowBytes;
        if (first + pos < it.end) {
          const unsigned char *kr, *vr;
          loc.rows<kInt4Rows>(first + pos, kr, vr);
          cp_async16_shared(smem_base + kd, kr + chunk);
          cp_async16_shared(smem_base + vd, vr + chunk);
        } else {
          *reinterpret_cast<uint4*>(dsmem + kd) = make_uint4(0, 0, 0, 0);
          *reinterpret_cast<uint4*>(dsmem + vd) = make_uint4(0, 0, 0, 0);
        }
      }
    }
    cp_async_commit();
  };
  for (int j = 0; j + 1 < kRowStages; ++j) issue(j);

  // The query as the scores' B fragment (k-tile t: qa[2t], qa[2t + 1]). 16-bit: channels
  // 16t + 2i, + 1 and 16t + 8 + 2i, + 1 of head r, as ldmatrix hands out the keys' channels;
  // fp8: the lane's channel pairs (decode_attention_common.cuh), as the keys are widened below.
  uint32_t qa[16];
  {
    float q[16][2];
    if constexpr (kFp8) {
      load_query(a, token, g, group, q);
    } else {
      const float f = a.scale * kLog2e;
      const float* row = a.q + static_cast<int64_t>(token) * a.q_stride + (g * group + r) * kD;
#pragma unroll
      for (int m = 0; m < 16; ++m) {
        const float2 x = r < group ? *reinterpret_cast<const float2*>(row + 8 * m + 2 * i)
                                   : make_float2(0.0f, 0.0f);
        q[m][0] = x.x * f;
        q[m][1] = x.y * f;
      }
    }
#pragma unroll
    for (int m = 0; m < 16; ++m) qa[m] = pack2<kBf16>(q[m][0], q[m][1]);
  }
  // ldmatrix rows of the 16-bit tiles: lane l gives row l % 8 of matrix l / 8; for the keys
  // (A = K) matrix j holds positions 8 (j % 2) + 0..7 and channels 8 (j / 2) + 0..7 of a k-tile,
  // for the values (A = V^T, transposed) positions 8 (j / 2) + 0..7, channels 8 (j % 2) + 0..7
  // of an m-tile.
  const int lm = lane / 8, lr = lane % 8;
  const uint32_t k_lane = (lr + 8 * (lm % 2)) * kRowBytes + 16 * (lm / 2);
  const uint32_t v_lane = (lr + 8 * (lm / 2)) * kRowBytes + 16 * (lm % 2);
  WarpSoftmax<1> st;
  S4KV_TIMELINE_MARK(kMarkLoop);
  for (int k = 0; k < n; ++k) {
    issue(k + kRowStages - 1);        // into the stage tile k - 1 used
    cp_async_wait<kRowStages - 1>();  // tile k has landed
    __syncthreads();
    const uint32_t ks_off = (k % kRowStages) * kStageBytes + 16 * warp * kRowBytes;
    const unsigned char* ks = dsmem + ks_off;
    const unsigned char* vs = ks + kTile * kRowBytes;
    const int p0 = it.begin + k * kTile + 16 * warp;
    // Scores (C fragment: positions p0 + r, p0 + r + 8 x heads 2i, 2i + 1) with the keys as
    // the A operand and the query as the B operand.
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if constexpr (kFp8) {
      // The lane's 16 channel pairs of positions p0 + r and p0 + r + 8, widened to fp16.
      uint32_t kb[2][16];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const unsigned char* kr = ks + (r + 8 * nt) * kRowBytes;
        const uint4 lo = *reinterpret_cast<const uint4*>(kr + 16 * i);
        const uint4 hi = *reinterpret_cast<const uint4*>(kr + 64 + 16 * i);
        const uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
        for (int m = 0; m < 16; ++m) kb[nt][m] = fp8x2_to_f16x2(w[m / 2] >> (16 * (m % 2)));
      }
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        const uint32_t ka[4] = {kb[0][2 * t], kb[1][2 * t], kb[0][2 * t + 1], kb[1][2 * t + 1]};
        mma_m16n8k16<kBf16>(c, ka, qa[2 * t], qa[2 * t + 1]);
      }
    } else {
#pragma unroll
      for (int t = 0; t < 8; ++t) {  // k-tile t: channels 16t .. 16t + 15
        uint32_t ka[4];
        ldmatrix_x4(ka, smem_base + ks_off + k_lane + 32 * t);
        mma_m16n8k16<kBf16>(c, ka, qa[2 * t], qa[2 * t + 1]);
      }
    }
    float s[4];
    s[0] = p0 + r < it.end ? c[0] : -INFINITY;
    s[1] = p0 + r < it.end ? c[1] : -INFINITY;
    s[2] = p0 + r + 8 < it.end ? c[2] : -INFINITY;
    s[3] = p0 + r + 8 < it.end ? c[3] : -INFINITY;
    st.update(s);
    // The probabilities transposed into the PV B fragment (positions p0 + 2i.. of head r).
    const uint32_t b0 = transpose8x8_b16(pack2<kBf16>(s[0], s[1]));
    const uint32_t b1 = transpose8x8_b16(pack2<kBf16>(s[2], s[3]));
    if constexpr (kFp8) {
      // Values of positions p0 + 2i + {0, 1, 8, 9}: per 32-channel group, the lane's word.
      uint32_t vw[4][4];  // [position][group]
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const unsigned char* vr = vs + (2 * i + (j & 1) + 8 * (j >> 1)) * kRowBytes;
#pragma unroll
        for (int g32 = 0; g32 < 4; ++g32) {
          vw[j][g32] = *reinterpret_cast<const uint32_t*>(vr + 32 * g32 + 4 * r);
        }
      }
#pragma unroll
      for (int g32 = 0; g32 < 4; ++g32) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int k0 = 2 * h;  // byte of row r; row r + 8 is the next byte
          const uint32_t sel_r = static_cast<uint32_t>(k0 | ((4 + k0) << 4));
          const uint32_t sel_r8 = static_cast<uint32_t>((k0 + 1) | ((5 + k0) << 4));
          const uint32_t av[4] = {fp8x2_to_f16x2(__byte_perm(vw[0][g32], vw[1][g32], sel_r)),
                                  fp8x2_to_f16x2(__byte_perm(vw[0][g32], vw[1][g32], sel_r8)),
                                  fp8x2_to_f16x2(__byte_perm(vw[2][g32], vw[3][g32], sel_r)),
                                  fp8x2_to_f16x2(__byte_perm(vw[2][g32], vw[3][g32], sel_r8))};
          mma_m16n8k16<kBf16>(st.acc[2 * g32 + h], av, b0, b1);
        }
      }
    } else {
#pragma unroll
      for (int mt = 0; mt < 8; ++mt) {  // m-tile mt: channels 16 mt .. 16 mt + 15
        uint32_t av[4];
        ldmatrix_x4_trans(av, smem_base + ks_off + kTile * kRowBytes + v_lane + 32 * mt);
        mma_m16n8k16<kBf16>(st.acc[mt], av, b0, b1);
      }
    }
    __syncthreads();  // the stage is refilled next iteration
  }
  S4KV_TIMELINE_MARK(kMarkLoopEnd);
  cp_async_wait<0>();
  __syncthreads();
  write_partial<kRowWarps, kFp8 ? ChannelMap::kPhys : ChannelMap::kNatural>(
      st, reinterpret_cast<float*>(dsmem),
      d.partials + (static_cast<int64_t>(item) * a.num_kv_heads + g) * group * kDecodePartialFloats,
      group, kD);
  if constexpr (kFusedMerge) merge_if_last<kRowWarps * 32>(a, d, it.merge, g, dsmem);
  S4KV_TIMELINE_MARK(kMarkExit);
}

// The row kernel for F and the merge with its shared memory attribute set (once): its shared
// memory bytes.
template <RowFormat F, bool kFusedMerge = false, bool kInt4Rows = false>
int configured_rows_kernel() {
  constexpr int kSmem = rows_smem_bytes<F>();
  static_assert(kSmem >= (kRowWarps * 8 * kD + kRowWarps * 8 * 6) * 4, "epilogue");
  static const bool attribute_set = [] {
    S4KV_CUDA_CHECK(cudaFuncSetAttribute(decode_rows_kernel<F, kFusedMerge, kInt4Rows>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    if (kRowStages > 2) {  // deeper stages: room for more than one thread block
      S4KV_CUDA_CHECK(cudaFuncSetAttribute(decode_rows_kernel<F, kFusedMerge, kInt4Rows>,
                                           cudaFuncAttributePreferredSharedMemoryCarveout,
                                           cudaSharedmemCarveoutMaxShared));
    }
    return true;
  }();
  (void)attribute_set;
  return kSmem;
}

template <RowFormat F>
void launch_rows(const PagedAttentionArgs& a, const DecodeLaunch& d, cudaStream_t stream) {
  S4KV_CHECK(d.num_items - d.num_int4_items <= 65535,
             "decode attention: ", d.num_items - d.num_int4_items, " row items");
  const dim3 grid(static_cast<unsigned>(a.num_kv_heads),
                  static_cast<unsigned>(d.num_items - d.num_int4_items));
  auto launch = [&]<bool kInt4Rows>() {
    auto run = [&]<bool kFused>() {
      const int smem = configured_rows_kernel<F, kFused, kInt4Rows>();
      launch_dependent(decode_rows_kernel<F, kFused, kInt4Rows>, grid, kRowWarps * 32, smem, stream,
                       a, d);
    };
    d.merge_counts != nullptr ? run.template operator()<true>() : run.template operator()<false>();
  };
  if constexpr (F != RowFormat::kFp8) {  // int4_kivi's rows are 16-bit
    if (a.cache == kv::KvCacheDtype::kInt4Kivi) return launch.template operator()<true>();
  }
  launch.template operator()<false>();
}

template <RowFormat F>
int rows_blocks_per_sm() {
  static const int blocks = [] {
    const int smem = configured_rows_kernel<F>();
    int n = 0;
    S4KV_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &n, decode_rows_kernel<F, false, false>, kRowWarps * 32, smem));
    return n;
  }();
  return blocks;
}

// ---- merge --------------------------------------------------------------------------------

// The maximum (kMax) or the sum of v over the block's kD threads, in every thread.
template <bool kMax>
__device__ float block_reduce(float v, float* scratch) {
  for (int o = 16; o > 0; o /= 2) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, w) : v + w;
  }
  __syncthreads();  // scratch is free
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  v = scratch[0];
#pragma unroll
  for (int w = 1; w < kD / 32; ++w) v = kMax ? fmaxf(v, scratch[w]) : v + scratch[w];
  return v;
}

constexpr int kMergeLoads = 16;  // partial sums a merge thread has in flight

// One thread block of kD threads per (sequence, query head): the items' maxima and weights
// computed kD items at a time (a thread each), then each thread sums its channel over them.
template <typename T>
__global__ void __launch_bounds__(kD) decode_merge_kernel(PagedAttentionArgs a, DecodeLaunch d) {
  __shared__ float row[kD];
  __shared__ float weight[kD];
  __shared__ float scratch[kD / 32];
  S4KV_TIMELINE_BEGIN(kTimelineMerge);
  allow_dependent_launch();
  grid_dependency_wait();
  // The flag, the sequence and the loads that follow from it are issued before the flag is
  // looked at (whatever a merged step loads is left unused).
  const int merged = d.merge_flag != nullptr ? *d.merge_flag : 0;
  const DecodeSeq sq = d.seqs[blockIdx.x];
  const int h = blockIdx.y, c = threadIdx.x;
  const int group = a.num_heads / a.num_kv_heads, g = h / group, hh = h % group;
  const int n4 = sq.int4_end - sq.int4_begin, n = n4 + sq.rows_end - sq.rows_begin;
  auto part = [&](int j) {  // the sequence's j-th item: its int4 items, then its row items
    const int item = j < n4 ? sq.int4_begin + j : sq.rows_begin + (j - n4);
    return d.partials +
           ((static_cast<int64_t>(item) * a.num_kv_heads + g) * group + hh) * kDecodePartialFloats;
  };
  // Loaded before the first reduction, none depending on another: thread c's first item's
  // maximum and sum (item c), and the first kMergeLoads items' sums of channel c.
  float p0 = -INFINITY, p1 = 0.0f, first[kMergeLoads];
  if (c < n) {
    const float* p = part(c);
    p0 = p[0];
    p1 = p[1];
  }
#pragma unroll
  for (int u = 0; u < kMergeLoads; ++u) first[u] = u < n ? part(u)[2 + c] : 0.0f;
  // The ring row's loads beside the partials', its stores at the end (they could alias the
  // partials for all the compiler knows, and would hold back the loads after them).
  RingValue ring;
  if (d.write_residual && h < a.num_kv_heads) ring = ring_value_of(a, sq.token, h, c);
  if (merged != 0) return;  // the items merged this step
  float mx = p0;
  for (int j = c + kD; j < n; j += kD) mx = fmaxf(mx, part(j)[0]);
  mx = block_reduce<true>(mx, scratch);
  // int4_kivi v2's pool values are in the Hadamard domain: summed apart.
  float plain = 0.0f, had = 0.0f, sum = 0.0f;
  for (int j0 = 0; j0 < n; j0 += kD) {
    float f = 0.0f;
    if (j0 + c < n) {
      if (j0 > 0) {
        const float* p = part(j0 + c);
        p0 = p[0];
        p1 = p[1];
      }
      if (p0 != -INFINITY) {
        f = fast_exp2(p0 - mx);
        sum += f * p1;
      }
    }
    __syncthreads();  // the previous round's weights are read
    weight[c] = f;
    __syncthreads();
    // kMergeLoads items' sums a round, their loads issued together (an item's weight is 0 when
    // it has no positions: its sum is then left out, whatever it holds).
    const int m = min(kD, n - j0);
    for (int k0 = 0; k0 < m; k0 += kMergeLoads) {
      float v[kMergeLoads];
#pragma unroll
      for (int u = 0; u < kMergeLoads; ++u) {
        v[u] = j0 + k0 == 0 ? first[u] : k0 + u < m ? part(j0 + k0 + u)[2 + c] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kMergeLoads; ++u) {
        const int k = k0 + u;
        if (k >= m) break;
        const float w = weight[k];
        const float x = w != 0.0f ? w * v[u] : 0.0f;
        if (j0 + k < n4 && a.value_hadamard) {
          had += x;
        } else {
          plain += x;
        }
      }
    }
  }
  sum = block_reduce<false>(sum, scratch);
  float o = plain / sum;
  if (a.value_hadamard) {  // uniform over the block
    o += hadamard128(had / sum, row, c);
  }
  T* out = static_cast<T*>(a.out) + (static_cast<int64_t>(sq.token) * a.num_heads + h) * kD;
  out[c] = from_f32<T>(o);
  store_ring_value(ring);
  S4KV_TIMELINE_MARK(kMarkExit);
}

}  // namespace

#if defined(S4KV_DECODE_TIMELINE)
void attach_decode_timeline_rows(const Timeline& t) { attach_timeline_here(t); }
#endif

bool decode_kernels_support(int num_heads, int num_kv_heads, const PagedAttentionArgs& a) {
  if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0 || num_heads / num_kv_heads > 8) {
    return false;
  }
  if (a.cache == kv::KvCacheDtype::kInt4Kivi) {
    const int b = a.layout.block_size;
    return !a.keys_post_rope && a.layout.head_dim == kD && (b == 32 || b == 64 || b == 128);
  }
  return true;
}

namespace {

// Thread blocks a KV head's items get in one wave over the device.
int64_t items_per_wave(const DecodeShape& shape) {
  return std::max<int64_t>(
      1, int64_t{shape.num_sms} * std::max(1, shape.blocks_per_sm) / shape.num_kv_heads);
}

// The split of decode contexts of n[s] blocks into items of `chunk` blocks (none shorter than
// kMinItemPositions but a context's last): the chunk of least estimated time among a geometric
// series from the shortest to the longest context and the least chunks whose items fill one or
// two whole waves (a wave: `wave` items), keeping the items within decode_capacity. Estimate,
// in positions of one item's work: waves x positions an item + kMergeItemPositions x the most
// items a sequence has (its merge adds them one after another).
constexpr int64_t kMinItemPositions = 64;  // one tile of the row kernel
// What merging one more item costs, in positions read by an item (H200: a fit of the row
// kernel and merge times of attention_h200_fdcd0f6.json, where items of 64 positions made short
// contexts slower than items of 256, against attention_h200.json at c1d3463).
constexpr int64_t kMergeItemPositions = 12;
// S4KV_DECODE_WAVES=N (a measurement, e.g. of how the thread blocks' spread of end times shrinks
// with smaller items): the least chunk whose items fill N waves, whatever the estimate says; 0
// (unset) lets split_chunk choose. Read once.
int64_t decode_waves_override() {
  static const int64_t waves = [] {
    const char* env = std::getenv("S4KV_DECODE_WAVES");
    if (env == nullptr) return int64_t{0};
    const int64_t v = std::atoll(env);
    S4KV_CHECK(v >= 1 && v <= 16, "S4KV_DECODE_WAVES=", env, ": expected 1 to 16");
    return v;
  }();
  return waves;
}

int64_t split_chunk(const std::vector<int64_t>& n, int64_t B, int64_t wave) {
  const int64_t min_chunk = std::max<int64_t>(1, (kMinItemPositions + B - 1) / B);
  const int64_t longest = std::max<int64_t>(min_chunk, *std::max_element(n.begin(), n.end()));
  const auto num_seqs = static_cast<int64_t>(n.size());
  auto items = [&](int64_t chunk) {
    int64_t k = 0;
    for (const int64_t x : n) k += (x + chunk - 1) / chunk;
    return k;
  };
  auto least_fitting = [&](int64_t waves) {  // the least chunk whose items fit `waves` waves
    int64_t lo = min_chunk, hi = longest;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (items(mid) <= waves * wave) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return lo;
  };
  if (const int64_t forced = decode_waves_override(); forced > 0) return least_fitting(forced);
  int64_t best = 0, best_cost = 0;
  auto consider = [&](int64_t chunk) {
    const int64_t k = items(chunk);
    if (k > 2 * wave + num_seqs) return;  // decode_capacity
    const int64_t cost =
        (k + wave - 1) / wave * chunk * B + kMergeItemPositions * ((longest + chunk - 1) / chunk);
    if (best == 0 || cost < best_cost || (cost == best_cost && chunk > best)) {
      best = chunk;
      best_cost = cost;
    }
  };
  for (int64_t chunk = min_chunk; chunk < longest; chunk = std::max(chunk + 1, chunk * 5 / 4)) {
    consider(chunk);
  }
  consider(longest);
  for (int64_t waves = 1; waves <= 2; ++waves) {
    if (items(longest) <= waves * wave) consider(least_fitting(waves));
  }
  return best;  // consider(longest) always fits: one item a sequence
}

}  // namespace

bool merge_in_items(const DecodePlan& plan) {
  for (const DecodeSeq& ds : plan.seqs) {
    if (ds.int4_end - ds.int4_begin + ds.rows_end - ds.rows_begin > kFusedMergeItems) return false;
  }
  return true;
}

DecodeMerge decode_merge_mode() {
  static const DecodeMerge mode = [] {
    const char* env = std::getenv("S4KV_DECODE_MERGE");
    const std::string_view v = env != nullptr ? env : "kernel";
    S4KV_CHECK(v == "kernel" || v == "fused", "S4KV_DECODE_MERGE=", v,
               ": expected kernel or fused");
    return v == "fused" ? DecodeMerge::kFused : DecodeMerge::kKernel;
  }();
  return mode;
}

int decode_blocks_per_sm(kv::KvCacheDtype cache, int block_size, int64_t value_group_size) {
  switch (cache) {
    case kv::KvCacheDtype::kInt4Kivi: {
      const bool served =
          (block_size == 32 || block_size == 64 || block_size == 128) &&
          (value_group_size == 32 || value_group_size == 64 || value_group_size == 128);
      return served ? int4_blocks_per_sm(block_size, static_cast<int>(kD / value_group_size))
                    : DecodeShape{}.blocks_per_sm;
    }
    case kv::KvCacheDtype::kFp8E4M3:
      return rows_blocks_per_sm<RowFormat::kFp8>();
    default:
      return rows_blocks_per_sm<RowFormat::kBf16>();  // kF16: the same shared memory
  }
}

DecodeCapacity decode_capacity(int64_t num_seqs, const DecodeShape& shape) {
  // plan_attention: at most two waves of split items or, past that, two waves + one per
  // sequence (int4 items, or the row items of the other formats), plus two row items per
  // int4_kivi sequence.
  const int64_t split =
      std::max<int64_t>(2, decode_waves_override()) * items_per_wave(shape) + num_seqs;
  if (shape.cache == kv::KvCacheDtype::kInt4Kivi) return {split, 2 * num_seqs};
  return {0, split};
}

int64_t max_decode_items(int64_t max_num_seqs, const DecodeShape& shape) {
  const DecodeCapacity c = decode_capacity(max_num_seqs, shape);
  return c.int4_items + c.row_items;
}

void plan_attention(const ForwardBatch& b, const DecodeShape& shape, bool decode,
                    DecodePlan& plan) {
  plan.items.clear();
  plan.seqs.clear();
  plan.other_tokens.clear();
  plan.pool_ends.clear();
  plan.num_int4_items = 0;
  const int64_t num_seqs = b.num_seqs(), B = shape.block_size;
  const bool int4 = shape.cache == kv::KvCacheDtype::kInt4Kivi;
  // int4_kivi: where the int4 blocks end (the window block, when the ring holds it, and the
  // partly filled block are read 16-bit from the ring).
  if (int4) {
    plan.pool_ends.resize(static_cast<size_t>(num_seqs));
    for (int64_t s = 0; s < num_seqs; ++s) {
      plan.pool_ends[static_cast<size_t>(s)] =
          static_cast<int32_t>(int4_pool_end(b, s, B, shape.ring, shape.num_pool_blocks));
    }
  }
  std::vector<int64_t> main_blocks;  // per decode sequence: blocks of its main range
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int32_t q0 = b.query_start_loc[s], q1 = b.query_start_loc[s + 1];
    if (!decode || q1 - q0 != 1) {
      for (int32_t t = q0; t < q1; ++t) plan.other_tokens.push_back(t);
      continue;
    }
    int64_t n = (b.seq_lens[s] + B - 1) / B;
    if (int4) {
      const int32_t* table = b.block_tables.data() + s * b.max_num_blocks_per_seq;
      const int64_t pool_end = plan.pool_ends[static_cast<size_t>(s)];
      n = pool_end > 0 && table[0] >= shape.num_pool_blocks ? pool_end - 1 : pool_end;
    }
    main_blocks.push_back(n);
  }
  if (main_blocks.empty()) return;
  const int64_t chunk = split_chunk(main_blocks, B, items_per_wave(shape));
  std::vector<DecodeItem> rows;
  size_t d = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int32_t q0 = b.query_start_loc[s], q1 = b.query_start_loc[s + 1];
    if (!decode || q1 - q0 != 1) continue;
    const int64_t n = main_blocks[d++];
    const int32_t len = b.seq_lens[s];
    DecodeSeq ds;
    ds.token = q0;
    ds.int4_begin = static_cast<int32_t>(plan.items.size());
    ds.rows_begin = static_cast<int32_t>(rows.size());
    DecodeItem it;
    it.seq = static_cast<int32_t>(s);
    it.merge = static_cast<int32_t>(plan.seqs.size());
    if (int4) {
      const int32_t* table = b.block_tables.data() + s * b.max_num_blocks_per_seq;
      const int64_t pool_end = plan.pool_ends[static_cast<size_t>(s)];
      const int64_t first = pool_end - n;  // 1 after a sink block
      for (int64_t c = 0; c < n; c += chunk) {
        it.begin = static_cast<int32_t>(first + c);
        it.end = static_cast<int32_t>(std::min(first + n, first + c + chunk));
        for (int64_t k = it.begin; k < it.end; ++k) {
          S4KV_CHECK(table[k] < shape.num_pool_blocks, "decode plan: block ", k, " of sequence ", s,
                     " is a sink block inside the int4 range");
        }
        plan.items.push_back(it);
      }
      if (first == 1) {  // the sink block
        it.begin = 0;
        it.end = static_cast<int32_t>(B);
        rows.push_back(it);
      }
      it.begin = static_cast<int32_t>(pool_end * B);
      it.end = len;
      rows.push_back(it);
    } else {
      for (int64_t c = 0; c < n; c += chunk) {
        it.begin = static_cast<int32_t>(c * B);
        it.end = static_cast<int32_t>(std::min<int64_t>(len, (c + chunk) * B));
        rows.push_back(it);
      }
    }
    ds.int4_end = static_cast<int32_t>(plan.items.size());
    ds.rows_end = static_cast<int32_t>(rows.size());
    plan.seqs.push_back(ds);
  }
  // [int4 items][row items]: each kernel takes one run.
  plan.num_int4_items = static_cast<int32_t>(plan.items.size());
  for (DecodeSeq& ds : plan.seqs) {
    ds.rows_begin += plan.num_int4_items;
    ds.rows_end += plan.num_int4_items;
  }
  plan.items.insert(plan.items.end(), rows.begin(), rows.end());
}

void launch_decode_attention(const PagedAttentionArgs& a, const DecodeLaunch& d,
                             cudaStream_t stream, const DecodeFork* fork) {
  if (d.num_seqs == 0) return;
  S4KV_CHECK(
      a.cache != kv::KvCacheDtype::kInt4Kivi ||
          ring_stride_fits(a.seat_stride, a.block_size, a.ring, int64_t{a.num_kv_heads} * kD),
      "decode attention: int4_kivi ring stride");
  const int num_rows = d.num_items - d.num_int4_items;
  const bool forked = fork != nullptr && d.num_int4_items > 0 && num_rows > 0;
  cudaStream_t rows_stream = stream;
  if (forked) {
    S4KV_CUDA_CHECK(cudaEventRecord(fork->fork, stream));
    S4KV_CUDA_CHECK(cudaStreamWaitEvent(fork->side, fork->fork, 0));
    rows_stream = fork->side;
  }
  auto int4_items = [&] {
    if (d.num_int4_items == 0) return;
    launch_decode_int4(a, d, stream);
    S4KV_CUDA_CHECK(cudaGetLastError());
  };
  auto row_items = [&] {
    if (num_rows == 0) return;
    if (a.cache == kv::KvCacheDtype::kFp8E4M3) {
      launch_rows<RowFormat::kFp8>(a, d, rows_stream);
    } else if (a.bf16) {
      launch_rows<RowFormat::kBf16>(a, d, rows_stream);
    } else {
      launch_rows<RowFormat::kF16>(a, d, rows_stream);
    }
    S4KV_CUDA_CHECK(cudaGetLastError());
  };
  // Forked, the int4 kernel goes first: its blocks take the device's wave, the row kernel's the
  // slots left. On one stream the order only decides, when the merge is fused, which kernel's
  // blocks finish last and merge: the row items go first there, so that the tests' launches
  // (unforked) exercise the int4 kernel's merge as the 16-bit caches do the row kernel's.
  const bool fused = d.merge_counts != nullptr;
  if (fused && !forked) {
    row_items();
    int4_items();
  } else {
    int4_items();
    row_items();
  }
  if (forked) {
    S4KV_CUDA_CHECK(cudaEventRecord(fork->join, fork->side));
    S4KV_CUDA_CHECK(cudaStreamWaitEvent(stream, fork->join, 0));
  }
  if (fused && d.merge_flag == nullptr) return;  // else the step's flag chooses
  const dim3 grid(static_cast<unsigned>(d.num_seqs), static_cast<unsigned>(a.num_heads));
  with_act_type(a.out_dtype, [&](auto zero) {
    launch_dependent(decode_merge_kernel<decltype(zero)>, grid, kD, 0, stream, a, d);
  });
  S4KV_CUDA_CHECK(cudaGetLastError());
}

}  // namespace s4kv::backend::cuda
