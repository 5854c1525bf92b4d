// Device pieces shared by the decode kernels (decode_attention.cu: 16-bit and fp8 rows, merge;
// decode_int4.cu: int4_kivi pool blocks): the MMA fragment layout, the online softmax of a
// warp, the epilogue that writes an item's partial, the query's load.
//
// Fragments of mma.sync.m16n8k16 (lane = 4 r + i): A rows r and r + 8, columns 2i, 2i + 1 and
// 2i + 8, 2i + 9; B columns (n) r, rows (k) the same four; C rows r and r + 8, columns 2i, 2i + 1.
// QK^T: A = K (m: the warp's 16 positions), B = Q^T (n: the group's query heads, at most 8).
// Any order of the 128 channels along k gives the same dot products, so lane i takes the channel
// pairs m = 0..15 of its own: channels 16i + 64 (m / 8) + 2 (m % 8) + {0, 1} (RoPE's partners c
// and c + 64 are pairs m and m + 8 of one lane, and an int4 code word holds pairs m % 4 of word
// m / 4 of the lane's four words 2i, 2i + 1, 2i + 8, 2i + 9); k-tile t takes pairs 2t and 2t + 1.
// PV: O^T = V^T P^T, A = V^T (rows: 16 channels per m-tile, k: 16 positions), B = P^T, whose
// fragment is the score C fragment transposed (two 8 x 8 movmatrix: transpose8x8_b16). Each
// kernel's m-tile rows hold the channels its ChannelMap names below; with int4_kivi and fp8,
// m-tile mt = 2 g + h holds channels of one 32-channel group g (so one value scale per position
// multiplies the B fragment).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/act_types.cuh"
#include "backend/cuda/decode_attention.cuh"
#include "backend/cuda/hadamard.cuh"
#include "backend/cuda/int4_kivi_device.cuh"
#include "backend/cuda/tensor_core.cuh"

namespace s4kv::backend::cuda::decode_detail {

constexpr int kD = 128;
constexpr float kLog2e = 1.4426950408889634f;

// The cache channel of PV m-tile mt, row rho (0..15), for the fp8 rows' value fragments.
__device__ inline int phys_channel(int mt, int rho) {
  const int g = mt / 2, h = mt % 2, rr = rho % 8, hi = rho / 8;
  const int nibble = 4 * hi + h + 2 * (rr % 2);
  const int e = nibble < 4 ? 2 * nibble : 2 * (nibble - 4) + 1;
  return 8 * (4 * g + rr / 2) + e;
}

// One warp's online softmax over its 16 positions of a tile, for the group's query heads (heads
// >= the group size compute unused values). The scores are QK^T's C fragment: the lane holds
// positions r and r + 8 of heads 2i and 2i + 1, so each head's max is reduced over the eight
// lanes of i and the sums (O^T's m-tiles, whose columns are the heads) rescale without a
// shuffle.
template <int kZ>  // value groups (int4_kivi's kG; 1 for the rows, whose zeros stay 0)
struct WarpSoftmax {
  static constexpr int kValueGroups = kZ;
  float m[2] = {-INFINITY, -INFINITY};  // heads 2i, 2i + 1: running max (log2 units)
  float l[2] = {0.0f, 0.0f};            // this lane's part of their sums
  float acc[8][4];      // O^T m-tiles: [0], [1] row r, heads 2i, 2i + 1; [2], [3] row r + 8
  float z[kZ][2] = {};  // this lane's part of sum(p * value zero) per value group, heads 2i, 2i + 1

  __device__ WarpSoftmax() {
#pragma unroll
    for (int mt = 0; mt < 8; ++mt) {
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[mt][j] = 0.0f;
    }
  }

