// Decode attention on tensor cores (decode_attention.cuh) and the host's plan of a step.
//
// Fragments of mma.sync.m16n8k16 (lane = 4 r + i): A rows r and r + 8, columns 2i, 2i + 1 and
// 2i + 8, 2i + 9; B columns (n) r, rows (k) the same four; C rows r and r + 8, columns 2i, 2i + 1.
// QK^T: A = Q (rows: the group's query heads, at most 8, so rows 8..15 stay zero), B = K^T
// (n: 8 positions). Any order of the 128 channels along k gives the same dot products, so lane i
// takes the channel pairs m = 0..15 of its own: channels 16i + 64 (m / 8) + 2 (m % 8) + {0, 1}
// (RoPE's partners c and c + 64 are pairs m and m + 8 of one lane, and an int4 code word holds
// pairs m % 4 of word m / 4 of the lane's four words 2i, 2i + 1, 2i + 8, 2i + 9); k-tile t
// takes pairs 2t and 2t + 1.
// PV: O^T = V^T P^T, A = V^T (rows: 16 channels per m-tile, k: 16 positions), B = P^T, whose
// fragment is the score C fragment as it stands. M-tile mt = 2 g + h holds channels of one
// 32-channel group g (so one value scale per position multiplies the B fragment): row r + 8 hi
// is nibble 4 hi + h + 2 (r % 2) of word 4 g + r / 2 (int4_kivi_layout.h's nibble order), the
// channel phys_channel() below.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/act_types.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_attention.cuh"
#include "backend/cuda/hadamard.cuh"
#include "backend/cuda/tensor_core.cuh"
#include "common/check.h"

namespace s4kv::backend::cuda {
namespace {

constexpr int kD = 128;
constexpr int kRowWarps = 4;  // warps of the row kernel: 2 threads per position of a tile
constexpr float kLog2e = 1.4426950408889634f;

// c += A B: A rows r only (rows r + 8 zero), as the query side of QK^T.
template <bool kBf16>
__device__ inline void mma_rows8(float (&c)[4], uint32_t a0, uint32_t a2, uint32_t b0,
                                 uint32_t b1) {
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
  }
}
// Two 4-bit codes (bits 0..3 and 16..19 of x) as an fp16 pair of exact integers 0..15.
__device__ inline uint32_t codes_to_f16x2(uint32_t x) {
  uint32_t y;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(y) : "r"(x), "r"(0x000f000fu), "r"(0x64006400u));
  const __half2 h = __hsub2(*reinterpret_cast<const __half2*>(&y),
                            __halves2half2(__ushort_as_half(0x6400), __ushort_as_half(0x6400)));
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Two 4-bit codes (bits 4..7 and 20..23 of x) as an fp16 pair of exact integers 0..15: under
// the exponent of 64 (0x5400) those bits weigh 1..8.
__device__ inline uint32_t codes_hi_to_f16x2(uint32_t x) {
  uint32_t y;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(y) : "r"(x), "r"(0x00f000f0u), "r"(0x54005400u));
  const __half2 h = __hsub2(*reinterpret_cast<const __half2*>(&y),
                            __halves2half2(__ushort_as_half(0x5400), __ushort_as_half(0x5400)));
  return *reinterpret_cast<const uint32_t*>(&h);
}

// The cache channel of PV m-tile mt, row rho (0..15).
__device__ inline int phys_channel(int mt, int rho) {
  const int g = mt / 2, h = mt % 2, rr = rho % 8, hi = rho / 8;
  const int nibble = 4 * hi + h + 2 * (rr % 2);
  const int e = nibble < 4 ? 2 * nibble : 2 * (nibble - 4) + 1;
  return 8 * (4 * g + rr / 2) + e;
}

// One warp's online softmax over its positions, for the group's query heads (row r of the
// lane; rows >= the group size compute unused values).
template <int kZ>  // value groups (int4_kivi's kG; 1 for the rows, whose zeros stay 0)
struct WarpSoftmax {
  float m = -INFINITY;  // row r's running max (log2 units), equal in the four lanes of r
  float l = 0.0f;       // this lane's part of row r's sum
  float acc[8][4];      // O^T m-tiles: [0], [1] row r, heads 2i, 2i + 1; [2], [3] row r + 8
  float z[kZ] = {};     // int4: this lane's part of sum(p * value zero) per value group, row r

  __device__ WarpSoftmax() {
#pragma unroll
    for (int mt = 0; mt < 8; ++mt) {
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[mt][j] = 0.0f;
    }
  }

