// Prefill attention on tensor cores (prefill_attention.cuh) and the host's plan of its tiles.
//
// Fragments of mma.sync.m16n8k16 (lane = 4 g + t): A rows g and g + 8, columns 2t, 2t + 1 and
// 2t + 8, 2t + 9 (registers a0: row g, a1: row g + 8, a2: row g cols + 8, a3: row g + 8 cols
// + 8); B (k x n) column n = g, rows k = 2t, 2t + 1 (b0) and 2t + 8, 2t + 9 (b1); C rows g
// (c0, c1) and g + 8 (c2, c3), columns 2t, 2t + 1. The low 16 bits of a register hold the lower
// column (or k) index.
//   S = Q K^T: A = Q (16 rows of the warp, k = channels), B = K^T (k = channels, n = 8
//     positions): b0 of positions n0..n0 + 7 is the K row's channel pair, what ldmatrix (no
//     transpose) gives from K rows [position][channel].
//   O += P V: A = P, whose fragment is the S C fragments of n-tiles 2kk and 2kk + 1 as they
//     stand; B = V (k = positions, n = channels): ldmatrix.trans of V rows [position][channel].
// Shared memory: K and V stages of [64 positions][136] 16-bit (a row is 272 bytes, so the 8
// rows an ldmatrix reads fall in distinct banks), two stages each, then a raw area for the
// formats that are converted (fp8 bytes, int4_kivi code words, parameters and RoPE rows): 69,632
// bytes per block for 16-bit caches (168 registers, __launch_bounds__ for 3 blocks per SM on
// sm_90), 88,064 for fp8 and 101,376 for int4_kivi (230 and 244 registers, 2 blocks per SM;
// int4_kivi's blocks of two heads, below, 246 registers, 1 block per SM).
// The loop over KV tiles, per tile k: wait for its copies and synchronize (every warp is then
// done with tile k - 1), convert it in place if it came raw, issue tile k + 1 into the other
// stage (or the raw area), then attend to tile k while tile k + 1 lands.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/int4_kivi_device.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/prefill_attention.cuh"
#include "backend/cuda/tensor_core.cuh"
#include "common/check.h"
#include "common/env_switch.h"
#include "common/half.h"
#include "kv/hadamard.h"

