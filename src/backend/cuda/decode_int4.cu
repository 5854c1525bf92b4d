// int4_kivi decode attention over pool blocks on tensor cores (decode_attention_common.cuh has
// the fragment layout): dequantization fused in registers, pre-RoPE keys rotated in registers,
// the blocks streamed through shared memory.
#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_attention_common.cuh"
#include "backend/cuda/launch.cuh"
#include "common/check.h"

namespace s4kv::backend::cuda::decode_detail {
namespace {

// ---- int4_kivi pool blocks ----------------------------------------------------------------

// The bytes of one int4_kivi block (int4_kivi_layout.h) for B tokens and kG value groups.
template <int B, int kG>
__host__ __device__ constexpr int int4_block_bytes() {
  return B * (kD + 4 * kG) + 4 * kD;
}
constexpr int kInt4Stages = 3;  // blocks in flight per thread block: this one and two ahead
// Thread blocks per multiprocessor the int4 kernel is compiled for (registers a thread <= 65536 /
// (blocks x kWarps x 32)). Measured on the H200 at B 64 (bench/results/cuda_h200/
// attention_notes.md): version 4's kernel ran fastest at 2 (~217 registers; 3 and 4 spilled),
// version 5's at 3 (168 registers, no spills: 8-20 % faster than 2). Other block sizes keep 2.
// S4KV_INT4_MIN_BLOCKS overrides it for every block size, for a measurement
// (tools/device_attention.sh ab).
template <int kWarps>
constexpr int int4_min_blocks() {
#ifdef S4KV_INT4_MIN_BLOCKS
  return S4KV_INT4_MIN_BLOCKS;
#else
  return kWarps == 4 ? 3 : 2;
#endif
}
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
template <int kWarps, int kG, bool kFusedMerge>
__global__ void __launch_bounds__(kWarps * 32, int4_min_blocks<kWarps>())
    decode_int4_kernel(PagedAttentionArgs a, DecodeLaunch d) {
  constexpr int B = kWarps * 16;
  constexpr int kBlockBytes = int4_block_bytes<B, kG>();
  constexpr int kPairs = 8 / kWarps;  // channel pairs m < 8 each warp turns
  static_assert(kInt4Stages * kBlockBytes >= (kWarps * 8 * kD + kWarps * 8 * 7) * 4,
                "the epilogue reuses the stages");
  S4KV_DYNAMIC_SHARED(dsmem);
  unsigned char* stages = dsmem;
  uint32_t* turned = reinterpret_cast<uint32_t*>(dsmem + kInt4Stages * kBlockBytes);
  allow_dependent_launch();
  grid_dependency_wait();
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

  // Stage k % kInt4Stages <- block it.begin + k. Thread x copies the 16-byte chunks x + j kThreads
  // of every block: from source byte 16 x + 16 j kThreads of the block (one address a block, the
  // rest immediate offsets) to their swizzled destinations (computed once); the next block's
  // entry of the block table is read one block ahead.
  constexpr int kThreads = kWarps * 32;
  constexpr int kChunks = kBlockBytes / 16;
  constexpr int kChunksPerThread = (kChunks + kThreads - 1) / kThreads;
  uint32_t chunk_to[kChunksPerThread];
#pragma unroll
  for (int j = 0; j < kChunksPerThread; ++j) {
    const int c = static_cast<int>(threadIdx.x) + j * kThreads;
    int to = c;
    if (c >= kc0 && c < kc0 + 4 * B) {
      const int t = (c - kc0) / 4;
      to = kc0 + 4 * t + (((c - kc0) % 4) ^ (2 * ((t >> 1) & 1)));
    } else if (c >= vc0 && c < vc0 + 4 * B) {
      const int t = (c - vc0) / 4;
      to = vc0 + 4 * t + (((c - vc0) % 4) ^ ((t >> 1) & 3));
    }
    chunk_to[j] = static_cast<uint32_t>(16 * to);
  }
  const bool last_chunk =
      static_cast<int>(threadIdx.x) + (kChunksPerThread - 1) * kThreads < kChunks;
  const uint32_t stages_shared = static_cast<uint32_t>(__cvta_generic_to_shared(stages));
  const auto* pool = reinterpret_cast<const unsigned char*>(a.pool) +
                     static_cast<int64_t>(g) * L.block_bytes + 16 * threadIdx.x;
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
          cp_async16_shared(dst + chunk_to[j], src + 16 * j * kThreads);
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
  // fetch_turn(k) is called for k = 0, 1, 2, ..., so the rows advance by one block a call.
  float2 tc[kPairs], ts[kPairs];
  const int64_t turn_row0 = static_cast<int64_t>(it.begin) * B * (kD / 2) + 16 * i + 2 * m0;
  const auto* turn_cos = reinterpret_cast<const float2*>(a.rope_cos + turn_row0);
  const auto* turn_sin = reinterpret_cast<const float2*>(a.rope_sin + turn_row0);
  auto fetch_turn = [&](int k) {
    if (k >= n) return;
#pragma unroll
    for (int e = 0; e < kPairs; ++e) {
      tc[e] = __ldg(turn_cos + e);
      ts[e] = __ldg(turn_sin + e);
    }
    turn_cos += B * (kD / 2) / 2;
    turn_sin += B * (kD / 2) / 2;
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
  // This lane's key positions in the block (the rows of its score C fragment); its value
  // positions (the k of its PV fragments) are tv = 16 warp + 2i, tv + 1, tv + 8, tv + 9.
  const int tk0 = 16 * warp + r, tk1 = tk0 + 8;
  // The swizzle of the staged key code chunks at tk0 and tk1 (see above): 2 ((t / 2) % 2) is
  // 2 ((r / 2) % 2) at both.
  const int ksw = 2 * ((r >> 1) & 1);
  // The value codes by two ldmatrix .x4 .trans a block: matrix j of load c holds 16-byte chunk
  // (32 channels) g = 2c + j / 2 of positions 16 warp + 8 (j % 2) + 0..7, each row at its
  // swizzled place; lane l gives row l % 8 of matrix l / 8.
  uint32_t v_lane[2];
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const int j = lane / 8, t = 16 * warp + 8 * (j % 2) + lane % 8, g = 2 * c + j / 2;
    v_lane[c] = static_cast<uint32_t>(L.v_codes_offset) + 64 * t + 16 * (g ^ ((t >> 1) & 3));
  }
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

    // Scores of positions tk0 and tk1 (C fragment rows) for heads 2i, 2i + 1 (columns) from
    // their keys (A fragment) and the turned query (B fragment).
    const auto* kcodes = reinterpret_cast<const uint2*>(base + L.k_codes_offset);
    const auto* kscale = reinterpret_cast<const uint4*>(base + L.k_scale_offset);
    const auto* kzero = reinterpret_cast<const uint4*>(base + L.k_zero_offset);
    uint32_t kbs[2][16];  // the keys at tk0, tk1: the lane's channel pairs m (half2)
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      // Key code words 2i, 2i + 1 (chunk i / 2) and 2i + 8, 2i + 9.
      const int t = nt == 0 ? tk0 : tk1;
      const uint2 w01 = kcodes[t * 8 + 2 * ((i / 2) ^ ksw) + i % 2];
      const uint2 w23 = kcodes[t * 8 + 2 * ((2 + i / 2) ^ ksw) + i % 2];
      const uint32_t w[4] = {w01.x, w01.y, w23.x, w23.y};
      uint32_t(&kb)[16] = kbs[nt];
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
    }
    // Two chains of four MMAs (the k-tiles' order of summation differs from one chain).
    float c[2][4] = {};
#pragma unroll
    for (int tt = 0; tt < 8; ++tt) {
      const uint32_t ka[4] = {kbs[0][2 * tt], kbs[1][2 * tt], kbs[0][2 * tt + 1],
                              kbs[1][2 * tt + 1]};
      mma_m16n8k16<false>(c[tt % 2], ka, qa[2 * tt], qa[2 * tt + 1]);
    }
    float s[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) s[j] = c[0][j] + c[1][j];
    st.update(s);
    store_turn(k + 1);  // read by every warp after the next block's barrier