  // s: scores (log2 units) of positions 2i, 2i + 1, 2i + 8, 2i + 9 of the tile for row r;
  // turns them into probabilities and rescales the sums.
  __device__ void update(float (&s)[4], int lane) {
    float mx = fmaxf(fmaxf(s[0], s[1]), fmaxf(s[2], s[3]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m, mx);
    float corr = 1.0f;
    if (m_new == -INFINITY) {  // nothing seen yet
#pragma unroll
      for (int j = 0; j < 4; ++j) s[j] = 0.0f;
    } else {
      corr = fast_exp2(m - m_new);  // 0 when m is -inf
#pragma unroll
      for (int j = 0; j < 4; ++j) s[j] = fast_exp2(s[j] - m_new);
    }
    const bool moved = m_new != m;
    m = m_new;
    l = l * corr + ((s[0] + s[1]) + (s[2] + s[3]));
    // Rescale only when some row's max moved (corr is 1 otherwise): after the first blocks of
    // a context the max rarely moves, and the sums are 36 registers.
    if (!__any_sync(0xffffffffu, moved)) return;
#pragma unroll
    for (int g = 0; g < kZ; ++g) z[g] *= corr;
    const int i = lane % 4;
    const float ca = __shfl_sync(0xffffffffu, corr, 8 * i);  // head 2i lives in lanes 8i..
    const float cb = __shfl_sync(0xffffffffu, corr, 8 * i + 4);
#pragma unroll
    for (int mt = 0; mt < 8; ++mt) {
      acc[mt][0] *= ca;
      acc[mt][1] *= cb;
      acc[mt][2] *= ca;
      acc[mt][3] *= cb;
    }
  }
};

// Shared memory of the epilogue: each warp's sums, then one item's result.
struct EpilogueSmem {
  float acc[8][kD];  // per warp: [head][channel]
};

// Combines the warps' softmax states and writes the item's partial for the group's heads.
template <int kWarps, int kZ>
__device__ void write_partial(const WarpSoftmax<kZ>& st, float* smem, float* partial, int group,
                              int value_group_size) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, r = lane / 4, i = lane % 4;
  float* s_acc = smem;                  // [kWarps][8][128]
  float* s_m = smem + kWarps * 8 * kD;  // [kWarps][8]
  float* s_l = s_m + kWarps * 8;        // [kWarps][8]
  float* s_z = s_l + kWarps * 8;        // [kWarps][8][kZ]
  float l = st.l;
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  float z[kZ];
#pragma unroll
  for (int g = 0; g < kZ; ++g) {
    z[g] = st.z[g];
    z[g] += __shfl_xor_sync(0xffffffffu, z[g], 1);
    z[g] += __shfl_xor_sync(0xffffffffu, z[g], 2);
  }
  float* wa = s_acc + warp * 8 * kD;
#pragma unroll
  for (int mt = 0; mt < 8; ++mt) {
    const int c0 = phys_channel(mt, r), c1 = phys_channel(mt, r + 8);
    wa[(2 * i) * kD + c0] = st.acc[mt][0];
    wa[(2 * i + 1) * kD + c0] = st.acc[mt][1];
    wa[(2 * i) * kD + c1] = st.acc[mt][2];
    wa[(2 * i + 1) * kD + c1] = st.acc[mt][3];
  }
  if (i == 0) {
    s_m[warp * 8 + r] = st.m;
    s_l[warp * 8 + r] = l;
#pragma unroll
    for (int g = 0; g < kZ; ++g) s_z[(warp * 8 + r) * kZ + g] = z[g];
  }
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

// ---- int4_kivi pool blocks ----------------------------------------------------------------

// The bytes of one int4_kivi block (int4_kivi_layout.h) for B tokens and kG value groups.
template <int B, int kG>
__host__ __device__ constexpr int int4_block_bytes() {
  return B * (kD + 4 * kG) + 4 * kD;
}
constexpr int kInt4Stages = 3;  // blocks in flight per thread block: this one and two ahead
// Thread blocks per multiprocessor the int4 kernel is compiled for (registers a thread <= 65536 /
// (kInt4MinBlocks * 128)). Measured on the H200 (bench/results/cuda_h200/attention_notes.md,
// version 4): 2 (~217 registers, no spills) is the fastest; 3 (168) and 4 (128) spill and
// lose 5-20 % although more warps are resident.
constexpr int kInt4MinBlocks = 2;
constexpr int kTurnBytes = 2 * 16 * 32 * 4;  // two turned queries: [buffer][word m][lane]
template <int kWarps, int kG>
__host__ __device__ constexpr int int4_smem_bytes() {
  // The stages, the turned query of this block and the next, the lanes' rotations.
  return kInt4Stages * int4_block_bytes<kWarps * 16, kG>() + kTurnBytes + kWarps * 2 * 8 * 32 * 8;
}

// kWarps = B / 16: warp w takes positions 16 w .. 16 w + 15 of every block of the item; kG value
// groups per token (128 / Gv). The item's blocks stream through shared memory (cp.async,
// kInt4Stages deep), so the loads of the next blocks overlap this one's arithmetic. The code
// parts are staged with their 16-byte chunks swizzled per position (key chunk c of position t at
// c ^ 2 ((t / 2) % 2), value chunk c at c ^ (t / 2) % 4), so that the lanes' reads below fall in
// distinct banks. The query turned back by each block's start is computed once per thread block:
// warp w turns the channel pairs 8 w / kWarps .. (and their RoPE partners) for the next block
// while this one is read, into shared memory that every warp reads after the block's barrier.
template <int kWarps, int kG>
__global__ void __launch_bounds__(kWarps * 32, kInt4MinBlocks)
    decode_int4_kernel(PagedAttentionArgs a, DecodeLaunch d) {
  constexpr int B = kWarps * 16;
  constexpr int kBlockBytes = int4_block_bytes<B, kG>();
  constexpr int kPairs = 8 / kWarps;  // channel pairs m < 8 each warp turns
  static_assert(kInt4Stages * kBlockBytes >= (kWarps * 8 * kD + kWarps * 8 * 7) * 4,
                "the epilogue reuses the stages");
  extern __shared__ __align__(16) unsigned char dsmem[];
  unsigned char* stages = dsmem;
  uint32_t* turned = reinterpret_cast<uint32_t*>(dsmem + kInt4Stages * kBlockBytes);
  if (d.live != nullptr && static_cast<int>(blockIdx.x) >= d.live[0]) return;  // graph replay
  const DecodeItem it = d.items[blockIdx.x];
  const int g = blockIdx.y;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, r = lane / 4, i = lane % 4;
  const int group = a.num_heads / a.num_kv_heads;
  const kv::Int4KiviLayout& L = a.layout;
  const int32_t* table = a.block_tables + static_cast<int64_t>(it.seq) * a.max_blocks_per_seq;
  const int n = it.end - it.begin;
  const int kc0 = static_cast<int>(L.k_codes_offset / 16),
            vc0 = static_cast<int>(L.v_codes_offset / 16);

  // Stage k % kInt4Stages <- block it.begin + k. Each thread copies the same 16-byte chunks of
  // every block: their source and swizzled destination byte offsets are computed once (packed
  // source << 16 | destination), and the next block's entry of the block table is read one block
  // ahead, so a block's copy costs one address and a cp.async per chunk.
  constexpr int kChunks = kBlockBytes / 16;
  constexpr int kChunksPerThread = (kChunks + kWarps * 32 - 1) / (kWarps * 32);
  static_assert(kBlockBytes < 65536, "chunk offsets are packed in 16 bits");
  uint32_t chunk[kChunksPerThread];
#pragma unroll
  for (int j = 0; j < kChunksPerThread; ++j) {
    const int c = static_cast<int>(threadIdx.x) + j * kWarps * 32;
    int to = c;
    if (c >= kc0 && c < kc0 + 4 * B) {
      const int t = (c - kc0) / 4;
      to = kc0 + 4 * t + (((c - kc0) % 4) ^ (2 * ((t >> 1) & 1)));
    } else if (c >= vc0 && c < vc0 + 4 * B) {
      const int t = (c - vc0) / 4;
      to = vc0 + 4 * t + (((c - vc0) % 4) ^ ((t >> 1) & 3));
    }
    chunk[j] = static_cast<uint32_t>(16 * c) << 16 | static_cast<uint32_t>(16 * to);
  }
  const bool last_chunk =
      static_cast<int>(threadIdx.x) + (kChunksPerThread - 1) * kWarps * 32 < kChunks;
  const uint32_t stages_shared = static_cast<uint32_t>(__cvta_generic_to_shared(stages));
  const auto* pool =
      reinterpret_cast<const unsigned char*>(a.pool) + static_cast<int64_t>(g) * L.block_bytes;
  const int64_t block_stride = static_cast<int64_t>(a.num_kv_heads) * L.block_bytes;
  int32_t next_block = n > 0 ? __ldg(table + it.begin) : 0;
  auto issue = [&](int k) {
    if (k < n) {
      const unsigned char* src = pool + next_block * block_stride;
      if (k + 1 < n) next_block = __ldg(table + it.begin + k + 1);
      const uint32_t dst = stages_shared + (k % kInt4Stages) * kBlockBytes;
#pragma unroll
      for (int j = 0; j < kChunksPerThread; ++j) {
        if (j + 1 < kChunksPerThread || last_chunk) {
          cp_async16_shared(dst + (chunk[j] & 0xffffu), src + (chunk[j] >> 16));
        }
      }
    }
    cp_async_commit();
  };
  issue(0);
  issue(1);

  // This warp's share of the query (pairs m0 + e and m0 + e + 8 of the lane, fp32, log2 units).
  const int m0 = kPairs * warp;
  float q[kPairs][2][2];
  {
    const float f = a.scale * kLog2e;
    const float* row = a.q + static_cast<int64_t>(a.query_start_loc[it.seq]) * a.q_stride +
                       (g * group + r) * kD + 16 * i + 2 * m0;
#pragma unroll
    for (int e = 0; e < kPairs; ++e) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        q[e][0][c] = r < group ? row[2 * e + c] * f : 0.0f;
        q[e][1][c] = r < group ? row[64 + 2 * e + c] * f : 0.0f;
      }
    }
  }
  // The cos / sin of this warp's frequency pairs at a block's first position.
  float2 tc[kPairs], ts[kPairs];
  auto fetch_turn = [&](int k) {
    if (k >= n) return;
    const int64_t row = static_cast<int64_t>(it.begin + k) * B * (kD / 2) + 16 * i + 2 * m0;
#pragma unroll
    for (int e = 0; e < kPairs; ++e) {
      tc[e] = __ldg(reinterpret_cast<const float2*>(a.rope_cos + row) + e);
      ts[e] = __ldg(reinterpret_cast<const float2*>(a.rope_sin + row) + e);
    }
  };
  // (R(p0)^T q) for block k's start p0, this warp's words, into buffer k % 2.
  auto store_turn = [&](int k) {
    if (k >= n) return;
    // Lane-major, 16-byte chunk j of a lane at j ^ (lane / 2) % 4 (conflict-free reads).
    uint32_t* dst = turned + (k % 2) * 16 * 32 + lane * 16;
    auto at = [&](int m) -> uint32_t& { return dst[4 * ((m / 4) ^ ((lane >> 1) & 3)) + m % 4]; };
#pragma unroll
    for (int e = 0; e < kPairs; ++e) {
      const float lo0 = q[e][0][0] * tc[e].x + q[e][1][0] * ts[e].x;
      const float lo1 = q[e][0][1] * tc[e].y + q[e][1][1] * ts[e].y;
      const float hi0 = q[e][1][0] * tc[e].x - q[e][0][0] * ts[e].x;
      const float hi1 = q[e][1][1] * tc[e].y - q[e][0][1] * ts[e].y;
      at(m0 + e) = pack2<false>(lo0, lo1);
      at(m0 + e + 8) = pack2<false>(hi0, hi1);
    }
  };
  fetch_turn(0);
  store_turn(0);

  WarpSoftmax<kG> st;
  const int tk0 = 16 * warp + r, tk1 = tk0 + 8;       // this lane's key positions in the block
  const int tv = 16 * warp + 2 * i;                   // its value positions tv, +1, +8, +9
  const uint32_t vsel = (r % 2) * 0x0101u + 0x0400u;  // byte_perm: bytes r % 2, 4 + r % 2
  // R(t) for the lane's key positions and frequency pairs 8i + m (half2 cos, sin), kept in
  // shared memory in lane order ([warp][nt][m][lane]) to spare 32 registers.
  uint4* rot = reinterpret_cast<uint4*>(turned + 2 * 16 * 32) + warp * 2 * 4 * 32 + lane;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    const int64_t row = static_cast<int64_t>(nt == 0 ? tk0 : tk1) * (kD / 2) + 16 * i;