namespace s4kv::backend::cuda {
namespace {

constexpr int kD = 128;
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 16 * kWarps;  // query rows per block
static_assert(kRows == kPrefillTileRows);
constexpr int kKv = 64;                    // positions per KV tile
constexpr int kLd = kD + 8;                // 16-bit elements per staged row (16 bytes of padding)
constexpr int kStage = kKv * kLd;          // elements of one K or V stage
constexpr int kBufBytes = 4 * kStage * 2;  // K stages 0, 1, then V stages 0, 1
constexpr float kLog2e = 1.4426950408889634f;

// The raw area. int4_kivi: code words of the tile's positions (96-byte rows, 64 used: the rows
// two threads read at once fall in distinct banks), each block's k_scale then k_zero (a tile
// spans at most two blocks: B = 32), the positions' v_scale / v_zero [64][G] fp16, then their
// rope_f16 rows (272 bytes apart, 256 used: the four rows of a quarter warp's 16-byte loads
// start 4 banks apart).
constexpr int kRawCodeLd = 96;
constexpr int kRawKCodes = 0;
constexpr int kRawVCodes = kRawKCodes + kKv * kRawCodeLd;
constexpr int kRawKParams = kRawVCodes + kKv * kRawCodeLd;  // [2 blocks][256] fp16
constexpr int kRawVScale = kRawKParams + 2 * 2 * kD * 2;    // [64][G <= 4] fp16
constexpr int kRawVZero = kRawVScale + kKv * 4 * 2;
constexpr int kRawRope = kRawVZero + kKv * 4 * 2;
constexpr int kRawRopeLd = 272;
constexpr int kRopeRowBytes = kD * 2;  // 64 cos, 64 sin
constexpr int kRawInt4Bytes = kRawRope + kKv * kRawRopeLd;
static_assert(kRawRope % 16 == 0 && kRawRopeLd % 16 == 0);
// fp8_e4m3: K rows then V rows of 128 bytes, 144 apart.
constexpr int kRawFp8Ld = 144;
constexpr int kRawFp8Bytes = 2 * kKv * kRawFp8Ld;

enum class Src { k16Bit, kFp8, kInt4 };

template <Src S>
constexpr int smem_bytes() {
  return kBufBytes + (S == Src::kFp8 ? kRawFp8Bytes : S == Src::kInt4 ? kRawInt4Bytes : 0);
}

// ---- small device helpers -------------------------------------------------------------------

// 16 zero bytes where there is nothing to read.
__device__ inline void zero16(void* smem) { *static_cast<uint4*>(smem) = make_uint4(0, 0, 0, 0); }

// ---- where the context lives ----------------------------------------------------------------

// One block's sequence and the ranges of its context, in the order they are attended:
// int4_kivi pool positions [pa, pb) first (v2: Hadamard-domain values), then the sink block
// [0, pa), then [pb, kv_end) (the residual ring and this step's staging; every position for
// the other formats, where pa = pb = 0).
struct Ctx {
  const int32_t* table;  // the sequence's block table
  int g;                 // KV head
  int start;             // seq_len - q_len: positions before it were cached before this step
  int q0;                // the sequence's first token row
  int pool_end;          // int4_kivi: blocks before it are pool or sink blocks
  int slot;              // int4_kivi: residual seat
  int pa, pb, kv_end;
  int n_pool, n_sink, n_tiles;
  // int4_kivi: pool positions pa .. row_end - 1 are in the pool rows (a.pool_rows_k / _v), from
  // row row_base (row_end = pa: none; the positions from row_end on dequantized here)
  int row_base, row_end;
};

// int4_kivi: sequence seq's pool end and pool positions pa .. pb - 1 (pa = B after a sink block,
// whose id in c.table is at or above num_pool_blocks).
__device__ inline void pool_range(const PagedAttentionArgs& a, int seq, Ctx& c) {
  c.pool_end = a.pool_ends[seq];
  c.pb = c.pool_end * a.block_size;
  c.pa = c.pool_end > 0 && c.table[0] >= a.num_pool_blocks ? a.block_size : 0;
}

struct KvTile {
  int p0;     // first position
  int count;  // positions p0 .. p0 + count - 1 (1..64); the rest of the stage is zero
  bool pool;  // int4_kivi pool blocks
};

__device__ inline KvTile kv_tile(const Ctx& c, int k) {
  if (k < c.n_pool) {
    const int p0 = c.pa + kKv * k;
    return {p0, min(kKv, c.pb - p0), true};
  }
  k -= c.n_pool;
  if (k < c.n_sink) {
    const int p0 = kKv * k;
    return {p0, min(kKv, c.pa - p0), false};
  }
  k -= c.n_sink;
  const int p0 = c.pb + kKv * k;
  return {p0, min(kKv, c.kv_end - p0), false};
}

// The 16-bit K and V rows (kv head g's 128 elements) of position p, as load_kv reads them: the
// 16-bit cache's paged rows; int4_kivi's pool rows (made by launch_int4_pool_rows), sink block
// (a block before pool_end: only the sink block reaches here otherwise), residual ring (before
// start) or this step's staging.
__device__ inline void rows16(const PagedAttentionArgs& a, const Ctx& c, int p, const uint16_t*& k,
                              const uint16_t*& v) {
  const int b = a.block_size;
  const int64_t kv_dim = static_cast<int64_t>(a.num_kv_heads) * kD;
  const int blk = p / b;
  if (a.cache != kv::KvCacheDtype::kInt4Kivi) {
    const int64_t row = (static_cast<int64_t>(c.table[blk]) * b + p % b) * kv_dim + c.g * kD;
    k = static_cast<const uint16_t*>(a.k_cache) + row;
    v = static_cast<const uint16_t*>(a.v_cache) + row;
    return;
  }
  if (p >= c.pa && p < c.row_end) {  // a pool position, made before the kernel
    const int64_t row = static_cast<int64_t>(c.row_base + p - c.pa) * kv_dim + c.g * kD;
    k = a.pool_rows_k + row;
    v = a.pool_rows_v + row;
    return;
  }
  if (blk < c.pool_end) {
    k = a.sink +
        static_cast<int64_t>(c.table[blk] - a.num_pool_blocks) *
            sink_stride_or_packed(a.sink_stride, b, kv_dim) +
        static_cast<int64_t>(p % b) * kv_dim + c.g * kD;
    v = k + static_cast<int64_t>(b) * kv_dim;
    return;
  }
  if (p < c.start) {
    k = a.residual + ring_k_offset(c.slot, p, b, a.ring, kv_dim, a.seat_stride) + c.g * kD;
    v = k + ring_v_offset(b, a.ring, kv_dim);
    return;
  }
  const int64_t row = static_cast<int64_t>(c.q0 + p - c.start) * kv_dim + c.g * kD;
  k = a.staging_k + row;
  v = a.staging_v + row;
}

// ---- loading a KV tile ----------------------------------------------------------------------
// Thread mapping of the converting loaders: thread 2 t + h takes position t of the tile, writing
// channel chunks [32 h, 32 h + 32) and [64 + 32 h, 96 + 32 h) (the RoPE partners of the first),
// 8 channels (16 bytes) per store. The copying loaders (issue_rows16, issue_fp8) give a row to
// consecutive lanes, one 16-byte chunk each, so that a warp's copy reads whole 128-byte lines
// (a lane pair a row made each request touch 16 lines, one sector each: the decode row kernel
// ran 1.3-1.5x faster once its copy read whole lines, bench/results/cuda_h200/ab_v6). Warp w
// copies positions 16 w .. 16 w + 15 of the tile; lane l < 16 locates position 16 w + l once and
// the lanes copying it take its address by a shuffle.
constexpr int kWarpRows = kKv / kWarps;  // positions a warp copies
static_assert(kWarpRows == 16, "a half warp locates a warp's positions");

// 16-bit rows straight into the stage: two positions a pass, chunk lane % 16 of each.
__device__ inline void issue_rows16(const PagedAttentionArgs& a, const Ctx& c, const KvTile& kt,
                                    uint16_t* kb, uint16_t* vb) {
  const int lane = static_cast<int>(threadIdx.x) % 32, t0 = kWarpRows * (threadIdx.x / 32);
  unsigned long long kl = 0, vl = 0;  // the rows of position t0 + lane % 16
  if (t0 + lane % 16 < kt.count) {
    const uint16_t *ks, *vs;
    rows16(a, c, kt.p0 + t0 + lane % 16, ks, vs);
    kl = reinterpret_cast<unsigned long long>(ks);
    vl = reinterpret_cast<unsigned long long>(vs);
  }
  const int ch = lane % 16;  // kD / 8 = 16 chunks a row
#pragma unroll
  for (int j = 0; j < kWarpRows / 2; ++j) {
    const int src = 2 * j + lane / 16, t = t0 + src;
    const auto* ks = reinterpret_cast<const uint16_t*>(__shfl_sync(~0u, kl, src));
    const auto* vs = reinterpret_cast<const uint16_t*>(__shfl_sync(~0u, vl, src));
    uint16_t* kd = kb + t * kLd + 8 * ch;
    uint16_t* vd = vb + t * kLd + 8 * ch;
    if (t < kt.count) {
      cp_async16(kd, ks + 8 * ch);
      cp_async16(vd, vs + 8 * ch);
    } else {
      zero16(kd);
      zero16(vd);
    }
  }
}

// fp8_e4m3 rows into the raw area (widened by convert_fp8 once they have landed): four positions
// a pass, chunk lane % 8 of each.
__device__ inline void issue_fp8(const PagedAttentionArgs& a, const Ctx& c, const KvTile& kt,
                                 unsigned char* raw) {
  const int lane = static_cast<int>(threadIdx.x) % 32, t0 = kWarpRows * (threadIdx.x / 32);
  long long row = 0;  // the element offset of position t0 + lane % 16's rows
  if (t0 + lane % 16 < kt.count) {
    const int p = kt.p0 + t0 + lane % 16, b = a.block_size;
    row = (static_cast<int64_t>(c.table[p / b]) * b + p % b) * a.num_kv_heads * kD + c.g * kD;
  }
  const int ch = lane % 8;  // kD / 16 = 8 chunks a row
#pragma unroll
  for (int j = 0; j < kWarpRows / 4; ++j) {
    const int src = 4 * j + lane / 8, t = t0 + src;
    const long long r = __shfl_sync(~0u, row, src);
    if (t < kt.count) {
      cp_async16(raw + t * kRawFp8Ld + 16 * ch,
                 static_cast<const unsigned char*>(a.k_cache) + r + 16 * ch);
      cp_async16(raw + (kKv + t) * kRawFp8Ld + 16 * ch,
                 static_cast<const unsigned char*>(a.v_cache) + r + 16 * ch);
    }
  }
}

__device__ inline void convert_fp8(const unsigned char* raw, const KvTile& kt, uint16_t* kb,
                                   uint16_t* vb) {
  const int t = threadIdx.x / 2, h = threadIdx.x % 2;
#pragma unroll
  for (int part = 0; part < 2; ++part) {
    uint16_t* dst = (part == 0 ? kb : vb) + t * kLd;
    const unsigned char* src = raw + (part * kKv + t) * kRawFp8Ld;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int cb = 64 * (j / 4) + 32 * h + 8 * (j % 4);
      if (t < kt.count) {
        const uint2 w = *reinterpret_cast<const uint2*>(src + cb);
        *reinterpret_cast<uint4*>(dst + cb) =
            make_uint4(fp8x2_to_f16x2(w.x), fp8x2_to_f16x2(w.x >> 16), fp8x2_to_f16x2(w.y),
                       fp8x2_to_f16x2(w.y >> 16));
      } else {
        zero16(dst + cb);
      }
    }
  }
}

// 16 bytes of an int4_kivi pool block into the raw area; zeros for a table id outside the pool
// (only padding sequences, whose every entry is the dummy block, have one there; their rows
// are never read).
__device__ inline void copy_pool16(const PagedAttentionArgs& a, int id, int g, size_t offset,
                                   unsigned char* dst) {
  if (id < a.num_pool_blocks) {
    cp_async16(dst, a.pool +
                        (static_cast<int64_t>(id) * a.num_kv_heads + g) *
                            static_cast<int64_t>(a.layout.block_bytes) +
                        static_cast<int64_t>(offset));
  } else {
    zero16(dst);
  }
}

// An int4_kivi pool tile's code words, parameters and RoPE rows into the raw area. A pool tile
// starts at a multiple of 32 (pa is 0 or B, tiles are 64 apart) and holds a multiple of min(B,
// 64) positions (pb is a multiple of B), so it spans whole 32-token halves of a B = 32 block
// pair, one B = 64 block, or one half of a B = 128 block: every part below is whole 16-byte
// chunks.
__device__ inline void issue_int4(const PagedAttentionArgs& a, const Ctx& c, const KvTile& kt,
                                  unsigned char* raw) {
  const kv::Int4KiviLayout& L = a.layout;
  const int b = a.block_size, groups = kD / L.value_group_size;
  // The positions' rope_f16 rows: 16 chunks a position.
  const auto* rope = reinterpret_cast<const unsigned char*>(a.rope_f16);
  for (int i = threadIdx.x; i < kt.count * 16; i += kThreads) {
    const int t = i / 16, ch = i % 16;
    cp_async16(raw + kRawRope + t * kRawRopeLd + 16 * ch,
               rope + static_cast<int64_t>(kt.p0 + t) * kRopeRowBytes + 16 * ch);
  }
  // Code words: per position 4 chunks of keys, 4 of values.
  for (int i = threadIdx.x; i < kt.count * 8; i += kThreads) {
    const int t = i / 8, part = (i / 4) % 2, ch = i % 4;
    const int p = kt.p0 + t;
    const size_t offset = (part == 0 ? L.k_codes_offset : L.v_codes_offset) +
                          static_cast<size_t>(p % b) * (kD / 2) + 16 * ch;
    copy_pool16(a, c.table[p / b], c.g, offset,
                raw + (part == 0 ? kRawKCodes : kRawVCodes) + t * kRawCodeLd + 16 * ch);
  }
  // Per block: k_scale then k_zero (512 bytes), the tile's tokens' v_scale and v_zero.
  const int b_first = kt.p0 / b, b_last = (kt.p0 + kt.count - 1) / b;
  for (int blk = b_first; blk <= b_last; ++blk) {
    const int sb = blk - b_first, id = c.table[blk];
    const int t_first = max(0, blk * b - kt.p0);  // the block's first position in the tile
    const int off = kt.p0 + t_first - blk * b;    // and its offset in the block
    const int n = min(kt.count - t_first, b - off);
    const int vchunks = n * groups * 2 / 16;
    for (int i = threadIdx.x; i < 32 + 2 * vchunks; i += kThreads) {
      if (i < 32) {
        const size_t offset = i < 16 ? L.k_scale_offset + 16 * i : L.k_zero_offset + 16 * (i - 16);
        copy_pool16(a, id, c.g, offset, raw + kRawKParams + sb * 512 + 16 * i);
      } else {
        const int part = (i - 32) / vchunks, ci = (i - 32) % vchunks;
        copy_pool16(a, id, c.g,
                    (part == 0 ? L.v_scale_offset : L.v_zero_offset) +
                        static_cast<size_t>(off) * groups * 2 + 16 * ci,
                    raw + (part == 0 ? kRawVScale : kRawVZero) + t_first * groups * 2 + 16 * ci);
      }
    }
  }
}

// An fp16 pair as the operand type's pair (bf16: rounded a second time).
template <bool kBf16>
__device__ inline uint32_t f16x2_operand(__half2 x) {
  if constexpr (kBf16) {
    const float2 f = __half22float2(x);
    return pack2<true>(f.x, f.y);
  } else {
    return *reinterpret_cast<const uint32_t*>(&x);
  }
}

// The staged pool tile dequantized into the stage in fp16 pairs of channels, as the decode
// kernel reads its blocks: the codes as exact fp16 integers, scale and zero in one fp16 FMA
// (q * scale + zero rounded once: the reference's value except where fp32's rounding of the sum
// differed), keys rotated by their position's RoPE row rounded to fp16 (rope_f16, staged with
// the codes; x1 c - x2 s, x2 c + x1 s: a product and an FMA, two more roundings), then the
// operand type (bf16: one more rounding).
// About half the instructions of fp32 arithmetic a channel; within the kernel's bounds against the
// reference (cuda_prefill_attention_test, attention_emulation_test).
// keys / values: which of the two this thread makes (a thread block of two heads splits them
// between its halves; thread 2 t + h of a half as above).
template <bool kBf16>
__device__ inline void dequant_int4(const PagedAttentionArgs& a, const KvTile& kt,
                                    const unsigned char* raw, uint16_t* kb, uint16_t* vb, bool keys,
                                    bool values) {
  const int t = threadIdx.x % kThreads / 2, h = threadIdx.x % 2;
  uint16_t* kd = kb + t * kLd;
  uint16_t* vd = vb + t * kLd;
  if (t >= kt.count) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int cb = 64 * (j / 4) + 32 * h + 8 * (j % 4);
      if (keys) zero16(kd + cb);
      if (values) zero16(vd + cb);
    }
    return;
  }
  const int b = a.block_size, gv = a.layout.value_group_size, groups = kD / gv;
  const int p = kt.p0 + t;
  const unsigned char* kp = raw + kRawKParams + (p / b - kt.p0 / b) * 512;  // k_scale, k_zero
  const unsigned char* rope = raw + kRawRope + t * kRawRopeLd;  // cos [64], sin [64] fp16
  // Words 4h .. 4h + 3 (channels 32h ..) and 8 + 4h .. (channels 64 + 32h ..) of keys, values.
  const unsigned char* kc = raw + kRawKCodes + t * kRawCodeLd;
  const unsigned char* vc = raw + kRawVCodes + t * kRawCodeLd;
  const uint4 kw[2] = {*reinterpret_cast<const uint4*>(kc + 16 * h),
                       *reinterpret_cast<const uint4*>(kc + 32 + 16 * h)};
  const uint4 vw[2] = {*reinterpret_cast<const uint4*>(vc + 16 * h),
                       *reinterpret_cast<const uint4*>(vc + 32 + 16 * h)};
  auto word = [](const uint4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
  };
  auto h2 = [](uint32_t w) { return *reinterpret_cast<const __half2*>(&w); };
  if (keys) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int cl = 32 * h + 8 * j;  // channels cl .. cl + 7 and their partners cl + 64 ..
      const uint4 sl = *reinterpret_cast<const uint4*>(kp + 2 * cl);
      const uint4 zl = *reinterpret_cast<const uint4*>(kp + 2 * kD + 2 * cl);
      const uint4 sh = *reinterpret_cast<const uint4*>(kp + 2 * (cl + 64));
      const uint4 zh = *reinterpret_cast<const uint4*>(kp + 2 * kD + 2 * (cl + 64));
      const uint4 co = *reinterpret_cast<const uint4*>(rope + 2 * cl);  // cos of cl .. cl + 7
      const uint4 si = *reinterpret_cast<const uint4*>(rope + kD + 2 * cl);
      uint32_t ql[4], qh[4];  // channel pairs (cl + 2m, cl + 2m + 1) and their partners
      codes8_to_f16x2(word(kw[0], j), ql);
      codes8_to_f16x2(word(kw[1], j), qh);
      uint32_t lo[4], hi[4];
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const __half2 x1 = __hfma2(h2(ql[m]), h2(word(sl, m)), h2(word(zl, m)));
        const __half2 x2 = __hfma2(h2(qh[m]), h2(word(sh, m)), h2(word(zh, m)));
        const __half2 c2 = h2(word(co, m)), s2 = h2(word(si, m));
        lo[m] = f16x2_operand<kBf16>(__hfma2(x1, c2, __hneg2(__hmul2(x2, s2))));
        hi[m] = f16x2_operand<kBf16>(__hfma2(x2, c2, __hmul2(x1, s2)));
      }
      *reinterpret_cast<uint4*>(kd + cl) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
      *reinterpret_cast<uint4*>(kd + cl + 64) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    }
  }
  if (!values) return;
  const auto* vscale = reinterpret_cast<const __half*>(raw + kRawVScale) + t * groups;
  const auto* vzero = reinterpret_cast<const __half*>(raw + kRawVZero) + t * groups;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int cb = 64 * (j / 4) + 32 * h + 8 * (j % 4);
    const __half2 s2 = __half2half2(vscale[cb / gv]), z2 = __half2half2(vzero[cb / gv]);
    uint32_t q[4], x[4];
    codes8_to_f16x2(word(vw[j / 4], j % 4), q);
