// int4_kivi decode attention over pool blocks on tensor cores (decode_attention_common.cuh has
// the fragment layout): dequantization fused in registers, pre-RoPE keys rotated in registers,
// the blocks streamed through shared memory.
#include <cuda_fp16.h>

#include <mutex>
#include <span>
#include <vector>

#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_attention_common.cuh"
#include "backend/cuda/decode_timeline.cuh"
#include "backend/cuda/launch.cuh"
#include "common/check.h"
#include "common/half.h"

namespace s4kv::backend::cuda::decode_detail {
namespace {

// ---- int4_kivi pool blocks ----------------------------------------------------------------

// The parts of one int4_kivi block (int4_kivi_layout.cc's layout at head_dim 128) for B tokens
// and kG value groups, as byte offsets the compiler folds into the kernel's addresses;
// launch_decode_int4 checks them against the layout it is given.
template <int B, int kG>
struct Int4Block {
  static constexpr int k_codes = 0;
  static constexpr int k_scale = k_codes + B * kD / 2;
  static constexpr int k_zero = k_scale + 2 * kD;
  static constexpr int v_codes = k_zero + 2 * kD;
  static constexpr int v_scale = v_codes + B * kD / 2;
  static constexpr int v_zero = v_scale + 2 * B * kG;
  static constexpr int bytes = v_zero + 2 * B * kG;
};
// A pool block's rows of 64 bytes (every part is whole rows: the block is B + 8 + B + 4 kG of
// them), copied as one box of two halves (a box dimension holds at most 256).
template <int B, int kG>
constexpr int int4_block_rows() {
  static_assert(Int4Block<B, kG>::bytes % 128 == 0);
  return Int4Block<B, kG>::bytes / 64;
}

// x, kept in a register across the loop: ptxas would otherwise recompute a lane's offsets from
// the thread index at every use (a dozen instructions a block); it does not recompute a shuffle.
__device__ inline int held(int x) { return __shfl_xor_sync(0xffffffffu, x, 0); }
template <typename T>
__device__ inline T* held(T* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  const auto lo = static_cast<uint32_t>(held(static_cast<int>(static_cast<uint32_t>(v))));
  const auto hi = static_cast<uint32_t>(held(static_cast<int>(static_cast<uint32_t>(v >> 32))));
  return reinterpret_cast<T*>((static_cast<uintptr_t>(hi) << 32) | lo);
}

// kWords consecutive words of w at p (aligned to 4 kWords bytes): one shared-memory store.
template <int kWords>
__device__ inline void store_words(uint32_t* p, const uint32_t* w) {
  static_assert(kWords == 1 || kWords == 2 || kWords == 4);
  if constexpr (kWords == 4) {
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  } else if constexpr (kWords == 2) {
    *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
  } else {
    *p = w[0];
  }
}

// kWords consecutive words at p (aligned to 4 kWords bytes) into w: one shared-memory load.
template <int kWords>
__device__ inline void load_words(const uint32_t* p, uint32_t* w) {
  static_assert(kWords == 2 || kWords == 4);
  if constexpr (kWords == 4) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
  } else {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    w[0] = v.x;
    w[1] = v.y;
  }
}

// kG consecutive fp16 values at p (aligned to 2 kG bytes), each in both halves of a pair: one
// shared-memory load.
template <int kG>
__device__ inline void load_halves(const unsigned char* p, __half2 (&out)[kG]) {
  static_assert(kG == 1 || kG == 2 || kG == 4);
  if constexpr (kG == 4) {
    const uint2 w = *reinterpret_cast<const uint2*>(p);
    const __half2 a = *reinterpret_cast<const __half2*>(&w.x);
    const __half2 b = *reinterpret_cast<const __half2*>(&w.y);
    out[0] = __low2half2(a);
    out[1] = __high2half2(a);
    out[2] = __low2half2(b);
    out[3] = __high2half2(b);
  } else if constexpr (kG == 2) {
    const uint32_t w = *reinterpret_cast<const uint32_t*>(p);
    const __half2 a = *reinterpret_cast<const __half2*>(&w);
    out[0] = __low2half2(a);
    out[1] = __high2half2(a);
  } else {
    out[0] = __half2half2(*reinterpret_cast<const __half*>(p));
  }
}
// The same values widened to fp32.
template <int kG>
__device__ inline void load_halves(const unsigned char* p, float (&out)[kG]) {
  static_assert(kG == 1 || kG == 2 || kG == 4);
  if constexpr (kG == 4) {
    const uint2 w = *reinterpret_cast<const uint2*>(p);
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&w.x));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&w.y));
    out[0] = a.x;
    out[1] = a.y;
    out[2] = b.x;
    out[3] = b.y;
  } else if constexpr (kG == 2) {
    const uint32_t w = *reinterpret_cast<const uint32_t*>(p);
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&w));
    out[0] = a.x;
    out[1] = a.y;
  } else {
    out[0] = __half2float(*reinterpret_cast<const __half*>(p));
  }
}
// Thread blocks per multiprocessor the int4 kernel is compiled for (registers a thread <= 65536 /
// (blocks x kWarps x 32)). Measured on the H200 at B 64 (bench/results/cuda_h200/
// attention_notes.md): version 4's kernel ran fastest at 2 (~217 registers; 3 and 4 spilled),
// version 5's at 3 (168 registers, no spills: 8-20 % faster than 2); version 7's at 4 (128
// registers; H100, bench/results/cuda_h100/ab_v7: 3-16 % faster than at 3, 91 % of the copy
// bandwidth at 32/8, B 64 x 32k; H200, cuda_h200/heldregs_h200_143616f: 3 took 1.06x the time).
// Other block sizes keep 2.
// S4KV_INT4_MIN_BLOCKS overrides it for every block size, for a measurement
// (tools/device_attention.sh ab).
template <int kWarps>
constexpr int int4_min_blocks() {
#ifdef S4KV_INT4_MIN_BLOCKS
  return S4KV_INT4_MIN_BLOCKS;
#else
  return kWarps == 4 ? 4 : 2;
#endif
}
// Measurement switches (tools/device_attention.sh build with ATTN_NVCC_FLAGS), their defaults:
// S4KV_INT4_STAGES and S4KV_INT4_TURN_WORDS below.
#ifndef S4KV_INT4_STAGES
#define S4KV_INT4_STAGES 2
#endif
#ifndef S4KV_INT4_TURN_WORDS
#define S4KV_INT4_TURN_WORDS 2
#endif
// Blocks in flight per thread block: this one and one ahead (S4KV_INT4_STAGES=3 builds two
// ahead, ~9 KB more shared memory a thread block at B 64). Two stages took 0.974-0.991x the time of
// three on an H100 with the pool resident in L2, the rate that bounds the H200's launches
// (docs/gpu_int4_decode.md, "Two stages the default", with the files and the other figures).
constexpr int kInt4Stages = S4KV_INT4_STAGES;
static_assert(kInt4Stages == 2 || kInt4Stages == 3);
// The turned queries, one a stage (block k's in buffer k % kInt4Stages, so that a block's
// buffer and stage are the same compile-time index in the loop's unrolled steps): [buffer][word
// m][lane].
constexpr int kTurnBytes = kInt4Stages * 16 * 32 * 4;
// Words of a lane in a turned query's chunk. A warp's store_turn writes kPairs words a lane: into
// 16-byte chunks (4 words), its 8-byte stores at a 16-byte stride took twice their wavefronts
// (lanes l and l + 8 in the same banks: 28 of the ~497 wavefronts of a pool block, H200 ncu of
// 143616f); 8-byte chunks take them conflict-free, and the reads of a lane's 16 words the same
// 16 wavefronts as eight 8-byte loads instead of four 16-byte ones: 0.995x the time resident in L2,
// 0.992x from device memory over the ten target cells on an H100 (bench/results/cuda_h100/
// turn2_stages2_h100_21cbbde). S4KV_INT4_TURN_WORDS=4 builds the 16-byte chunks.
constexpr int kTurnWords = S4KV_INT4_TURN_WORDS;
static_assert(kTurnWords == 2 || kTurnWords == 4);
// A stage's index known at compile time (the unrolled loop's), or at run time (an int).
template <int S>
struct StageIndex {};
template <int S>
__device__ constexpr int stage_index(StageIndex<S>) {
  return S;
}
__device__ inline int stage_index(int s) { return s; }
// The stage after s and the one before it (blocks k + 1's and k - 1's where block k is in s).
__host__ __device__ constexpr int next_stage(int s) { return s == kInt4Stages - 1 ? 0 : s + 1; }
__host__ __device__ constexpr int prev_stage(int s) { return s == 0 ? kInt4Stages - 1 : s - 1; }
// The kernel's shared memory, byte offsets from its 512-byte-aligned start (the copy engine's
// 64-byte swizzle repeats every 512 bytes): the stages (each a pool block, rounded up to 512
// bytes), the turned queries (one a stage), the lanes' rotations, a stage's mbarrier each and
// the rotations' copy's.
template <int kWarps, int kG>
struct Int4Smem {
  static constexpr int stage = (Int4Block<kWarps * 16, kG>::bytes + 511) / 512 * 512;
  static constexpr int turned = kInt4Stages * stage;
  static constexpr int rot = turned + kTurnBytes;
  static constexpr int barriers = rot + kWarps * 2 * 8 * 32 * 8;
  // What a launch asks for: dynamic shared memory starts 16-byte aligned.
  static constexpr int launch_bytes = barriers + 8 * (kInt4Stages + 1) + 512 - 16;
};