#pragma unroll
    for (int m = 0; m < 8; m += 2) {
      const float4 c = __ldg(reinterpret_cast<const float4*>(a.rope_cos + row) + m / 2);
      const float4 sn = __ldg(reinterpret_cast<const float4*>(a.rope_sin + row) + m / 2);
      rot[(nt * 4 + m / 2) * 32] = make_uint4(pack2<false>(c.x, c.y), pack2<false>(sn.x, sn.y),
                                              pack2<false>(c.z, c.w), pack2<false>(sn.z, sn.w));
    }
  }

  for (int k = 0; k < n; ++k) {
    fetch_turn(k + 1);
    cp_async_wait<1>();  // block k has landed (block k + 1 may be in flight)
    __syncthreads();     // for every warp; block k's turned query is stored; block k - 1 is read
    issue(k + 2);        // into block k - 1's stage
    const std::byte* base =
        reinterpret_cast<const std::byte*>(stages + (k % kInt4Stages) * kBlockBytes);
    uint32_t qa[16];
    {
      const uint4* src = reinterpret_cast<const uint4*>(turned + (k % 2) * 16 * 32 + lane * 16);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint4 v = src[j ^ ((lane >> 1) & 3)];
        qa[4 * j] = v.x;
        qa[4 * j + 1] = v.y;
        qa[4 * j + 2] = v.z;
        qa[4 * j + 3] = v.w;
      }
    }

    // Scores of positions tv.. (C fragment) from keys at tk0 / tk1 (B fragment).
    float s[4];
    const auto* kcodes = reinterpret_cast<const uint2*>(base + L.k_codes_offset);
    const auto* kscale = reinterpret_cast<const uint4*>(base + L.k_scale_offset);
    const auto* kzero = reinterpret_cast<const uint4*>(base + L.k_zero_offset);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      // Key code words 2i, 2i + 1 (chunk i / 2) and 2i + 8, 2i + 9.
      const int t = nt == 0 ? tk0 : tk1, sw = 2 * ((t >> 1) & 1);
      const uint2 w01 = kcodes[t * 8 + 2 * ((i / 2) ^ sw) + i % 2];
      const uint2 w23 = kcodes[t * 8 + 2 * ((2 + i / 2) ^ sw) + i % 2];
      const uint32_t w[4] = {w01.x, w01.y, w23.x, w23.y};
      uint32_t kb[16];