#pragma unroll
    for (int m = 0; m < 4; ++m) x[m] = f16x2_operand<kBf16>(__hfma2(h2(q[m]), s2, z2));
    *reinterpret_cast<uint4*>(vd + cb) = make_uint4(x[0], x[1], x[2], x[3]);
  }
}

// ---- the block's rows -----------------------------------------------------------------------

// The normalized 128-point Walsh-Hadamard transform of each of the warp's 16 accumulator rows
// (o[n-tile][c]: channel 8 n + 2 (lane % 4) + c % 2, row lane / 4 + 8 (c / 2)), the stages in
// kv::hadamard_ref's order: h = 1 inside a register pair, h = 2, 4 across lanes 1 and 2 apart,
// h = 8 .. 64 across n-tiles.
__device__ inline void hadamard_rows(float (&o)[16][4]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int n = 0; n < 16; ++n) {
#pragma unroll
    for (int r = 0; r < 4; r += 2) {
      const float x = o[n][r], y = o[n][r + 1];
      o[n][r] = __fadd_rn(x, y);
      o[n][r + 1] = __fsub_rn(x, y);
    }
  }
#pragma unroll
  for (int x = 1; x <= 2; x *= 2) {
    const bool low = (lane & x) == 0;
#pragma unroll
    for (int n = 0; n < 16; ++n) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float other = __shfl_xor_sync(0xffffffffu, o[n][r], x);
        o[n][r] = low ? __fadd_rn(o[n][r], other) : __fsub_rn(other, o[n][r]);
      }
    }
  }