// kWarps = B / 16: warp w takes positions 16 w .. 16 w + 15 of every block of the item; kG value
// groups per token (128 / Gv). The item's blocks stream through shared memory, kInt4Stages deep,
// so that the copies of the next blocks overlap this one's arithmetic: on sm_90 one lane has the
// copy engine bring each whole pool block (`pool_map`, int4_pool_map) into its stage, where it
// lands as 64-byte rows whose 16-byte chunks are swizzled by the row (chunk c of row y at
// c ^ (y / 2) % 4: bulk_copy.cuh), so that the lanes' reads below fall in distinct banks; every
// thread waits for it on the stage's mbarrier (below sm_90 every thread copies its share with
// cp.async into the same layout). The MMA rows of a warp's 16 positions are permuted (row r < 8 is
// position row_position(r), r + 8 that + 8) to keep the key reads conflict-free under that swizzle.
// The query turned back by each block's start is computed once per thread block: warp w turns the
// channel pairs 8 w / kWarps .. (and their RoPE partners) for the next block while this one is
// read, into shared memory that every warp reads after the block's barrier.
constexpr int kNoStep = 1 << 30;
__host__ __device__ constexpr int row_position(int r) {
  return (r & 1) | ((r & 2) << 1) | ((r & 4) >> 1);
}
// Where the 64-byte swizzle puts the kG value parameters of position t + 8 against those of t,
// the same for every lane's t (kNoStep where it is not), for the parameters at byte `part`.
template <int kWarps, int kG>
__host__ __device__ constexpr int int4_value_step(int part) {
  int step = kNoStep;
  for (int w = 0; w < kWarps; ++w) {
    for (int r = 0; r < 8; ++r) {
      const int t = 16 * w + row_position(r);
      const int at = bulk_copy_swizzle64(part + 2 * kG * t);
      const int s = bulk_copy_swizzle64(part + 2 * kG * (t + 8)) - at;
      if (step != kNoStep && s != step) return kNoStep;
      step = s;
    }
  }
  return step;
}
template <int kWarps, int kG, bool kFusedMerge, bool kBulk>
__global__ void __launch_bounds__(kWarps * 32, int4_min_blocks<kWarps>())
    decode_int4_kernel(PagedAttentionArgs a, DecodeLaunch d,
                       const __grid_constant__ CUtensorMap pool_map) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  if constexpr (kBulk) {  // the copy engine is sm_90's: the host launches !kBulk below that
    __trap();
    return;
  }