#pragma unroll
      for (int j = 0; j < 4; ++j) {  // pairs 4j .. 4j + 3: one scale and one zero chunk
        const uint4 ks = kscale[j < 2 ? 2 * i + j : 8 + 2 * i + (j - 2)];
        const uint4 kz = kzero[j < 2 ? 2 * i + j : 8 + 2 * i + (j - 2)];
        const uint32_t kss[4] = {ks.x, ks.y, ks.z, ks.w}, kzz[4] = {kz.x, kz.y, kz.z, kz.w};
        const uint32_t w8 = w[j] >> 8;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const uint32_t x = e < 2 ? w[j] : w8;
          const uint32_t codes = e % 2 == 0 ? codes_to_f16x2(x) : codes_hi_to_f16x2(x);
          const __half2 v = __hfma2(*reinterpret_cast<const __half2*>(&codes),
                                    *reinterpret_cast<const __half2*>(&kss[e]),
                                    *reinterpret_cast<const __half2*>(&kzz[e]));
          kb[4 * j + e] = *reinterpret_cast<const uint32_t*>(&v);
        }
      }
#pragma unroll
      for (int m = 0; m < 8; ++m) {
        const uint4 cs4 = rot[(nt * 4 + m / 2) * 32];
        const uint32_t cw = m % 2 == 0 ? cs4.x : cs4.z, sw2 = m % 2 == 0 ? cs4.y : cs4.w;
        const __half2 c2 = *reinterpret_cast<const __half2*>(&cw);
        const __half2 s2 = *reinterpret_cast<const __half2*>(&sw2);
        const __half2 lo = *reinterpret_cast<const __half2*>(&kb[m]);
        const __half2 hi = *reinterpret_cast<const __half2*>(&kb[m + 8]);
        const __half2 nlo = __hfma2(lo, c2, __hneg2(__hmul2(hi, s2)));
        const __half2 nhi = __hfma2(hi, c2, __hmul2(lo, s2));
        kb[m] = *reinterpret_cast<const uint32_t*>(&nlo);
        kb[m + 8] = *reinterpret_cast<const uint32_t*>(&nhi);
      }
      // Two chains of four MMAs (the k-tiles' order of summation differs from one chain).
      float c[2][4] = {};