  // s: the C fragment, scores (log2 units) of [position r][head 2i], [r][2i + 1], [r + 8][2i],
  // [r + 8][2i + 1]; turns them into probabilities and rescales the sums.
  __device__ void update(float (&s)[4]) {
    // No score of the warp above its head's running max (after a context's first blocks, nearly
    // every block): the max stays, so the shuffles that find the block's max and the rescale are
    // skipped; the arithmetic is the path below's with m_new = m and corr = 1 (the same bits).
    const bool above = !(fmaxf(s[0], s[2]) <= m[0] && m[0] > -INFINITY) ||
                       !(fmaxf(s[1], s[3]) <= m[1] && m[1] > -INFINITY);
    if (!__any_sync(0xffffffffu, above)) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[e] = fast_exp2(s[e] - m[e]);
        s[e + 2] = fast_exp2(s[e + 2] - m[e]);
        l[e] = l[e] + (s[e] + s[e + 2]);
      }
      return;
    }
    float corr[2];
    bool moved = false;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float mx = fmaxf(s[e], s[e + 2]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
      const float m_new = fmaxf(m[e], mx);
      corr[e] = 1.0f;
      if (m_new == -INFINITY) {  // nothing seen yet
        s[e] = s[e + 2] = 0.0f;
      } else {
        corr[e] = fast_exp2(m[e] - m_new);  // 0 when m is -inf
        s[e] = fast_exp2(s[e] - m_new);
        s[e + 2] = fast_exp2(s[e + 2] - m_new);
      }
      moved = moved || m_new != m[e];
      m[e] = m_new;
      l[e] = l[e] * corr[e] + (s[e] + s[e + 2]);
    }
    // Rescale only when some head's max moved (corr is 1 otherwise): after the first blocks of
    // a context the max rarely moves, and the sums are 36 registers.
    if (!__any_sync(0xffffffffu, moved)) return;
#pragma unroll
    for (int g = 0; g < kZ; ++g) {
      z[g][0] *= corr[0];
      z[g][1] *= corr[1];
    }
#pragma unroll
    for (int mt = 0; mt < 8; ++mt) {
      acc[mt][0] *= corr[0];
      acc[mt][1] *= corr[1];
      acc[mt][2] *= corr[0];
      acc[mt][3] *= corr[1];
    }
  }

  // The warp's max, sum and zero sums of each head, summed over the lanes, into write_partial's
  // shared memory ([warp][head], [warp][head][kZ]).
  __device__ void publish(float* s_m, float* s_l, float* s_z, int warp, int lane) const {
    const int r = lane / 4, i = lane % 4;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float sum = l[e];
      float zs[kZ];
#pragma unroll
      for (int g = 0; g < kZ; ++g) zs[g] = z[g][e];
#pragma unroll
      for (int o = 4; o < 32; o *= 2) {
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
#pragma unroll
        for (int g = 0; g < kZ; ++g) zs[g] += __shfl_xor_sync(0xffffffffu, zs[g], o);
      }
      if (r == 0) {
        const int h = warp * 8 + 2 * i + e;
        s_m[h] = m[e];
        s_l[h] = sum;
#pragma unroll
        for (int g = 0; g < kZ; ++g) s_z[h * kZ + g] = zs[g];
      }
    }
  }
};

// Shared memory of the epilogue: each warp's sums, then one item's result.
struct EpilogueSmem {
  float acc[8][kD];  // per warp: [head][channel]
};

// Which channel row rho (0..15) of PV m-tile mt holds: phys_channel() (fp8 rows), 16 mt + rho
// (16-bit rows, ldmatrix), or int4_channel() (int4_kivi codes, ldmatrix).
enum class ChannelMap { kPhys, kNatural, kInt4 };

// The int4_kivi value channel of m-tile mt = 2 g + q, row rho: the value codes of 32-channel
// group g come as 16-bit units (ldmatrix), unit u = rho % 8 of the group holding the nibbles
// 0..3 of half u % 2 of word 4 g + u / 2, which are channels 8 (4 g + u / 2) + u % 2 + 2 n
// (int4_kivi_layout.h's nibble order); m-tile q takes nibbles 2q (rows 0..7) and 2q + 1
// (rows 8..15).
__device__ inline int int4_channel(int mt, int rho) {
  const int g = mt / 2, q = mt % 2, u = rho % 8, n = 2 * q + rho / 8;
  return 8 * (4 * g + u / 2) + u % 2 + 2 * n;
}