#pragma unroll
  for (int x = 1; x < 16; x *= 2) {
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      if ((n & x) != 0) continue;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float lo = o[n][r], hi = o[n + x][r];
        o[n][r] = __fadd_rn(lo, hi);
        o[n + x][r] = __fsub_rn(lo, hi);
      }
    }
  }
#pragma unroll
  for (int n = 0; n < 16; ++n) {
#pragma unroll
    for (int r = 0; r < 4; ++r) o[n][r] = __fmul_rn(o[n][r], kv::kHadamardScale128);
  }
}

// One warp's online softmax state over its 16 rows: r = 0 row lane / 4, r = 1 row lane / 4 + 8.
struct RowState {
  float o[16][4];  // O n-tiles (8 channels each), C fragments
  float m[2];      // running max (log2 units), equal in the four lanes of a row
  float l[2];      // this lane's part of the row's sum
};

// The warp's rows against one staged KV tile. row_pos: the positions of rows lane / 4 and
// lane / 4 + 8; mask: whether some position of the tile is past a row's or past kt.count.
template <bool kBf16>
__device__ inline void attend_tile(const uint32_t (&qa)[8][4], const uint16_t* kb,
                                   const uint16_t* vb, const KvTile& kt, const int (&row_pos)[2],
                                   bool mask, RowState& st) {
  const int lane = threadIdx.x % 32, t = lane % 4;
  float s[8][4];
#pragma unroll
  for (int n = 0; n < 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
  }
  // S: n-tile n = positions 8n .. 8n + 7; one ldmatrix.x4 gives b0, b1 of k-steps 2kk, 2kk + 1.
#pragma unroll
  for (int n = 0; n < 8; ++n) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t b[4];
      ldmatrix_x4(b, kb + (8 * n + lane % 8) * kLd + 32 * kk + 8 * (lane / 8));
      mma_m16n8k16<kBf16>(s[n], qa[2 * kk], b[0], b[1]);
      mma_m16n8k16<kBf16>(s[n], qa[2 * kk + 1], b[2], b[3]);
    }
  }
  if (mask) {
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = 8 * n + 2 * t + e % 2;
        if (col >= kt.count || kt.p0 + col > row_pos[e / 2]) s[n][e] = -INFINITY;
      }
    }
  }
  // Online softmax, in log2 units (the query carries log2 e).
  float mu[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(st.m[r], mx);
    mu[r] = m_new == -INFINITY ? 0.0f : m_new;      // a row that has seen nothing yet stays at 0
    const float corr = fast_exp2(st.m[r] - mu[r]);  // 0 while m is -inf
    st.m[r] = m_new;
    st.l[r] *= corr;
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      st.o[n][2 * r] *= corr;
      st.o[n][2 * r + 1] *= corr;
    }
  }