#pragma unroll
      for (int tt = 0; tt < 8; ++tt)
        mma_rows8<false>(c[tt % 2], qa[2 * tt], qa[2 * tt + 1], kb[2 * tt], kb[2 * tt + 1]);
      s[2 * nt] = c[0][0] + c[1][0];
      s[2 * nt + 1] = c[0][1] + c[1][1];
    }
    st.update(s, lane);
    store_turn(k + 1);  // read by every warp after the next block's barrier

    // Values: probabilities times the value scales (B fragment per value group), the zeros'
    // share, codes as the A fragment taken as fp16 subnormals: the nibble in bits 0..3 of a half
    // is c 2^-24, the one in bits 4..7 is 16 c 2^-24, both exact (no conversion; the epilogue
    // scales those m-tiles by 2^24 and 2^20).
    const auto* vscale = reinterpret_cast<const __half*>(base + L.v_scale_offset);
    const auto* vzero = reinterpret_cast<const __half*>(base + L.v_zero_offset);
    const auto* vcodes = reinterpret_cast<const uint32_t*>(base + L.v_codes_offset);
    uint32_t b0 = 0, b1 = 0;
#pragma unroll
    for (int g32 = 0; g32 < 4; ++g32) {
      const int vg = g32 * kG / 4;
      if (g32 * kG % 4 == 0) {  // the first m-tile pair of value group vg
        float vs[4], zsum = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int t = tv + (j & 1) + 8 * (j >> 1);
          vs[j] = __half2float(vscale[t * kG + vg]);
          zsum += s[j] * __half2float(vzero[t * kG + vg]);
        }
        st.z[vg] += zsum;
        b0 = pack2<false>(s[0] * vs[0], s[1] * vs[1]);
        b1 = pack2<false>(s[2] * vs[2], s[3] * vs[3]);
      }
      uint32_t vc[4];  // [position tv + {0, 1, 8, 9}]
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int t = tv + (j & 1) + 8 * (j >> 1);
        vc[j] = vcodes[t * 16 + 4 * (g32 ^ ((t >> 1) & 3)) + r / 2];
      }
      // Bytes r % 2 (and 2 + r % 2) of two positions' words into bytes 0 and 2.
      const uint32_t lo01 = __byte_perm(vc[0], vc[1], vsel),
                     hi01 = __byte_perm(vc[0], vc[1], vsel + 0x0202);
      const uint32_t lo89 = __byte_perm(vc[2], vc[3], vsel),
                     hi89 = __byte_perm(vc[2], vc[3], vsel + 0x0202);
      const uint32_t av0[4] = {lo01 & 0x000f000fu, hi01 & 0x000f000fu, lo89 & 0x000f000fu,
                               hi89 & 0x000f000fu};
      mma_m16n8k16<false>(st.acc[2 * g32], av0, b0, b1);
      const uint32_t av1[4] = {lo01 & 0x00f000f0u, hi01 & 0x00f000f0u, lo89 & 0x00f000f0u,
                               hi89 & 0x00f000f0u};
      mma_m16n8k16<false>(st.acc[2 * g32 + 1], av1, b0, b1);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the stages' memory becomes the epilogue's
#pragma unroll
  for (int mt = 0; mt < 8; ++mt) {
#pragma unroll
    for (int j = 0; j < 4; ++j) st.acc[mt][j] *= mt % 2 == 0 ? 16777216.0f : 1048576.0f;  // exact
  }
  write_partial<kWarps>(st, reinterpret_cast<float*>(dsmem),
                        d.partials + (static_cast<int64_t>(blockIdx.x) * a.num_kv_heads + g) *
                                         group * kDecodePartialFloats,
                        group, kD / kG);
}

// ---- 16-bit and fp8 rows ------------------------------------------------------------------

enum class RowFormat { kBf16, kF16, kFp8 };

// Where position p of the item's sequence lives: its K row (V at v_off elements after for the
// int4 parts, or in v_cache for the paged caches).
struct RowLocator {
  const PagedAttentionArgs* a;
  const int32_t* table;
  int g, start, q_begin, pool_end, slot;