#endif
  constexpr int B = kWarps * 16;
  using Blk = Int4Block<B, kG>;
  using Smem = Int4Smem<kWarps, kG>;
  constexpr int kBlockBytes = Blk::bytes;
  constexpr int kPairs = 8 / kWarps;  // channel pairs m < 8 each warp turns
  static_assert(kInt4Stages * kBlockBytes >= (kWarps * 8 * kD + kWarps * 8 * 7) * 4,
                "the epilogue reuses the stages");
  S4KV_DYNAMIC_SHARED(dsmem);
  const auto raw_shared = static_cast<uint32_t>(__cvta_generic_to_shared(dsmem));
  unsigned char* const smem = dsmem + ((512 - raw_shared % 512) % 512);
  const uint32_t stages_shared = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t full = stages_shared + Smem::barriers;  // stage s's mbarrier at full + 8 s
  S4KV_TIMELINE_BEGIN(kTimelineInt4);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, r = lane / 4, i = lane % 4;
  const int m0 = kPairs * warp;  // the channel pairs this warp turns (below)
  // This lane's key positions in the block (the rows r and r + 8 of its score C fragment); its
  // value positions (the k of its PV fragments) are those of rows 2i, 2i + 1, 2i + 8, 2i + 9.
  const int tk0 = 16 * warp + row_position(r), tk1 = tk0 + 8;
  // The prologue's loads are issued as early as they can be: issued after the first blocks'
  // copies, each load waited behind megabytes of them (the prologue took ~6.7 us at B 16 x 8k
  // where its loads take ~2 us on an idle memory: the decode timeline, decode_timeline.cuh). The
  // RoPE tables' rows of R(B), this warp's pairs (float2 indices: < 2^31 for any served context),
  // first: the tables are written once at start-up, so they are read before the wait for the
  // kernel before.
  float2 p0_cos[kPairs], p0_sin[kPairs], b_cos[kPairs], b_sin[kPairs];
  auto table_rows = [&](int p, float2(&c)[kPairs], float2(&sn)[kPairs]) {
    const int at = p * (kD / 2) / 2 + (16 * i + 2 * m0) / 2;
#pragma unroll
    for (int e = 0; e < kPairs; ++e) {
      c[e] = __ldg(reinterpret_cast<const float2*>(a.rope_cos) + at + e);
      sn[e] = __ldg(reinterpret_cast<const float2*>(a.rope_sin) + at + e);
    }
  };
  table_rows(B, b_cos, b_sin);  // R(B) for the blocks after the first (the backend keeps row B:
                                // cuda_backend.cc)
  allow_dependent_launch();
  grid_dependency_wait();
  // Item blockIdx.y, KV head blockIdx.x: the heads of an item are neighbours in dispatch order,
  // so that in a graph replay (a grid of the capture size's capacity) the live items of every
  // head come before the blocks past the live count, which return at once.
  const int item = static_cast<int>(blockIdx.y);
  if (d.live != nullptr && item >= d.live[0]) return;  // graph replay
  const DecodeItem it = d.items[item];
  const int g = blockIdx.x;
  const int group = a.num_heads / a.num_kv_heads;
  const int n = it.end - it.begin;
  constexpr int kThreads = kWarps * 32;
  // What follows from the item: the block table's entry of the first block this thread copies
  // (kBulk: block k is copied by lane 0 of warp k % kWarps, so that the schedulers share the
  // issuing, which reads the entry of the next block it copies, k + kWarps, then), its query's
  // row, the RoPE rows of its first block's start.
  const int32_t* table =
      held(a.block_tables + static_cast<int64_t>(it.seq) * a.max_blocks_per_seq + it.begin);
  constexpr int kAhead = kBulk ? kWarps : 1;
  const int first = kBulk ? warp : 0;
  uint32_t next_block =
      first < n && (!kBulk || lane == 0) ? static_cast<uint32_t>(__ldg(table + first)) : 0;
  const int token = a.query_start_loc[it.seq];
  table_rows(it.begin * B, p0_cos, p0_sin);

  // Stage k % kInt4Stages <- block it.begin + k (`stage`: the stage's byte offset). kBulk (sm_90):
  // by one lane (below), one copy of the whole block whose bytes the stage's mbarrier expects.
  // Otherwise by every thread, 16-byte cp.async: thread x the chunks x + j kThreads (one source
  // address a block, the rest immediate offsets) to their swizzled places (computed once), a group
  // a block. The next block's entry of the block table is read one block ahead.
  constexpr int kChunks = kBlockBytes / 16;
  constexpr int kChunksPerThread = kBulk ? 1 : (kChunks + kThreads - 1) / kThreads;
  uint32_t chunk_to[kChunksPerThread];
  const unsigned char* pool = nullptr;
  bool last_chunk = false;
  if constexpr (kBulk) {
    if (threadIdx.x == 0) {
#pragma unroll
      for (int s = 0; s <= kInt4Stages; ++s) mbarrier_init(full + 8 * s, 1);  // + the rotations'
      mbarrier_init_fence();
    }
    __syncthreads();
  } else {
#pragma unroll
    for (int j = 0; j < kChunksPerThread; ++j) {
      chunk_to[j] = static_cast<uint32_t>(
          bulk_copy_swizzle64(16 * (static_cast<int>(threadIdx.x) + j * kThreads)));
    }
    last_chunk = static_cast<int>(threadIdx.x) + (kChunksPerThread - 1) * kThreads < kChunks;
    pool = held(reinterpret_cast<const unsigned char*>(a.pool) +
                static_cast<int64_t>(g) * kBlockBytes + 16 * threadIdx.x);
  }
  // A pool block's bytes times the KV heads (< 2^32: kv heads <= 64 x 39 KB), block ids >= 0.
  const uint32_t block_stride = static_cast<uint32_t>(a.num_kv_heads) * kBlockBytes;
  auto issue = [&](int k, int stage) {
    if (k >= n || (kBulk && static_cast<int>(threadIdx.x) != 32 * (k % kWarps))) {
      if constexpr (!kBulk) cp_async_commit();
      return;
    }
    const uint32_t block = next_block;
    if (k + kAhead < n) {
      next_block = static_cast<uint32_t>(__ldg(table + static_cast<uint32_t>(k + kAhead)));
    }
    if constexpr (kBulk) {
      const uint32_t bar = full + 8 * (stage / Smem::stage);
      mbarrier_arrive_expect_tx(bar, kBlockBytes);
      bulk_copy_5d(stages_shared + stage, &pool_map, 0, 0, 0, g, static_cast<int>(block), bar);
    } else {
      const unsigned char* src = pool + static_cast<uint64_t>(block) * block_stride;
      const uint32_t dst = stages_shared + stage;
#pragma unroll
      for (int j = 0; j < kChunksPerThread; ++j) {
        if (j + 1 < kChunksPerThread || last_chunk) {
          cp_async16_shared(dst + chunk_to[j], src + 16 * j * kThreads);
        }
      }
      cp_async_commit();
    }
  };
  // R(t) for the lane's key positions and frequency pairs 8i + m (half2 cos, sin), in shared
  // memory in lane order ([warp][nt][m][lane]) to spare 32 registers (rot_lane below reads them in
  // the loop): the same bytes in every thread block, made once beside the RoPE tables
  // (int4_rotation_image) and copied whole (kBulk: by thread 0 after block 0, completing on the
  // mbarrier after the stages'; else with block 0's cp.async group). Each thread used to read its
  // share from the fp32 tables: 32 KB a thread block from L2 at the launch's start.
  constexpr int kRotBytes = kWarps * 2 * 4 * 32 * 16;
  static_assert(kRotBytes % (16 * kThreads) == 0, "the rotations' cp.async chunks");
  const uint32_t rot_bar = full + 8 * kInt4Stages;
  if constexpr (kBulk) {
    issue(0, 0);
    if (threadIdx.x == 0) {
      mbarrier_arrive_expect_tx(rot_bar, kRotBytes);
      bulk_copy_1d(stages_shared + Smem::rot, a.int4_rotations, kRotBytes, rot_bar);
    }
  } else {
    const auto* image = reinterpret_cast<const unsigned char*>(a.int4_rotations);
#pragma unroll
    for (int j = 0; j < kRotBytes / 16 / kThreads; ++j) {
      const int at = 16 * (static_cast<int>(threadIdx.x) + j * kThreads);
      cp_async16_shared(stages_shared + Smem::rot + at, image + at);
    }
    issue(0, 0);
  }
  if constexpr (kInt4Stages == 3) issue(1, Smem::stage);
  S4KV_TIMELINE_MARK(kMarkIssued);
  // This warp's share of the query (pairs m0 + e and m0 + e + 8 of the lane, fp32, log2 units):
  // {q[m0 + e], q[m0 + e + 8]} (channels {c, c + 1}, {c + 64, c + 65}) as query[e], in
  // registers: held in shared memory ([e][thread]), its read and write back at every block were
  // ~16 of a warp's ~124 shared-memory wavefronts a block, the pipe the loop waits on (H200,
  // bench/results/cuda_h200/heldregs_h200_143616f: 0.98x the time over the target cells, 1.03x
  // at 32/8 B 16 x 8k; 4 thread blocks a multiprocessor still, 8 bytes of the prologue on the
  // stack).
  float4 query[kPairs];
  {
    const float f = a.scale * kLog2e;
    const float* row =
        a.q + static_cast<int64_t>(token) * a.q_stride + (g * group + r) * kD + 16 * i + 2 * m0;
#pragma unroll
    for (int e = 0; e < kPairs; ++e) {
      query[e] = r < group ? make_float4(row[2 * e] * f, row[2 * e + 1] * f, row[64 + 2 * e] * f,
                                         row[64 + 2 * e + 1] * f)
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
  // The query turned back by each block's start p0, R(p0)^T q: the item's first block from the
  // RoPE tables' row p0, every next one by angle addition, R(p0 + B)^T q = R(B)^T (R(p0)^T q),
  // so that the loop reads no table rows (their loads were the loop's longest wait). `query`
  // holds the turned pairs in fp32 from then on.
  // The turned query's buffers hold word m of lane l's B fragments (qa below) at
  // [m / kTurnWords][l][m % kTurnWords], 16 x 32 words each: a warp reads chunk m / kTurnWords of
  // every lane as one load a lane, conflict-free, at immediate offsets. This lane's pairs m0 ..
  // m0 + kPairs - 1 (kPairs consecutive words) at turn_mine, pairs m0 + 8 .. 256 words on.
  uint32_t* turn_mine = reinterpret_cast<uint32_t*>(
      smem + held(Smem::turned +
                  4 * ((m0 / kTurnWords) * 32 * kTurnWords + lane * kTurnWords + m0 % kTurnWords)));
  // `query` turned by the angles of c, sn (this warp's frequency pairs; in place) and, in fp16,
  // this warp's words of block k's turned query, into buffer `buf` (k % kInt4Stages).
  auto store_turn = [&](int k, int buf, const float2(&c)[kPairs], const float2(&sn)[kPairs]) {
    if (k >= n) return;
    uint32_t lo[kPairs], hi[kPairs];
#pragma unroll
    for (int e = 0; e < kPairs; ++e) {
      const float4 qe = query[e];
      const float lo0 = qe.x * c[e].x + qe.z * sn[e].x;
      const float lo1 = qe.y * c[e].y + qe.w * sn[e].y;
      const float hi0 = qe.z * c[e].x - qe.x * sn[e].x;
      const float hi1 = qe.w * c[e].y - qe.y * sn[e].y;
      query[e] = make_float4(lo0, lo1, hi0, hi1);
      lo[e] = pack2<false>(lo0, lo1);
      hi[e] = pack2<false>(hi0, hi1);
    }
    uint32_t* dst = turn_mine + buf * 16 * 32;
    // kPairs words a lane: one store where they are a chunk or less, else one a chunk.
    constexpr int kWords = kPairs < kTurnWords ? kPairs : kTurnWords;
#pragma unroll
    for (int c = 0; c < kPairs / kWords; ++c) {
      store_words<kWords>(dst + c * 32 * kTurnWords, lo + kWords * c);
      store_words<kWords>(dst + c * 32 * kTurnWords + 256, hi + kWords * c);
    }
  };
  store_turn(0, 0, p0_cos, p0_sin);

  WarpSoftmax<kG> st;
  // The value codes by two ldmatrix .x4 .trans a block: matrix j of load c holds 16-byte chunk
  // (32 channels) g = 2c + j / 2 of the positions of rows 8 (j % 2) + 0..7, each row at its
  // swizzled place (the value codes start at a row that is a multiple of 8: the same swizzle);
  // lane l gives row l % 8 of matrix l / 8.
  static_assert(Blk::v_codes % 512 == 0 && Blk::k_scale % 512 == 0);
  uint32_t v_lane[2];
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const int j = lane / 8, t = 16 * warp + 8 * (j % 2) + row_position(lane % 8), g = 2 * c + j / 2;
    v_lane[c] = static_cast<uint32_t>(held(Blk::v_codes + bulk_copy_swizzle64(64 * t + 16 * g)));
  }

  // The lane's byte offsets in a stage, the same for every block, swizzled: its key code words at
  // tk0 (words 2i, 2i + 1 of chunk i / 2 and 2i + 8, 2i + 9 of chunk 2 + i / 2, each chunk at
  // c ^ (tk0 / 2) % 4: the eight rows of a half warp's load take the four chunks of both row
  // parities, conflict-free; tk1 is 8 positions, 512 bytes on, the same swizzle), its key scales
  // (chunks 2i, 2i + 1 of rows that keep their chunks, 8 + 2i, 9 + 2i where the swizzle swaps a
  // chunk pair: 8 + (jj ^ 1)), its key zeros (chunks 16 + 2i, ... : the swizzle swaps the lane
  // pairs, 2 (i ^ 1), then as the scales), its value scales and zeros at tk0 and tk1 (kG of each).
  static_assert(Blk::k_zero == Blk::k_scale + 256);
  const int k_code_lo = held(bulk_copy_swizzle64(Blk::k_codes + 64 * tk0 + 8 * i));
  const int k_code_hi = held(bulk_copy_swizzle64(Blk::k_codes + 64 * tk0 + 32 + 8 * i));
  const int k_param = held(Blk::k_scale + 32 * i);
  const int kz_param = held(Blk::k_zero + 32 * (i ^ 1));
  // The lane's rotations, its offset held (ptxas recomputed it from the thread index at every
  // block).
  const uint4* rot_lane =
      reinterpret_cast<const uint4*>(smem + Smem::rot + held((warp * 2 * 4 * 32 + lane) * 16));
  const int v_scale0 = held(bulk_copy_swizzle64(Blk::v_scale + 2 * kG * tk0));
  const int v_zero0 = held(bulk_copy_swizzle64(Blk::v_zero + 2 * kG * tk0));
  // tk1's: the same distance from tk0's for every lane (int4_value_step) or held too.
  constexpr int kScaleStep = int4_value_step<kWarps, kG>(Blk::v_scale);
  constexpr int kZeroStep = int4_value_step<kWarps, kG>(Blk::v_zero);
  const int v_scale1 = kScaleStep != kNoStep
                           ? v_scale0 + kScaleStep
                           : held(bulk_copy_swizzle64(Blk::v_scale + 2 * kG * tk1));
  const int v_zero1 = kZeroStep != kNoStep ? v_zero0 + kZeroStep
                                           : held(bulk_copy_swizzle64(Blk::v_zero + 2 * kG * tk1));
  // The lane's turned-query chunks: chunk j of buffer 0 at turn_lane + 32 j kTurnWords words
  // (buffer b 16 x 32 b words on).
  const uint32_t* turn_lane =
      reinterpret_cast<const uint32_t*>(smem + held(Smem::turned + 4 * kTurnWords * lane));

  uint32_t parity = 0;  // the parity of the blocks' phases in their stages: (k / kInt4Stages) % 2
  if constexpr (kBulk) mbarrier_wait(rot_bar, 0);  // the rotations have landed
  S4KV_TIMELINE_MARK(kMarkLoop);
  // Block k in stage S = k % kInt4Stages (its byte offset rd, its mbarrier, its turned query's
  // buffer S). `stage` is S as a StageIndex where the loop below takes the stages in
  // turn (every shared-memory address of a step is then a held lane offset plus a constant), or
  // as an int.
  auto block_step = [&](int k, auto stage) {
    const int S = stage_index(stage);
    const int rd = S * Smem::stage;
    const unsigned char* base = smem + rd;
    // Block k has landed (block k + 1 may be in flight). kBulk: its whole copy, for this thread
    // too (the stage's mbarrier), so the key code words are read before the barrier, their
    // latency under the barrier's wait.
    uint2 w01[2], w23[2];  // key code words 2i, 2i + 1 and 2i + 8, 2i + 9 at tk0, tk1
    auto load_codes = [&] {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        w01[nt] = *reinterpret_cast<const uint2*>(base + k_code_lo + 8 * 64 * nt);
        w23[nt] = *reinterpret_cast<const uint2*>(base + k_code_hi + 8 * 64 * nt);
      }
    };
    if constexpr (kBulk) {
      mbarrier_wait(full + 8 * S, parity);
      load_codes();
    } else {
      cp_async_wait<kInt4Stages - 2>();
    }
    __syncthreads();  // for every warp: block k's turned query is stored, block k - 1 is read
    if constexpr (!kBulk) load_codes();  // (every thread's chunks have landed)
    S4KV_TIMELINE_MARK_IF(k == 0, kMarkFirst);
    issue(k + kInt4Stages - 1, prev_stage(S) * Smem::stage);  // k - 1's stage
    // Scores of positions tk0 and tk1 (C fragment rows) for heads 2i, 2i + 1 (columns) from
    // their keys (A fragment) and the turned query (B fragment, qa), in two halves: jj takes
    // the lane's channel pairs 4 jj .. 4 jj + 3 (code word jj: w01) and their RoPE partners 8 +
    // 4 jj .. (word 2 + jj: w23), so that a half's scales, rotations and keys are used up before
    // the next half's are read. The eight k-tiles sum in one chain of MMAs: each waits on the one
    // before, whose latency the next k-tile's dequantization covers (two chains cost four FADD
    // a block to add up).
    const uint32_t* turn_src = turn_lane + S * 16 * 32;
    const auto* kscale = reinterpret_cast<const uint4*>(base + k_param);
    const auto* kzero = reinterpret_cast<const uint4*>(base + kz_param);
    float s[4] = {};  // the scores, then the probabilities (st.update)
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      const uint4 ks[2] = {kscale[jj], kscale[8 + (jj ^ 1)]};
      const uint4 kz[2] = {kzero[jj], kzero[8 + (jj ^ 1)]};
      // The keys at tk0, tk1 (nt): kb[nt][e] pair 4 jj + e, kb[nt][4 + e] its partner 8 + 4 jj + e.
      uint32_t kb[2][8];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t wd =
              h == 0 ? (jj == 0 ? w01[nt].x : w01[nt].y) : (jj == 0 ? w23[nt].x : w23[nt].y);
          const uint32_t w8 = wd >> 8;
          const uint32_t kss[4] = {ks[h].x, ks[h].y, ks[h].z, ks[h].w};
          const uint32_t kzz[4] = {kz[h].x, kz[h].y, kz[h].z, kz[h].w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const uint32_t x = e < 2 ? wd : w8;
            const uint32_t codes = e % 2 == 0 ? codes_to_f16x2(x) : codes_hi_to_f16x2(x);
            const __half2 v = __hfma2(*reinterpret_cast<const __half2*>(&codes),
                                      *reinterpret_cast<const __half2*>(&kss[e]),
                                      *reinterpret_cast<const __half2*>(&kzz[e]));
            kb[nt][4 * h + e] = *reinterpret_cast<const uint32_t*>(&v);
          }
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {  // R(t) on pair m = 4 jj + e and its partner m + 8
          const uint4 cs4 = rot_lane[(nt * 4 + 2 * jj + e / 2) * 32];
          const uint32_t cw = e % 2 == 0 ? cs4.x : cs4.z, sw2 = e % 2 == 0 ? cs4.y : cs4.w;
          const __half2 c2 = *reinterpret_cast<const __half2*>(&cw);
          const __half2 s2 = *reinterpret_cast<const __half2*>(&sw2);
          const __half2 lo = *reinterpret_cast<const __half2*>(&kb[nt][e]);
          const __half2 hi = *reinterpret_cast<const __half2*>(&kb[nt][4 + e]);
          const __half2 nlo = __hfma2(lo, c2, __hneg2(__hmul2(hi, s2)));
          const __half2 nhi = __hfma2(hi, c2, __hmul2(lo, s2));
          kb[nt][e] = *reinterpret_cast<const uint32_t*>(&nlo);
          kb[nt][4 + e] = *reinterpret_cast<const uint32_t*>(&nhi);
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // k-tiles 2 jj, 2 jj + 1 (h = 0) or 4 + 2 jj, 5 + 2 jj
        uint32_t qa[4];              // qa words 4 (2 h + jj) .. of those k-tiles
#pragma unroll
        for (int c = 0; c < 4 / kTurnWords; ++c) {
          const int m = 4 * (2 * h + jj) + kTurnWords * c;
          load_words<kTurnWords>(turn_src + (m / kTurnWords) * 32 * kTurnWords,
                                 qa + kTurnWords * c);
        }
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const uint32_t ka[4] = {kb[0][4 * h + 2 * u], kb[1][4 * h + 2 * u],
                                  kb[0][4 * h + 2 * u + 1], kb[1][4 * h + 2 * u + 1]};
          mma_m16n8k16<false>(s, ka, qa[2 * u], qa[2 * u + 1]);
        }
      }
    }
    st.update(s);
    // Read by every warp after the next block's barrier.
    store_turn(k + 1, next_stage(S), b_cos, b_sin);

    // Values: probabilities times the value scales (per value group), transposed into the B
    // fragment (positions tv.. of head r), the zeros' share, codes as the A fragment taken as
    // fp16 subnormals: a nibble in bits 0..3 of a half is c 2^-24, one in bits 4..7 is
    // 16 c 2^-24, both exact (no conversion; the epilogue scales those rows by 2^24 and 2^20).
    // ldmatrix .trans hands lane (r, i) unit r (nibbles 0..3) of group g at positions tv, tv + 1
    // (x[g][0]) and tv + 8, tv + 9 (x[g][1]): m-tile 2g takes nibbles 0 and 1 (rows r, r + 8),
    // m-tile 2g + 1 nibbles 2 and 3 (int4_channel()).
    __half2 vs[2][kG];  // the value scales at tk0, tk1, each in both halves
    float vz[2][kG];    // the value zeros
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      load_halves<kG>(base + (nt == 0 ? v_scale0 : v_scale1), vs[nt]);
      load_halves<kG>(base + (nt == 0 ? v_zero0 : v_zero1), vz[nt]);
    }
    // The probabilities as fp16 pairs: [r][2i, 2i + 1] and [r + 8][2i, 2i + 1].
    const __half2 p01 = __floats2half2_rn(s[0], s[1]), p23 = __floats2half2_rn(s[2], s[3]);
    const uint32_t stage_shared = stages_shared + rd;
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
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          st.z[vg][e] = fmaf(s[e + 2], vz[1][vg], fmaf(s[e], vz[0][vg], st.z[vg][e]));
        }
        // [position r][heads 2i, 2i + 1] -> [head r][positions 2i, 2i + 1], and the same + 8.
        const __half2 pv01 = __hmul2(p01, vs[0][vg]), pv23 = __hmul2(p23, vs[1][vg]);
        b0 = transpose8x8_b16(*reinterpret_cast<const uint32_t*>(&pv01));
        b1 = transpose8x8_b16(*reinterpret_cast<const uint32_t*>(&pv23));
      }
      const uint32_t lo = x[g32][0], hi = x[g32][1], lo2 = lo >> 8, hi2 = hi >> 8;
      const uint32_t av0[4] = {lo & 0x000f000fu, lo & 0x00f000f0u, hi & 0x000f000fu,
                               hi & 0x00f000f0u};
      mma_m16n8k16<false>(st.acc[2 * g32], av0, b0, b1);
      const uint32_t av1[4] = {lo2 & 0x000f000fu, lo2 & 0x00f000f0u, hi2 & 0x000f000fu,
                               hi2 & 0x00f000f0u};
      mma_m16n8k16<false>(st.acc[2 * g32 + 1], av1, b0, b1);
    }
  };
  // Long items take the stages in turn: the unrolled steps' addresses and barriers are constants
  // and the stage's rotation is gone (1,304 instructions for three blocks against 464 a block in
  // the compact loop); short ones the compact loop (the unrolled loop's 21 KB of code made items of
  // four blocks ~8 % slower on an H100).
  if (n >= kInt4UnrolledBlocks) {
    for (int k = 0; k < n; k += kInt4Stages) {
      block_step(k, StageIndex<0>{});
      if (k + 1 < n) block_step(k + 1, StageIndex<1>{});
      if constexpr (kInt4Stages == 3) {
        if (k + 2 < n) block_step(k + 2, StageIndex<2>{});
      }
      parity ^= 1;
    }
  } else {
    int s = 0;
    for (int k = 0; k < n; ++k) {
      block_step(k, s);
      s = next_stage(s);
      if (s == 0) parity ^= 1;
    }
  }
  S4KV_TIMELINE_MARK(kMarkLoopEnd);
  if constexpr (!kBulk) cp_async_wait<0>();  // (empty groups)
  __syncthreads();  // the stages' memory becomes the epilogue's (every copy issued has landed)