#pragma unroll
  for (int n = 0; n < 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[n][e] = fast_exp2(s[n][e] - mu[e / 2]);
      st.l[e / 2] += s[n][e];
    }
  }
  // O += P V: k-step kk = positions 16kk .. 16kk + 15; one ldmatrix.x4.trans gives b0, b1 of
  // channel n-tiles 2np and 2np + 1.
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint32_t pa[4] = {pack2<kBf16>(s[2 * kk][0], s[2 * kk][1]),
                            pack2<kBf16>(s[2 * kk][2], s[2 * kk][3]),
                            pack2<kBf16>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                            pack2<kBf16>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
    for (int np = 0; np < 8; ++np) {
      uint32_t b[4];
      ldmatrix_x4_trans(
          b, vb + (16 * kk + 8 * ((lane / 8) % 2) + lane % 8) * kLd + 16 * np + 8 * (lane / 16));
      mma_m16n8k16<kBf16>(st.o[2 * np], pa, b[0], b[1]);
      mma_m16n8k16<kBf16>(st.o[2 * np + 1], pa, b[2], b[3]);
    }
  }
}

// kHeads query heads of one KV group a thread block (1, or 2 for int4_kivi: its pool tiles are
// dequantized once for both): warps 4 h .. 4 h + 3 take head h's rows, the first kThreads threads
// issue the copies, and a pool tile's keys are made by the first half, its values by the second.
// Where the group has an odd number of heads, its last block's second half has none: it copies,
// dequantizes and waits at the barriers, but attends to nothing.
template <Src S, bool kBf16, int kHeads>
__global__ void __launch_bounds__(kThreads* kHeads, S == Src::k16Bit ? 3 : 2 / kHeads)
    prefill_attention_kernel(PagedAttentionArgs a, const PrefillTile* tiles, float* partials) {
  S4KV_DYNAMIC_SHARED(smem);
  uint16_t* kbuf = reinterpret_cast<uint16_t*>(smem);  // [2][64][kLd]
  uint16_t* vbuf = kbuf + 2 * kStage;                  // [2][64][kLd]
  unsigned char* raw = smem + kBufBytes;
  const int group = a.num_heads / a.num_kv_heads;
  const int slots = (group + kHeads - 1) / kHeads;  // thread blocks a KV head and tile
  const int per_tile = a.num_kv_heads * slots;
  const int tile_index = static_cast<int>(blockIdx.x) / per_tile;
  const int in_tile = static_cast<int>(blockIdx.x) % per_tile;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % kWarps, gq = lane / 4, tq = lane % 4;
  const int half = kHeads == 1 ? 0 : static_cast<int>(threadIdx.x) / kThreads;
  const int head_in_group = in_tile % slots * kHeads + half;
  const bool active = kHeads == 1 || head_in_group < group;  // (warp-uniform)
  const int head = in_tile / slots * group + head_in_group;
  const PrefillTile tile = tiles[tile_index];
  const bool copier = half == 0;

  Ctx c;
  c.g = in_tile / slots;
  c.table = a.block_tables + static_cast<int64_t>(tile.seq) * a.max_blocks_per_seq;
  c.q0 = a.query_start_loc[tile.seq];
  c.start = a.seq_lens[tile.seq] - (a.query_start_loc[tile.seq + 1] - c.q0);
  const int n_rows = tile.q_end - tile.q_begin;
  const int pos0 = c.start + (tile.q_begin - c.q0);  // the tile's first row's position
  c.kv_end = pos0 + n_rows;
  c.pool_end = c.slot = c.pa = c.pb = 0;
  c.row_base = -1;
  c.row_end = 0;
  if constexpr (S == Src::kInt4) {
    c.slot = a.seats[tile.seq];
    pool_range(a, tile.seq, c);  // pb <= start: pool blocks were full before the step
    c.row_end = c.pa;
    if (a.pool_row_base != nullptr) c.row_base = a.pool_row_base[tile.seq];
    if (c.row_base >= 0) c.row_end = min(c.pb, c.pa + kKv * a.pool_row_tiles[tile.seq]);
  }
  c.n_pool = (c.pb - c.pa + kKv - 1) / kKv;
  c.n_sink = (c.pa + kKv - 1) / kKv;
  c.n_tiles = c.n_pool + c.n_sink + (c.kv_end - c.pb + kKv - 1) / kKv;
  // A split tile's run of KV tiles (split_prefill); the pool's last tile within it, after which
  // v2's Hadamard-domain sums turn back.
  int k_begin = 0, k_end = c.n_tiles;
  if (tile.parts > 1) {
    k_begin = static_cast<int>(int64_t{c.n_tiles} * tile.part / tile.parts);
    k_end = static_cast<int>(int64_t{c.n_tiles} * (tile.part + 1) / tile.parts);
  }
  const int pool_last = min(k_end, c.n_pool) - 1;

  auto issue = [&](int k) {
    if (!copier) return;
    const KvTile kt = kv_tile(c, k);
    uint16_t* kb = kbuf + (k % 2) * kStage;
    uint16_t* vb = vbuf + (k % 2) * kStage;
    if constexpr (S == Src::kFp8) {
      issue_fp8(a, c, kt, raw);
    } else if constexpr (S == Src::kInt4) {
      if (kt.pool && kt.p0 >= c.row_end) {
        issue_int4(a, c, kt, raw);
      } else {
        issue_rows16(a, c, kt, kb, vb);
      }
    } else {
      issue_rows16(a, c, kt, kb, vb);
    }
    cp_async_commit();
  };
  if (k_begin < k_end) issue(k_begin);

  // Q rows 16 warp + gq (+ 8) as A fragments of k-steps 0..7, scaled into log2 units.
  uint32_t qa[8][4];
  {
    const float f = a.scale * kLog2e;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = 16 * warp + gq + 8 * r;
      const float* q = a.q + static_cast<int64_t>(tile.q_begin + row) * a.q_stride + head * kD;
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) {
#pragma unroll
        for (int hi = 0; hi < 2; ++hi) {
          float2 v = make_float2(0.0f, 0.0f);
          if (active && row < n_rows)
            v = *reinterpret_cast<const float2*>(q + 16 * kk + 2 * tq + 8 * hi);
          qa[kk][r + 2 * hi] = pack2<kBf16>(v.x * f, v.y * f);
        }
      }
    }
  }
  RowState st;