// Combines the warps' softmax states and writes the item's partial for the group's heads. The
// sums' m-tile rows are the channels kMap names.
template <int kWarps, ChannelMap kMap, typename State>
__device__ void write_partial(const State& st, float* smem, float* partial, int group,
                              int value_group_size) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, r = lane / 4, i = lane % 4;
  float* s_acc = smem;                  // [kWarps][8][128]
  float* s_m = smem + kWarps * 8 * kD;  // [kWarps][8]
  float* s_l = s_m + kWarps * 8;        // [kWarps][8]
  float* s_z = s_l + kWarps * 8;        // [kWarps][8][kZ]
  constexpr int kZ = State::kValueGroups;
  float* wa = s_acc + warp * 8 * kD;
#pragma unroll
  for (int mt = 0; mt < 8; ++mt) {
    int c0, c1;
    if constexpr (kMap == ChannelMap::kNatural) {
      c0 = 16 * mt + r;
      c1 = c0 + 8;
    } else if constexpr (kMap == ChannelMap::kInt4) {
      c0 = int4_channel(mt, r);
      c1 = int4_channel(mt, r + 8);
    } else {
      c0 = phys_channel(mt, r);
      c1 = phys_channel(mt, r + 8);
    }
    wa[(2 * i) * kD + c0] = st.acc[mt][0];
    wa[(2 * i + 1) * kD + c0] = st.acc[mt][1];
    wa[(2 * i) * kD + c1] = st.acc[mt][2];
    wa[(2 * i + 1) * kD + c1] = st.acc[mt][3];
  }
  st.publish(s_m, s_l, s_z, warp, lane);
  __syncthreads();
  for (int idx = threadIdx.x; idx < group * kD; idx += kWarps * 32) {
    const int hh = idx / kD, c = idx % kD, vg = c / value_group_size;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, s_m[w * 8 + hh]);
    float o = 0.0f, sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = s_m[w * 8 + hh];
      if (mw == -INFINITY) continue;  // a warp that saw no position
      const float f = fast_exp2(mw - mx);
      o += f * (s_acc[(w * 8 + hh) * kD + c] + s_z[(w * 8 + hh) * kZ + vg]);
      sum += f * s_l[w * 8 + hh];
    }
    float* out = partial + static_cast<int64_t>(hh) * kDecodePartialFloats;
    out[2 + c] = o;
    if (c == 0) {
      out[0] = mx;
      out[1] = sum;
    }
  }
}

// A decode-only step's token into its residual ring (DecodeLaunch::write_residual): channel c
// of KV head kvh's K and V rows from staging (int4_kivi_cache.cuh's residual_write, one value).
// ring_value_of loads (the staging values beside the token's sequence, whose length and seat
// follow together: two round trips), store_ring_value writes, so that a kernel can issue the
// loads with its own and write at its end.
struct RingValue {
  uint16_t* k = nullptr;  // the K value's place (nullptr: the ring does not keep the position)
  int64_t v_offset = 0;   // the V value's, from k
  uint16_t kv = 0, vv = 0;
};
__device__ inline RingValue ring_value_of(const PagedAttentionArgs& a, int token, int kvh, int c) {
  const int s = a.token_seq[token], b = a.block_size;
  const int64_t p = a.positions[token];
  const int64_t kv_dim = static_cast<int64_t>(a.num_kv_heads) * kD;
  const int64_t src = token * kv_dim + kvh * kD + c;
  RingValue r;
  r.kv = a.staging_k[src];
  r.vv = a.staging_v[src];
  const int64_t seq_len = a.seq_lens[s];
  const int seat = a.seats[s];
  if (ring_keeps(p, seq_len, b, a.ring)) {
    r.k = const_cast<uint16_t*>(a.residual) +
          ring_k_offset(seat, p, b, a.ring, kv_dim, a.seat_stride) + kvh * kD + c;
    r.v_offset = ring_v_offset(b, a.ring, kv_dim);
  }
  return r;
}
__device__ inline void store_ring_value(const RingValue& r) {
  if (r.k == nullptr) return;
  r.k[0] = r.kv;
  r.k[r.v_offset] = r.vv;
}
__device__ inline void write_ring_value(const PagedAttentionArgs& a, int token, int kvh, int c) {
  store_ring_value(ring_value_of(a, token, kvh, c));
}