#pragma unroll
  for (int mt = 0; mt < 8; ++mt) {
#pragma unroll
    for (int j = 0; j < 4; ++j) st.acc[mt][j] *= j < 2 ? 16777216.0f : 1048576.0f;  // exact
  }
  write_partial<kWarps, ChannelMap::kInt4>(
      st, reinterpret_cast<float*>(smem),
      d.partials + (static_cast<int64_t>(item) * a.num_kv_heads + g) * group * kDecodePartialFloats,
      group, kD / kG);
  if constexpr (kFusedMerge) merge_if_last<kThreads>(a, d, it.merge, g, smem);
  S4KV_TIMELINE_MARK(kMarkExit);
}

// The kernel for kWarps, kG and the merge with its attributes set (once): its shared memory
// bytes.
template <int kWarps, int kG, bool kFusedMerge, bool kBulk>
int configured_int4_kernel() {
  constexpr int kSmem = Int4Smem<kWarps, kG>::launch_bytes;
  static const bool attribute_set = [] {
    S4KV_CUDA_CHECK(cudaFuncSetAttribute(decode_int4_kernel<kWarps, kG, kFusedMerge, kBulk>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    // All the multiprocessor's on-chip memory as shared memory: int4_min_blocks() thread blocks
    // of ~47 KB each must fit (the driver's own choice left room for two).
    S4KV_CUDA_CHECK(cudaFuncSetAttribute(decode_int4_kernel<kWarps, kG, kFusedMerge, kBulk>,
                                         cudaFuncAttributePreferredSharedMemoryCarveout,
                                         cudaSharedmemCarveoutMaxShared));
    return true;
  }();
  (void)attribute_set;
  return kSmem;
}

// The copy engine's map of a layer's pool, [num_pool_blocks][num_kv_heads][2][rows / 2][64
// bytes] (a box dimension holds at most 256 rows: a block is copied as one box of both halves),
// made once per pool and shape (the driver's encoder takes microseconds; a launch only copies the
// 128 bytes into its parameters).
CUtensorMap int4_pool_map(const PagedAttentionArgs& a, int rows) {
  struct Entry {
    const void* pool;
    int64_t blocks;
    int kv_heads, rows;
    CUtensorMap map;
  };
  static std::mutex mu;
  static std::vector<Entry> made;
  S4KV_CHECK(a.num_pool_blocks > 0 && a.num_pool_blocks < (int64_t{1} << 31),
             "decode attention: ", a.num_pool_blocks, " int4_kivi pool blocks");
  const std::lock_guard<std::mutex> lock(mu);
  for (const Entry& e : made) {
    if (e.pool == a.pool && e.blocks == a.num_pool_blocks && e.kv_heads == a.num_kv_heads &&
        e.rows == rows) {
      return e.map;
    }
  }
  if (made.size() >= 1024) made.clear();  // pools come and go (tests): keep the cache bounded
  const uint64_t block_bytes = 64 * static_cast<uint64_t>(rows);
  const uint64_t dims[5] = {64, static_cast<uint64_t>(rows / 2), 2,
                            static_cast<uint64_t>(a.num_kv_heads),
                            static_cast<uint64_t>(a.num_pool_blocks)};
  const uint64_t strides[4] = {64, block_bytes / 2, block_bytes,
                               block_bytes * static_cast<uint64_t>(a.num_kv_heads)};
  const uint32_t box[5] = {64, static_cast<uint32_t>(rows / 2), 2, 1, 1};
  Entry e{a.pool, a.num_pool_blocks, a.num_kv_heads, rows, {}};
  encode_byte_tensor_map(&e.map, a.pool, 5, dims, strides, box);
  made.push_back(e);
  return e.map;
}

// Thread blocks of the kernel a multiprocessor holds.
template <int kWarps, int kG, bool kBulk>
int int4_occupancy() {
  const int smem = configured_int4_kernel<kWarps, kG, false, kBulk>();
  int r = 0;
  S4KV_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &r, decode_int4_kernel<kWarps, kG, false, kBulk>, kWarps * 32, smem));
  return r;
}