#pragma unroll
  for (int n = 0; n < 16; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) st.o[n][e] = 0.0f;
  }
  st.m[0] = st.m[1] = -INFINITY;
  st.l[0] = st.l[1] = 0.0f;
  const int warp_pos = pos0 + 16 * warp;  // the position of the warp's first row
  const int row_pos[2] = {warp_pos + gq, warp_pos + gq + 8};

  for (int k = k_begin; k < k_end; ++k) {
    const KvTile kt = kv_tile(c, k);
    const uint16_t* kb = kbuf + (k % 2) * kStage;
    const uint16_t* vb = vbuf + (k % 2) * kStage;
    // Tile k has landed (this thread's copies, then everyone's); every warp is done with tile
    // k - 1, whose stage tile k + 1 takes, and with the raw area's previous contents.
    cp_async_wait<0>();
    __syncthreads();
    if constexpr (S == Src::kFp8) {
      convert_fp8(raw, kt, kbuf + (k % 2) * kStage, vbuf + (k % 2) * kStage);
      __syncthreads();
    } else if constexpr (S == Src::kInt4) {
      if (kt.pool && kt.p0 >= c.row_end) {
        dequant_int4<kBf16>(a, kt, raw, kbuf + (k % 2) * kStage, vbuf + (k % 2) * kStage,
                            kHeads == 1 || copier, kHeads == 1 || !copier);
        __syncthreads();
      }
    }
    if (k + 1 < k_end) issue(k + 1);
    if (!active) continue;
    const bool mask = kt.count < kKv || kt.p0 + kKv - 1 > warp_pos;
    attend_tile<kBf16>(qa, kb, vb, kt, row_pos, mask, st);
    if constexpr (S == Src::kInt4) {
      // v2: the pool's values were in the Hadamard domain; turn their sum back before the
      // sink block and the 16-bit tail add theirs.
      if (a.value_hadamard && k == pool_last) hadamard_rows(st.o);
    }
  }
  if (!active) return;  // (a non-copying warp: nothing in flight)
  cp_async_wait<0>();

  // O / l, the rows of the tile; a split tile's partial sums instead: the row's max (log2
  // units), sum and unnormalized output, for prefill_merge_kernel.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = st.l[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const int row = 16 * warp + gq + 8 * r;
    if (row >= n_rows) continue;
    if (tile.parts > 1) {
      float* p = partials + ((static_cast<int64_t>(tile.slot) * kRows + row) * a.num_heads + head) *
                                kPrefillPartialFloats;
      if (tq == 0) {
        p[0] = st.m[r];
        p[1] = l;
      }
#pragma unroll
      for (int n = 0; n < 16; ++n) {
        p[2 + 8 * n + 2 * tq] = st.o[n][2 * r];
        p[3 + 8 * n + 2 * tq] = st.o[n][2 * r + 1];
      }
      continue;
    }
    const int64_t base =
        (static_cast<int64_t>(tile.q_begin + row) * a.num_heads + head) * kD + 2 * tq;
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      const float x = st.o[n][2 * r] * inv, y = st.o[n][2 * r + 1] * inv;
      if (a.out_dtype == DType::kBF16) {
        reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(a.out) + base + 8 * n)[0] =
            __floats2bfloat162_rn(x, y);
      } else {
        reinterpret_cast<__half2*>(static_cast<__half*>(a.out) + base + 8 * n)[0] =
            __floats2half2_rn(x, y);
      }
    }
  }
}