// The merge fused into the item kernels (DecodeLaunch::merge_counts): called by every thread
// block of an item of (sequence d.seqs[merge], KV head g) after its partial is written, all
// kThreads threads. The block counts itself done; the last block of the group merges the
// group's query heads, a warp a head (heads w, w + warps, ...): one pass over the items with an
// online softmax in every lane (the weight sums, and the weighted sums of the lane's channels
// 2 lane, 2 lane + 1 and their partners 64 channels up; the loads of a few items and all the
// warp's heads in flight together), int4_kivi v2's Hadamard-domain sums apart and rotated back
// inside the warp (hadamard128_warp); writes the output rows (and the ring row under
// write_residual). With d.merge_flag, only in steps it marks. smem: 16 bytes, free.
template <int kThreads>
__device__ void merge_if_last(const PagedAttentionArgs& a, const DecodeLaunch& d, int merge, int g,
                              unsigned char* smem) {
  static_assert(kThreads % 32 == 0 && kThreads >= 32, "merge_if_last's warps");
  constexpr int kWarps = kThreads / 32, kHeads = (8 + kWarps - 1) / kWarps;  // heads a warp
  if (d.merge_flag != nullptr && *d.merge_flag == 0) return;  // the merge kernel's step
  int* is_last = reinterpret_cast<int*>(smem);
  __threadfence();  // this block's partial is seen device-wide before its count
  __syncthreads();  // (and the epilogue is done with the shared memory)
  const DecodeSeq sq = d.seqs[merge];
  const int n4 = sq.int4_end - sq.int4_begin, n = n4 + sq.rows_end - sq.rows_begin;
  if (threadIdx.x == 0) {
    int32_t* count = d.merge_counts + static_cast<int64_t>(merge) * a.num_kv_heads + g;
    const bool last = atomicAdd(count, 1) == n - 1;
    if (last) *count = 0;  // every other block of the group has counted: ready for the next step
    *is_last = last ? 1 : 0;
  }
  __syncthreads();
  if (*is_last == 0) return;
  __threadfence();  // the other blocks' partials, after their counts
  const int group = a.num_heads / a.num_kv_heads;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  auto part = [&](int j, int hh) {  // the group's j-th item: its int4 items, then its row items
    const int item = j < n4 ? sq.int4_begin + j : sq.rows_begin + (j - n4);
    return d.partials +
           ((static_cast<int64_t>(item) * a.num_kv_heads + g) * group + hh) * kDecodePartialFloats;
  };
  // One pass over the items, kBatch at a time (their loads, kBatch x the warp's heads x 4,
  // issued together), an online softmax in every lane: each head's running max, weight sum and
  // the weighted sums of the lane's channels 2 lane + {0, 1} ([0], [1]) and 64 + 2 lane + {0, 1}
  // ([2], [3]), rescaled when the max moves (the same in every lane: no shuffle).
  constexpr int kBatch = kHeads >= 4 ? 2 : 8 / kHeads;
  float mx[kHeads], sum[kHeads], plain[kHeads][4] = {}, had[kHeads][4] = {};
#pragma unroll
  for (int e = 0; e < kHeads; ++e) {
    mx[e] = -INFINITY;
    sum[e] = 0.0f;
  }
  for (int j0 = 0; j0 < n; j0 += kBatch) {
    float mj[kBatch][kHeads], lj[kBatch][kHeads];
    float2 lo[kBatch][kHeads], hi[kBatch][kHeads];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
#pragma unroll
      for (int e = 0; e < kHeads; ++e) {
        const int hh = warp + e * kWarps;
        mj[b][e] = -INFINITY;  // past the items or the group: left out below
        if (j0 + b < n && hh < group) {
          const float* p = part(j0 + b, hh);
          mj[b][e] = __ldcg(p);
          lj[b][e] = __ldcg(p + 1);
          lo[b][e] = __ldcg(reinterpret_cast<const float2*>(p + 2) + lane);
          hi[b][e] = __ldcg(reinterpret_cast<const float2*>(p + 2 + kD / 2) + lane);
        }
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const bool in_had = j0 + b < n4 && a.value_hadamard;
#pragma unroll
      for (int e = 0; e < kHeads; ++e) {
        const float m = mj[b][e];
        if (m == -INFINITY) continue;  // (also an item with no position)
        if (m > mx[e]) {  // the max moves: what was summed so far scales down (0 at the first)
          const float c = fast_exp2(mx[e] - m);
          sum[e] *= c;
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            plain[e][u] *= c;
            had[e][u] *= c;
          }
          mx[e] = m;
        }
        const float f = fast_exp2(m - mx[e]);
        sum[e] += f * lj[b][e];
        const float v[4] = {lo[b][e].x, lo[b][e].y, hi[b][e].x, hi[b][e].y};
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const float x = f != 0.0f ? f * v[u] : 0.0f;
          if (in_had) {
            had[e][u] += x;
          } else {
            plain[e][u] += x;
          }
        }
      }
    }
  }
  const int64_t row0 = static_cast<int64_t>(sq.token) * a.num_heads + g * group;