// The bulk copies where the device has the engine (bulk_copy_enabled) and the kernels run as
// sm_90 code: a build without sm_90 machine code runs on an sm_90 card from older PTX, where the
// bulk kernels trap (read once).
bool int4_bulk() {
  static const bool on = [] {
    if (!bulk_copy_enabled()) return false;
    cudaFuncAttributes attr{};
    S4KV_CUDA_CHECK(cudaFuncGetAttributes(&attr, decode_int4_kernel<4, 1, false, true>));
    return attr.ptxVersion >= 90;
  }();
  return on;
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
  S4KV_CHECK(a.int4_rotations != nullptr && reinterpret_cast<uintptr_t>(a.int4_rotations) % 16 == 0,
             "decode attention: int4_kivi needs the rotations of int4_rotation_image, 16-byte "
             "aligned");
  with_int4_kernel(a.block_size, a.layout.num_value_groups(), [&]<int kWarps, int kG>() {
    using Blk = Int4Block<kWarps * 16, kG>;
    const kv::Int4KiviLayout& L = a.layout;
    auto at = [](int offset) { return static_cast<size_t>(offset); };
    S4KV_CHECK(L.head_dim == kD && L.k_codes_offset == at(Blk::k_codes) &&
                   L.k_scale_offset == at(Blk::k_scale) && L.k_zero_offset == at(Blk::k_zero) &&
                   L.v_codes_offset == at(Blk::v_codes) && L.v_scale_offset == at(Blk::v_scale) &&
                   L.v_zero_offset == at(Blk::v_zero) && L.block_bytes == at(Blk::bytes),
               "decode attention: int4_kivi block of ", L.block_bytes, " bytes, head_dim ",
               L.head_dim, ", not the kernel's layout");
    S4KV_CHECK(d.num_int4_items <= 65535, "decode attention: ", d.num_int4_items, " int4 items");
    // (cp.async takes no map: a zero one is passed)
    const CUtensorMap map =
        int4_bulk() ? int4_pool_map(a, int4_block_rows<kWarps * 16, kG>()) : CUtensorMap{};
    const dim3 grid(static_cast<unsigned>(a.num_kv_heads), static_cast<unsigned>(d.num_int4_items));
    auto run = [&]<bool kFusedMerge, bool kBulk>() {
      const int smem = configured_int4_kernel<kWarps, kG, kFusedMerge, kBulk>();
      launch_dependent(decode_int4_kernel<kWarps, kG, kFusedMerge, kBulk>, grid, kWarps * 32, smem,
                       stream, a, d, map);
    };
    const bool fused = d.merge_counts != nullptr;
    if (int4_bulk()) {
      fused ? run.template operator()<true, true>() : run.template operator()<false, true>();
    } else {
      fused ? run.template operator()<true, false>() : run.template operator()<false, false>();
    }
  });
}