  __device__ void rows(int p, const void*& k, const void*& v) const {
    const int b = a->block_size;
    const int64_t kv_dim = static_cast<int64_t>(a->num_kv_heads) * kD;
    const int blk = p / b;
    if (a->cache != kv::KvCacheDtype::kInt4Kivi) {
      const int64_t row = (static_cast<int64_t>(table[blk]) * b + p % b) * kv_dim + g * kD;
      const int64_t es = a->cache == kv::KvCacheDtype::kFp8E4M3 ? 1 : 2;
      k = static_cast<const char*>(a->k_cache) + row * es;
      v = static_cast<const char*>(a->v_cache) + row * es;
      return;
    }
    const uint16_t* base;
    int64_t v_off;
    if (blk < pool_end) {  // the sink block
      base = a->sink +
             ((static_cast<int64_t>(table[blk] - a->num_pool_blocks) * 2) * b + p % b) * kv_dim +
             g * kD;
      v_off = static_cast<int64_t>(b) * kv_dim;
    } else if (p < start) {  // the residual ring
      const int64_t ring_row = (p / b % a->ring) * b + p % b;
      base =
          a->residual + (static_cast<int64_t>(slot) * 2 * a->ring * b + ring_row) * kv_dim + g * kD;
      v_off = static_cast<int64_t>(a->ring) * b * kv_dim;
    } else {  // this step's token
      const int64_t row = static_cast<int64_t>(q_begin + p - start) * kv_dim + g * kD;
      k = a->staging_k + row;
      v = a->staging_v + row;
      return;
    }
    k = base;
    v = base + v_off;
  }
};

constexpr int kRowStages = 2;  // tiles in flight per thread block: this one and the next

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
template <RowFormat F>
__global__ void __launch_bounds__(kRowWarps * 32)
    decode_rows_kernel(PagedAttentionArgs a, DecodeLaunch d) {
  constexpr bool kBf16 = F == RowFormat::kBf16;
  constexpr bool kFp8 = F == RowFormat::kFp8;
  constexpr int kTile = 16 * kRowWarps;
  constexpr int kRowBytes = row_bytes<F>();
  constexpr int kChunks = (kRowBytes - 16) / 16;
  constexpr int kStageBytes = 2 * kTile * kRowBytes;
  extern __shared__ __align__(16) unsigned char dsmem[];
  // Graph replay: the grid is the plan's capacity; the step's counts are in d.live.
  const int item = (d.live != nullptr ? d.live[0] : d.num_int4_items) + blockIdx.x;
  if (d.live != nullptr && item >= d.live[1]) return;
  const DecodeItem it = d.items[item];
  const int g = blockIdx.y;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, r = lane / 4, i = lane % 4;
  const int group = a.num_heads / a.num_kv_heads;
  const int token = a.query_start_loc[it.seq];

  RowLocator loc{&a,
                 a.block_tables + static_cast<int64_t>(it.seq) * a.max_blocks_per_seq,
                 g,
                 a.seq_lens[it.seq] - 1,
                 token,
                 a.pool_ends != nullptr ? a.pool_ends[it.seq] : 0,
                 a.seats != nullptr ? a.seats[it.seq] : 0};
  const int n = (it.end - it.begin + kTile - 1) / kTile;
  // Stage k % kRowStages <- the K and V rows of tile k (zeros past the item's end).
  auto issue = [&](int k) {
    if (k < n) {
      // Thread t copies half of position t / 2's K and V rows (chunks t % 2, + 2, ...), so
      // each lane pair reads whole 32-byte sectors.
      unsigned char* dst = dsmem + (k % kRowStages) * kStageBytes;
      const int pos = threadIdx.x / 2, sub = threadIdx.x % 2;
      const int p = it.begin + k * kTile + pos;
      unsigned char* kd = dst + pos * kRowBytes;
      unsigned char* vd = kd + kTile * kRowBytes;
      if (p < it.end) {
        const void *kr, *vr;
        loc.rows(p, kr, vr);
#pragma unroll
        for (int j = sub; j < kChunks; j += 2) {
          cp_async16(kd + 16 * j, static_cast<const unsigned char*>(kr) + 16 * j);
          cp_async16(vd + 16 * j, static_cast<const unsigned char*>(vr) + 16 * j);
        }
      } else {
#pragma unroll
        for (int j = sub; j < kChunks; j += 2) {
          *reinterpret_cast<uint4*>(kd + 16 * j) = make_uint4(0, 0, 0, 0);
          *reinterpret_cast<uint4*>(vd + 16 * j) = make_uint4(0, 0, 0, 0);
        }
      }
    }
    cp_async_commit();
  };
  issue(0);

  uint32_t qa[16];
  {
    float q[16][2];
    load_query(a, token, g, group, q);
#pragma unroll
    for (int m = 0; m < 16; ++m) qa[m] = pack2<kBf16>(q[m][0], q[m][1]);
  }
  WarpSoftmax<1> st;
  for (int k = 0; k < n; ++k) {
    issue(k + 1);
    cp_async_wait<1>();  // tile k has landed
    __syncthreads();
    const unsigned char* ks = dsmem + (k % kRowStages) * kStageBytes + 16 * warp * kRowBytes;
    const unsigned char* vs = ks + kTile * kRowBytes;
    const int p0 = it.begin + k * kTile + 16 * warp;
    // Keys of positions p0 + r and p0 + r + 8: the lane's 16 channel pairs.
    uint32_t kb[2][16];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const unsigned char* kr = ks + (r + 8 * nt) * kRowBytes;
      if constexpr (kFp8) {
        const uint4 lo = *reinterpret_cast<const uint4*>(kr + 16 * i);
        const uint4 hi = *reinterpret_cast<const uint4*>(kr + 64 + 16 * i);
        const uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
        for (int m = 0; m < 16; ++m) kb[nt][m] = fp8x2_to_f16x2(w[m / 2] >> (16 * (m % 2)));
      } else {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const uint4* src = reinterpret_cast<const uint4*>(kr + 128 * half + 32 * i);
          const uint4 x = src[0], y = src[1];
          kb[nt][8 * half + 0] = x.x;
          kb[nt][8 * half + 1] = x.y;
          kb[nt][8 * half + 2] = x.z;
          kb[nt][8 * half + 3] = x.w;
          kb[nt][8 * half + 4] = y.x;
          kb[nt][8 * half + 5] = y.y;
          kb[nt][8 * half + 6] = y.z;
          kb[nt][8 * half + 7] = y.w;
        }
      }
    }
    // Values of positions p0 + 2i + {0, 1, 8, 9}: per 32-channel group, the lane's word pair.
    uint32_t vw[4][4][2];  // [position][group][h]
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const unsigned char* vr = vs + (2 * i + (j & 1) + 8 * (j >> 1)) * kRowBytes;
#pragma unroll
      for (int g32 = 0; g32 < 4; ++g32) {
        if constexpr (kFp8) {
          vw[j][g32][0] = *reinterpret_cast<const uint32_t*>(vr + 32 * g32 + 4 * r);
          vw[j][g32][1] = 0;
        } else {
          const uint2 x = *reinterpret_cast<const uint2*>(vr + 64 * g32 + 8 * r);
          vw[j][g32][0] = x.x;
          vw[j][g32][1] = x.y;
        }
      }
    }
    float s[4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        mma_rows8<kBf16>(c, qa[2 * t], qa[2 * t + 1], kb[nt][2 * t], kb[nt][2 * t + 1]);
      }
      s[2 * nt] = p0 + 8 * nt + 2 * i < it.end ? c[0] : -INFINITY;
      s[2 * nt + 1] = p0 + 8 * nt + 2 * i + 1 < it.end ? c[1] : -INFINITY;
    }
    st.update(s, lane);
    const uint32_t b0 = pack2<kBf16>(s[0], s[1]);
    const uint32_t b1 = pack2<kBf16>(s[2], s[3]);