// launch_int4_pool_rows: grid (listed sequences x max_tiles, KV heads), one pool tile of one KV
// head a block (the sequence's first pool_row_tiles), staged and dequantized as the prefill kernel
// does (issue_int4, dequant_int4 into stage 0), then its rows written out.
template <bool kBf16>
__global__ void __launch_bounds__(kThreads)
    int4_pool_rows_kernel(PagedAttentionArgs a, const int32_t* seqs, int max_tiles) {
  S4KV_DYNAMIC_SHARED(smem);
  uint16_t* kb = reinterpret_cast<uint16_t*>(smem);
  uint16_t* vb = kb + 2 * kStage;  // (the prefill kernel's V stage 0)
  unsigned char* raw = smem + kBufBytes;
  const int seq = seqs[blockIdx.x / max_tiles], k = static_cast<int>(blockIdx.x) % max_tiles;
  Ctx c;
  c.g = static_cast<int>(blockIdx.y);
  c.table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks_per_seq;
  pool_range(a, seq, c);
  const int p0 = c.pa + kKv * k;
  if (k >= a.pool_row_tiles[seq] || p0 >= c.pb) return;
  const KvTile kt{p0, min(kKv, c.pb - p0), true};
  issue_int4(a, c, kt, raw);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  dequant_int4<kBf16>(a, kt, raw, kb, vb, true, true);
  __syncthreads();
  const int64_t kv_dim = static_cast<int64_t>(a.num_kv_heads) * kD;
  const int64_t first = a.pool_row_base[seq] + (p0 - c.pa);
  for (int i = threadIdx.x; i < kt.count * 16; i += kThreads) {
    const int t = i / 16, ch = i % 16;
    const int64_t at = (first + t) * kv_dim + c.g * kD + 8 * ch;
    *reinterpret_cast<uint4*>(a.pool_rows_k + at) =
        *reinterpret_cast<const uint4*>(kb + t * kLd + 8 * ch);
    *reinterpret_cast<uint4*>(a.pool_rows_v + at) =
        *reinterpret_cast<const uint4*>(vb + t * kLd + 8 * ch);
  }
}

// The rows of split tiles: grid (merges x kRows, heads), thread c the output channel c. Each
// row's parts combine as the decode merge's items do: weights 2^(m_j - max m), the sums and the
// outputs added in part order.
__global__ void __launch_bounds__(kD)
    prefill_merge_kernel(PagedAttentionArgs a, const float* partials, const PrefillMerge* merges) {
  const PrefillMerge mg = merges[blockIdx.x / kRows];
  const int row = static_cast<int>(blockIdx.x % kRows);
  if (mg.q_begin + row >= mg.q_end) return;
  const int head = static_cast<int>(blockIdx.y), c = static_cast<int>(threadIdx.x);
  const int64_t slot_floats = int64_t{kRows} * a.num_heads * kPrefillPartialFloats;
  const float* p0 =
      partials + ((static_cast<int64_t>(mg.first_slot) * kRows + row) * a.num_heads + head) *
                     kPrefillPartialFloats;
  float m = -INFINITY;
  for (int j = 0; j < mg.parts; ++j) m = fmaxf(m, p0[j * slot_floats]);
  float l = 0.0f, o = 0.0f;
  if (m != -INFINITY) {
    for (int j = 0; j < mg.parts; ++j) {
      const float* p = p0 + j * slot_floats;
      const float w = exp2f(p[0] - m);  // 0 for a part that saw nothing (-inf)
      l += w * p[1];
      o += w * p[2 + c];
    }
  }
  const float x = l > 0.0f ? o / l : 0.0f;
  const int64_t at = (static_cast<int64_t>(mg.q_begin + row) * a.num_heads + head) * kD + c;
  if (a.out_dtype == DType::kBF16) {
    static_cast<__nv_bfloat16*>(a.out)[at] = __float2bfloat16_rn(x);
  } else {
    static_cast<__half*>(a.out)[at] = __float2half_rn(x);
  }
}

// The kernel for S and kBf16 with its shared memory attribute set (once), for launches and
// occupancy queries.
template <Src S, bool kBf16, int kHeads = 1>
auto configured_kernel() {
  static const bool attribute_set = [] {
    S4KV_CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_kernel<S, kBf16, kHeads>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         smem_bytes<S>()));
    return true;
  }();
  (void)attribute_set;
  return prefill_attention_kernel<S, kBf16, kHeads>;
}

template <Src S, bool kBf16, int kHeads = 1>
void launch(const PagedAttentionArgs& a, const PrefillTile* tiles, int32_t num_tiles,
            float* partials, cudaStream_t stream) {
  const int group = a.num_heads / a.num_kv_heads;
  const auto blocks =
      static_cast<unsigned>(int64_t{num_tiles} * a.num_kv_heads * ((group + kHeads - 1) / kHeads));
  launch_plain(configured_kernel<S, kBf16, kHeads>(), blocks, kThreads * kHeads, smem_bytes<S>(),
               stream, a, tiles, partials);
}

// int4_kivi's thread blocks of two heads (a group of at least two), unless
// S4KV_PREFILL_HEAD_PAIRS=0 (one head a block, as the other formats: for A/B runs).
bool int4_head_pairs() {
  static const bool pairs = env_switch("S4KV_PREFILL_HEAD_PAIRS");
  return pairs;
}

bool in_32_64_128(int x) { return x == 32 || x == 64 || x == 128; }

}  // namespace

void launch_int4_pool_rows(const PagedAttentionArgs& a, const int32_t* seqs_device,
                           int32_t num_seqs, int32_t max_tiles, cudaStream_t stream) {
  if (num_seqs == 0 || max_tiles == 0) return;
  S4KV_CHECK(a.cache == kv::KvCacheDtype::kInt4Kivi &&
                 prefill_kernels_support(a.num_heads, a.num_kv_heads, a) &&
                 a.pool_rows_k != nullptr && a.pool_rows_v != nullptr &&
                 a.pool_row_base != nullptr && a.pool_row_tiles != nullptr &&
                 seqs_device != nullptr && num_seqs > 0 && max_tiles > 0 &&
                 int64_t{num_seqs} * max_tiles <= INT_MAX,
             "int4_kivi pool rows: unsupported arguments (", num_seqs, " sequences, ", max_tiles,
             " tiles)");
  const dim3 grid(static_cast<unsigned>(num_seqs * max_tiles),
                  static_cast<unsigned>(a.num_kv_heads));
  const auto kernel = a.bf16 ? int4_pool_rows_kernel<true> : int4_pool_rows_kernel<false>;
  static const bool attributes_set = [] {
    for (auto* k : {int4_pool_rows_kernel<true>, int4_pool_rows_kernel<false>}) {
      S4KV_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           smem_bytes<Src::kInt4>()));
    }
    return true;
  }();
  (void)attributes_set;
  launch_plain(kernel, grid, kThreads, smem_bytes<Src::kInt4>(), stream, a, seqs_device,
               static_cast<int>(max_tiles));
}