int int4_blocks_per_sm(int block_size, int value_groups) {
  int blocks = 0;
  with_int4_kernel(block_size, value_groups, [&]<int kWarps, int kG>() {
    static const int n =
        int4_bulk() ? int4_occupancy<kWarps, kG, true>() : int4_occupancy<kWarps, kG, false>();
    blocks = n;
  });
  return blocks;
}

}  // namespace s4kv::backend::cuda::decode_detail

namespace s4kv::backend::cuda {

bool decode_int4_bulk_copies() { return decode_detail::int4_bulk(); }

std::vector<uint32_t> int4_rotation_image(std::span<const float> cos, std::span<const float> sin,
                                          int block_size) {
  S4KV_CHECK(block_size % 16 == 0 && block_size > 0, "int4_kivi rotations: block size ",
             block_size);
  const auto rows = static_cast<size_t>(block_size) * (decode_detail::kD / 2);
  S4KV_CHECK(cos.size() >= rows && sin.size() >= rows,
             "int4_kivi rotations: the RoPE tables have fewer than ", block_size, " rows");
  const int warps = block_size / 16;
  std::vector<uint32_t> out(static_cast<size_t>(warps) * 2 * 4 * 32 * 4);
  auto pack = [](float lo, float hi) {
    return uint32_t{float_to_fp16(lo)} | (uint32_t{float_to_fp16(hi)} << 16);
  };
  for (int w = 0; w < warps; ++w) {
    for (int lane = 0; lane < 32; ++lane) {
      for (int nt = 0; nt < 2; ++nt) {
        const int t = 16 * w + decode_detail::row_position(lane / 4) + 8 * nt;
        for (int m = 0; m < 4; ++m) {  // the kernel's rot_lane[(nt * 4 + m) * 32]
          const size_t row =
              static_cast<size_t>(t) * (decode_detail::kD / 2) + 16 * (lane % 4) + 4 * m;
          uint32_t* word = out.data() + ((w * 2 * 4 * 32 + lane) + (nt * 4 + m) * 32) * 4;
          word[0] = pack(cos[row], cos[row + 1]);
          word[1] = pack(sin[row], sin[row + 1]);
          word[2] = pack(cos[row + 2], cos[row + 3]);
          word[3] = pack(sin[row + 2], sin[row + 3]);
        }
      }
    }
  }
  return out;
}

#if defined(S4KV_DECODE_TIMELINE)
void attach_decode_timeline_int4(const Timeline& t) { attach_timeline_here(t); }
#endif

}  // namespace s4kv::backend::cuda