#pragma unroll
    for (int g32 = 0; g32 < 4; ++g32) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t av[4];
        if constexpr (kFp8) {
          const int k0 = 2 * h;  // byte of row r; row r + 8 is the next byte
          const uint32_t sel_r = static_cast<uint32_t>(k0 | ((4 + k0) << 4));
          const uint32_t sel_r8 = static_cast<uint32_t>((k0 + 1) | ((5 + k0) << 4));
          av[0] = fp8x2_to_f16x2(__byte_perm(vw[0][g32][0], vw[1][g32][0], sel_r));
          av[1] = fp8x2_to_f16x2(__byte_perm(vw[0][g32][0], vw[1][g32][0], sel_r8));
          av[2] = fp8x2_to_f16x2(__byte_perm(vw[2][g32][0], vw[3][g32][0], sel_r));
          av[3] = fp8x2_to_f16x2(__byte_perm(vw[2][g32][0], vw[3][g32][0], sel_r8));
        } else {
          av[0] = __byte_perm(vw[0][g32][h], vw[1][g32][h], 0x5410);
          av[1] = __byte_perm(vw[0][g32][h], vw[1][g32][h], 0x7632);
          av[2] = __byte_perm(vw[2][g32][h], vw[3][g32][h], 0x5410);
          av[3] = __byte_perm(vw[2][g32][h], vw[3][g32][h], 0x7632);
        }
        mma_m16n8k16<kBf16>(st.acc[2 * g32 + h], av, b0, b1);
      }
    }
    __syncthreads();  // the stage is refilled next iteration
  }
  cp_async_wait<0>();
  __syncthreads();
  write_partial<kRowWarps>(
      st, reinterpret_cast<float*>(dsmem),
      d.partials + (static_cast<int64_t>(item) * a.num_kv_heads + g) * group * kDecodePartialFloats,
      group, kD);
}