#pragma unroll
  for (int e = 0; e < kHeads; ++e) {
    const int hh = warp + e * kWarps;
    if (hh >= group) continue;  // uniform over the warp
    float o[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) o[u] = plain[e][u] / sum[e];
    if (a.value_hadamard) {
      float y[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) y[u] = had[e][u] / sum[e];
      hadamard128_warp(y, lane);
#pragma unroll
      for (int u = 0; u < 4; ++u) o[u] += y[u];
    }
    const int64_t at = (row0 + hh) * kD + 2 * lane;
    switch (a.out_dtype) {
      case DType::kF32:
        *reinterpret_cast<float2*>(static_cast<float*>(a.out) + at) = make_float2(o[0], o[1]);
        *reinterpret_cast<float2*>(static_cast<float*>(a.out) + at + kD / 2) =
            make_float2(o[2], o[3]);
        break;
      case DType::kBF16:
        for (int u = 0; u < 4; ++u) {
          static_cast<__nv_bfloat16*>(a.out)[at + u % 2 + kD / 2 * (u / 2)] =
              from_f32<__nv_bfloat16>(o[u]);
        }
        break;
      default:
        for (int u = 0; u < 4; ++u) {
          static_cast<__half*>(a.out)[at + u % 2 + kD / 2 * (u / 2)] = from_f32<__half>(o[u]);
        }
        break;
    }
  }
  if (d.write_residual) {
    for (int c = threadIdx.x; c < kD; c += kThreads) write_ring_value(a, sq.token, g, c);
  }
}

// The query of head r of the group (zeros past the group), scaled into log2 units: the lane's
// channel pairs m = 0..15 (fp32, [m][2]).
__device__ inline void load_query(const PagedAttentionArgs& a, int token, int g, int group,
                                  float (&q)[16][2]) {
  const int lane = threadIdx.x % 32, r = lane / 4, i = lane % 4;
  const float f = a.scale * kLog2e;
#pragma unroll
  for (int m = 0; m < 16; ++m) {
    q[m][0] = q[m][1] = 0.0f;
  }
  if (r >= group) return;
  const float* row = a.q + static_cast<int64_t>(token) * a.q_stride + (g * group + r) * kD;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float4* p = reinterpret_cast<const float4*>(row + 64 * half + 16 * i);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float4 v = p[j];
      q[8 * half + 2 * j][0] = v.x * f;
      q[8 * half + 2 * j][1] = v.y * f;
      q[8 * half + 2 * j + 1][0] = v.z * f;
      q[8 * half + 2 * j + 1][1] = v.w * f;
    }
  }
}

// The int4_kivi kernel's launch for the step's int4 items (decode_int4.cu). Items of at least
// kInt4UnrolledBlocks blocks run its loop unrolled by its stages, shorter ones a compact
// loop (decode_int4.cu says why).
inline constexpr int kInt4UnrolledBlocks = 12;
void launch_decode_int4(const PagedAttentionArgs& a, const DecodeLaunch& d, cudaStream_t stream);
// Resident thread blocks a multiprocessor of the int4 kernel for a block size and value groups.
int int4_blocks_per_sm(int block_size, int value_groups);

}  // namespace s4kv::backend::cuda::decode_detail