bool prefill_kernels_support(int num_heads, int num_kv_heads, const PagedAttentionArgs& a) {
  if (num_heads <= 0 || num_kv_heads <= 0 || num_heads % num_kv_heads != 0) return false;
  if (a.out_dtype != DType::kBF16 && a.out_dtype != DType::kF16) return false;
  if (a.block_size <= 0) return false;
  switch (a.cache) {
    case kv::KvCacheDtype::k16Bit:
    case kv::KvCacheDtype::kFp8E4M3:
      return true;
    case kv::KvCacheDtype::kInt4Kivi:
      return !a.keys_post_rope && a.layout.head_dim == kD && a.layout.block_size == a.block_size &&
             in_32_64_128(a.block_size) && in_32_64_128(a.layout.value_group_size);
  }
  return false;
}

void launch_prefill_attention(const PagedAttentionArgs& a, const PrefillTile* tiles_device,
                              int32_t num_tiles, cudaStream_t stream,
                              const PrefillSplitLaunch* split) {
  S4KV_CHECK(num_tiles >= 0, "prefill attention: ", num_tiles, " tiles");
  if (num_tiles == 0) return;
  const bool merging = split != nullptr && split->num_merges > 0;
  S4KV_CHECK(!merging || (split->partials != nullptr && split->merges != nullptr),
             "prefill attention: split tiles without partial sums or merges");
  float* partials = merging ? split->partials : nullptr;
  S4KV_CHECK(prefill_kernels_support(a.num_heads, a.num_kv_heads, a),
             "prefill attention: unsupported shape (heads ", a.num_heads, "/", a.num_kv_heads,
             ", block ", a.block_size, ", out ", dtype_name(a.out_dtype), ")");
  S4KV_CHECK(int64_t{num_tiles} * a.num_heads <= INT_MAX, "prefill attention: ", num_tiles,
             " tiles x ", a.num_heads, " heads");
  S4KV_CHECK(tiles_device != nullptr && a.q != nullptr && a.out != nullptr &&
                 a.query_start_loc != nullptr && a.seq_lens != nullptr &&
                 a.block_tables != nullptr && a.q_stride % 2 == 0,
             "prefill attention: null arguments");
  const bool int4 = a.cache == kv::KvCacheDtype::kInt4Kivi;
  if (int4) {
    S4KV_CHECK(
        a.pool && a.residual && a.staging_k && a.staging_v && a.seats && a.pool_ends &&
            a.rope_f16 && reinterpret_cast<uintptr_t>(a.rope_f16) % 16 == 0 && a.ring >= 1 &&
            ring_stride_fits(a.seat_stride, a.block_size, a.ring, int64_t{a.num_kv_heads} * kD),
        "prefill attention: int4_kivi arguments");
  } else {
    S4KV_CHECK(a.k_cache != nullptr && a.v_cache != nullptr, "prefill attention: null cache");
  }
  if (a.cache == kv::KvCacheDtype::kFp8E4M3) {
    launch<Src::kFp8, false>(a, tiles_device, num_tiles, partials, stream);
  } else if (int4) {
    const bool pairs = int4_head_pairs() && a.num_heads / a.num_kv_heads >= 2;
    if (a.bf16) {
      (pairs ? launch<Src::kInt4, true, 2>
             : launch<Src::kInt4, true, 1>)(a, tiles_device, num_tiles, partials, stream);
    } else {
      (pairs ? launch<Src::kInt4, false, 2>
             : launch<Src::kInt4, false, 1>)(a, tiles_device, num_tiles, partials, stream);
    }
  } else if (a.bf16) {
    launch<Src::k16Bit, true>(a, tiles_device, num_tiles, partials, stream);
  } else {
    launch<Src::k16Bit, false>(a, tiles_device, num_tiles, partials, stream);
  }
  S4KV_CUDA_CHECK(cudaGetLastError());
  if (merging) {
    const dim3 grid(static_cast<unsigned>(int64_t{split->num_merges} * kRows),
                    static_cast<unsigned>(a.num_heads));
    launch_plain(prefill_merge_kernel, grid, kD, 0, stream, a,
                 static_cast<const float*>(split->partials), split->merges);
    S4KV_CUDA_CHECK(cudaGetLastError());
  }
}

int prefill_blocks_per_sm(kv::KvCacheDtype cache) {
#ifdef S4KV_CUDA_EMULATION
  (void)cache;
  return 2;
#else
  int n = 0;
  auto query = [&](auto kernel, int smem, int threads = kThreads) {
    S4KV_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem));
  };
  if (cache == kv::KvCacheDtype::kFp8E4M3) {
    query(configured_kernel<Src::kFp8, false>(), smem_bytes<Src::kFp8>());
  } else if (cache == kv::KvCacheDtype::kInt4Kivi && int4_head_pairs()) {
    // In one-head thread blocks (split_prefill counts blocks of one head): a block of two heads
    // counts twice. (A group of one head runs one-head blocks: two a multiprocessor as well.)
    query(configured_kernel<Src::kInt4, true, 2>(), smem_bytes<Src::kInt4>(), 2 * kThreads);
    n *= 2;
  } else if (cache == kv::KvCacheDtype::kInt4Kivi) {
    query(configured_kernel<Src::kInt4, true, 1>(), smem_bytes<Src::kInt4>());
  } else {
    query(configured_kernel<Src::k16Bit, true>(), smem_bytes<Src::k16Bit>());
  }
  return std::max(1, n);
#endif
}

}  // namespace s4kv::backend::cuda