    // Values: probabilities times the value scales (per value group), transposed into the B
    // fragment (positions tv.. of head r), the zeros' share, codes as the A fragment taken as
    // fp16 subnormals: a nibble in bits 0..3 of a half is c 2^-24, one in bits 4..7 is
    // 16 c 2^-24, both exact (no conversion; the epilogue scales those rows by 2^24 and 2^20).
    // ldmatrix .trans hands lane (r, i) unit r (nibbles 0..3) of group g at positions tv, tv + 1
    // (x[g][0]) and tv + 8, tv + 9 (x[g][1]): m-tile 2g takes nibbles 0 and 1 (rows r, r + 8),
    // m-tile 2g + 1 nibbles 2 and 3 (int4_channel()).
    const auto* vscale = reinterpret_cast<const __half*>(base + L.v_scale_offset);
    const auto* vzero = reinterpret_cast<const __half*>(base + L.v_zero_offset);
    const uint32_t stage_shared = stages_shared + (k % kInt4Stages) * kBlockBytes;
    uint32_t x[4][2];
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      uint32_t d4[4];
      ldmatrix_x4_trans(d4, stage_shared + v_lane[c]);
      x[2 * c][0] = d4[0];
      x[2 * c][1] = d4[1];
      x[2 * c + 1][0] = d4[2];
      x[2 * c + 1][1] = d4[3];
    }
    uint32_t b0 = 0, b1 = 0;
#pragma unroll
    for (int g32 = 0; g32 < 4; ++g32) {
      const int vg = g32 * kG / 4;
      if (g32 * kG % 4 == 0) {  // the first m-tile pair of value group vg
        const float vs0 = __half2float(vscale[tk0 * kG + vg]);
        const float vs1 = __half2float(vscale[tk1 * kG + vg]);
        const float z0 = __half2float(vzero[tk0 * kG + vg]);
        const float z1 = __half2float(vzero[tk1 * kG + vg]);
#pragma unroll
        for (int e = 0; e < 2; ++e) st.z[vg][e] += s[e] * z0 + s[e + 2] * z1;
        // [position r][heads 2i, 2i + 1] -> [head r][positions 2i, 2i + 1], and the same + 8.
        b0 = transpose8x8_b16(pack2<false>(s[0] * vs0, s[1] * vs0));
        b1 = transpose8x8_b16(pack2<false>(s[2] * vs1, s[3] * vs1));
      }
      const uint32_t lo = x[g32][0], hi = x[g32][1], lo2 = lo >> 8, hi2 = hi >> 8;
      const uint32_t av0[4] = {lo & 0x000f000fu, lo & 0x00f000f0u, hi & 0x000f000fu,
                               hi & 0x00f000f0u};
      mma_m16n8k16<false>(st.acc[2 * g32], av0, b0, b1);
      const uint32_t av1[4] = {lo2 & 0x000f000fu, lo2 & 0x00f000f0u, hi2 & 0x000f000fu,
                               hi2 & 0x00f000f0u};
      mma_m16n8k16<false>(st.acc[2 * g32 + 1], av1, b0, b1);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the stages' memory becomes the epilogue's
#pragma unroll
  for (int mt = 0; mt < 8; ++mt) {
#pragma unroll
    for (int j = 0; j < 4; ++j) st.acc[mt][j] *= j < 2 ? 16777216.0f : 1048576.0f;  // exact
  }
  write_partial<kWarps, ChannelMap::kInt4>(
      st, reinterpret_cast<float*>(dsmem),
      d.partials +
          (static_cast<int64_t>(blockIdx.x) * a.num_kv_heads + g) * group * kDecodePartialFloats,
      group, kD / kG);
  if constexpr (kFusedMerge) merge_if_last<kThreads>(a, d, it.merge, g, dsmem);
}

// The kernel for kWarps, kG and the merge with its attributes set (once): its shared memory
// bytes.
template <int kWarps, int kG, bool kFusedMerge = false>
int configured_int4_kernel() {
  constexpr int kSmem = int4_smem_bytes<kWarps, kG>();
  static const bool attribute_set = [] {
    S4KV_CUDA_CHECK(cudaFuncSetAttribute(decode_int4_kernel<kWarps, kG, kFusedMerge>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    // All the multiprocessor's on-chip memory as shared memory: int4_min_blocks() thread blocks
    // of ~47 KB each must fit (the driver's own choice left room for two).
    S4KV_CUDA_CHECK(cudaFuncSetAttribute(decode_int4_kernel<kWarps, kG, kFusedMerge>,
                                         cudaFuncAttributePreferredSharedMemoryCarveout,
                                         cudaSharedmemCarveoutMaxShared));
    return true;
  }();
  (void)attribute_set;
  return kSmem;
}

// f.template operator()<kWarps, kG>() for a block size and a count of value groups.
template <typename F>
void with_int4_kernel(int block_size, int value_groups, F&& f) {
  auto groups = [&]<int kWarps>() {
    switch (value_groups) {
      case 1:
        f.template operator()<kWarps, 1>();
        break;
      case 2:
        f.template operator()<kWarps, 2>();
        break;
      case 4:
        f.template operator()<kWarps, 4>();
        break;
      default:
        S4KV_CHECK(false, "decode attention: ", value_groups, " value groups");
    }
  };
  switch (block_size) {
    case 32:
      groups.template operator()<2>();
      break;
    case 64:
      groups.template operator()<4>();
      break;
    case 128:
      groups.template operator()<8>();
      break;
    default:
      S4KV_CHECK(false, "decode attention: int4_kivi block size ", block_size);
  }
}

}  // namespace

void launch_decode_int4(const PagedAttentionArgs& a, const DecodeLaunch& d, cudaStream_t stream) {
  with_int4_kernel(a.block_size, a.layout.num_value_groups(), [&]<int kWarps, int kG>() {
    constexpr int kBlockBytes = int4_block_bytes<kWarps * 16, kG>();
    S4KV_CHECK(static_cast<int>(a.layout.block_bytes) == kBlockBytes,
               "decode attention: int4_kivi block of ", a.layout.block_bytes, " bytes");
    const dim3 grid(static_cast<unsigned>(d.num_int4_items), static_cast<unsigned>(a.num_kv_heads));
    if (d.merge_counts != nullptr) {
      const int smem = configured_int4_kernel<kWarps, kG, true>();
      launch_dependent(decode_int4_kernel<kWarps, kG, true>, grid, kWarps * 32, smem, stream, a, d);
    } else {
      const int smem = configured_int4_kernel<kWarps, kG>();
      launch_dependent(decode_int4_kernel<kWarps, kG, false>, grid, kWarps * 32, smem, stream, a,
                       d);
    }
  });
}

int int4_blocks_per_sm(int block_size, int value_groups) {
  int blocks = 0;
  with_int4_kernel(block_size, value_groups, [&]<int kWarps, int kG>() {
    static const int n = [] {
      const int smem = configured_int4_kernel<kWarps, kG>();
      int r = 0;
      S4KV_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &r, decode_int4_kernel<kWarps, kG, false>, kWarps * 32, smem));
      return r;
    }();
    blocks = n;
  });
  return blocks;
}

}  // namespace s4kv::backend::cuda::decode_detail