template <RowFormat F>
void launch_rows(const PagedAttentionArgs& a, const DecodeLaunch& d, cudaStream_t stream) {
  constexpr int kSmem = rows_smem_bytes<F>();
  static_assert(kSmem >= (kRowWarps * 8 * kD + kRowWarps * 8 * 6) * 4, "epilogue");
  static const bool attribute_set = [] {
    S4KV_CUDA_CHECK(cudaFuncSetAttribute(decode_rows_kernel<F>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)attribute_set;
  const dim3 grid(static_cast<unsigned>(d.num_items - d.num_int4_items),
                  static_cast<unsigned>(a.num_kv_heads));
  decode_rows_kernel<F><<<grid, kRowWarps * 32, kSmem, stream>>>(a, d);
}

// ---- merge --------------------------------------------------------------------------------

template <typename T>
__global__ void __launch_bounds__(kD) decode_merge_kernel(PagedAttentionArgs a, DecodeLaunch d) {
  __shared__ float row[kD];
  const DecodeSeq sq = d.seqs[blockIdx.x];
  const int h = blockIdx.y, c = threadIdx.x;
  const int group = a.num_heads / a.num_kv_heads, g = h / group, hh = h % group;
  auto part = [&](int item) {
    return d.partials +
           ((static_cast<int64_t>(item) * a.num_kv_heads + g) * group + hh) * kDecodePartialFloats;
  };
  float mx = -INFINITY;
  for (int it = sq.int4_begin; it < sq.int4_end; ++it) mx = fmaxf(mx, part(it)[0]);
  for (int it = sq.rows_begin; it < sq.rows_end; ++it) mx = fmaxf(mx, part(it)[0]);
  float plain = 0.0f, had = 0.0f, sum = 0.0f;
  auto add = [&](int it, float& into) {
    const float* p = part(it);
    if (p[0] == -INFINITY) return;
    const float f = fast_exp2(p[0] - mx);
    sum += f * p[1];
    into += f * p[2 + c];
  };
  // int4_kivi v2's pool values are in the Hadamard domain.
  for (int it = sq.int4_begin; it < sq.int4_end; ++it) add(it, a.value_hadamard ? had : plain);
  for (int it = sq.rows_begin; it < sq.rows_end; ++it) add(it, plain);
  float o = plain / sum;
  if (a.value_hadamard) {  // uniform over the block
    row[c] = had / sum;
    __syncthreads();
    o += hadamard128_shared(row, c);
  }
  T* out = static_cast<T*>(a.out) + (static_cast<int64_t>(sq.token) * a.num_heads + h) * kD;
  out[c] = from_f32<T>(o);
}

template <int kWarps, int kG>
void launch_int4_groups(const PagedAttentionArgs& a, const DecodeLaunch& d, cudaStream_t stream) {
  constexpr int kSmem = int4_smem_bytes<kWarps, kG>();
  static const bool attribute_set = [] {
    S4KV_CUDA_CHECK(cudaFuncSetAttribute(decode_int4_kernel<kWarps, kG>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    // All the multiprocessor's on-chip memory as shared memory: kInt4MinBlocks thread blocks
    // of ~47 KB each must fit (the driver's own choice left room for two).
    S4KV_CUDA_CHECK(cudaFuncSetAttribute(decode_int4_kernel<kWarps, kG>,
                                         cudaFuncAttributePreferredSharedMemoryCarveout,
                                         cudaSharedmemCarveoutMaxShared));
    return true;
  }();
  (void)attribute_set;
  constexpr int kBlockBytes = int4_block_bytes<kWarps * 16, kG>();
  S4KV_CHECK(static_cast<int>(a.layout.block_bytes) == kBlockBytes,
             "decode attention: int4_kivi block of ", a.layout.block_bytes, " bytes");
  const dim3 grid(static_cast<unsigned>(d.num_int4_items), static_cast<unsigned>(a.num_kv_heads));
  decode_int4_kernel<kWarps, kG><<<grid, kWarps * 32, kSmem, stream>>>(a, d);
}

template <int kWarps>
void launch_int4(const PagedAttentionArgs& a, const DecodeLaunch& d, cudaStream_t stream) {
  switch (a.layout.num_value_groups()) {
    case 1:
      launch_int4_groups<kWarps, 1>(a, d, stream);
      break;
    case 2:
      launch_int4_groups<kWarps, 2>(a, d, stream);
      break;
    case 4:
      launch_int4_groups<kWarps, 4>(a, d, stream);
      break;
    default:
      S4KV_CHECK(false, "decode attention: ", a.layout.num_value_groups(), " value groups");
  }
}

}  // namespace

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

DecodeCapacity decode_capacity(int64_t num_seqs, const DecodeShape& shape) {
  // plan_attention: at most target + one per sequence of split items (int4 items, or the row
  // items of the other formats), plus two row items per int4_kivi sequence.
  const int64_t target = (4 * int64_t{shape.num_sms} + shape.num_kv_heads - 1) / shape.num_kv_heads;
  if (shape.cache == kv::KvCacheDtype::kInt4Kivi) return {target + num_seqs, 2 * num_seqs};
  return {0, target + num_seqs};
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
  int64_t total = 0;
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
    total += n;
  }
  if (main_blocks.empty()) return;
  // Items of `chunk` blocks: about four thread blocks per multiprocessor in all, none shorter
  // than 256 positions.
  const int64_t target = (4 * int64_t{shape.num_sms} + shape.num_kv_heads - 1) / shape.num_kv_heads;
  const int64_t chunk = std::max<int64_t>({1, (256 + B - 1) / B, (total + target - 1) / target});
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
                             cudaStream_t stream) {
  if (d.num_seqs == 0) return;
  if (d.num_int4_items > 0) {
    switch (a.block_size) {
      case 32:
        launch_int4<2>(a, d, stream);
        break;
      case 64:
        launch_int4<4>(a, d, stream);
        break;
      case 128:
        launch_int4<8>(a, d, stream);
        break;
      default:
        S4KV_CHECK(false, "decode attention: int4_kivi block size ", a.block_size);
    }
    S4KV_CUDA_CHECK(cudaGetLastError());
  }
  const int num_rows = d.num_items - d.num_int4_items;
  if (num_rows > 0) {
    if (a.cache == kv::KvCacheDtype::kFp8E4M3) {
      launch_rows<RowFormat::kFp8>(a, d, stream);
    } else if (a.bf16) {
      launch_rows<RowFormat::kBf16>(a, d, stream);
    } else {
      launch_rows<RowFormat::kF16>(a, d, stream);
    }
    S4KV_CUDA_CHECK(cudaGetLastError());
  }
  const dim3 grid(static_cast<unsigned>(d.num_seqs), static_cast<unsigned>(a.num_heads));
  with_act_type(a.out_dtype, [&](auto zero) {
    decode_merge_kernel<decltype(zero)><<<grid, kD, 0, stream>>>(a, d);
  });
  S4KV_CUDA_CHECK(cudaGetLastError());
}

}  // namespace s4kv::backend::cuda
