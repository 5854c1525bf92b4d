// The attention kernels run on the CPU through backend/cuda/emulation.h, on every machine (no
// GPU needed), each against fp64 attention computed here from the same bytes:
//   - the int4_kivi decode kernel (decode_int4.cu) on random pool blocks, items of 1..5 blocks:
//     each item's partial (max, sum, the value sums of every head of the group), every block
//     size (2, 4, 8 warps) and value group size it is compiled for;
//   - hadamard128 bit for bit against kv::hadamard_ref;
//   - the whole decode path (plan_attention, launch_decode_attention: int4 and row kernels,
//     merge) for 16-bit, fp8 and int4_kivi caches (v1; v2 with sink, window, Hadamard values),
//     plain and as a CUDA graph replays it (capacity grids, live counts: the same bits), and
//     with the merge fused into the item kernels (DecodeLaunch::merge_counts);
//   - prefill attention (plan_prefill, launch_prefill_attention) over the same caches, causal,
//     rows no tile covers left unwritten.
// What it checks: indexing, fragment bookkeeping, where each position is read from (an error
// there is O(1); a key position shifted by one or a mask off by one fails by 3e-2 to 2.8).
// What it cannot: timing, the GPU's exact rounding (fp16 / bf16 MMA inputs here too, fp32
// accumulation in another order), races that a barrier hides here. backend_cuda_test runs the
// same kernels on a GPU against the CPU reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "backend/cpu/rope.h"
#include "backend/cuda/decode_attention.cuh"
#include "backend/cuda/decode_attention_common.cuh"
#include "backend/cuda/hadamard.cuh"
#include "backend/cuda/int4_kivi_device.cuh"
#include "backend/cuda/prefill_attention.cuh"
#include "backend/forward_batch_builder.h"
#include "backend/rope_table.h"
#include "common/half.h"
#include "kv/hadamard.h"
#include "kv/int4_kivi_layout.h"

namespace s4kv::backend::cuda {
namespace {

constexpr int kHeadDim = 128;

struct Shape {
  int block_size, value_group_size, heads, kv_heads;
};

// A random int4_kivi pool of num_blocks blocks (a block a KV head): random codes, key and value
// scales and zeros of the magnitudes the quantizer makes.
std::vector<std::byte> random_pool(const kv::Int4KiviLayout& layout, size_t num_blocks,
                                   std::mt19937& rng) {
  auto uniform = [&](float lo, float hi) {
    return std::uniform_real_distribution<float>(lo, hi)(rng);
  };
  std::vector<std::byte> pool(num_blocks * layout.block_bytes);
  for (std::byte& x : pool) x = static_cast<std::byte>(rng() & 0xffu);
  for (size_t blk = 0; blk < num_blocks; ++blk) {
    std::byte* base = pool.data() + blk * layout.block_bytes;
    auto put = [&](size_t off, int index, float x) {
      const uint16_t h = float_to_fp16(x);
      std::memcpy(base + off + 2 * static_cast<size_t>(index), &h, 2);
    };
    for (int c = 0; c < kHeadDim; ++c) {
      put(layout.k_scale_offset, c, uniform(0.02f, 0.3f));
      put(layout.k_zero_offset, c, uniform(-1.5f, 1.5f));
    }
    for (int t = 0; t < layout.block_size * layout.num_value_groups(); ++t) {
      put(layout.v_scale_offset, t, uniform(0.02f, 0.2f));
      put(layout.v_zero_offset, t, uniform(-1.0f, 1.0f));
    }
  }
  return pool;
}

using Row = std::array<double, kHeadDim>;

// Position t of an int4_kivi pool block (base: one KV head's block bytes), in fp64: its key
// dequantized and rotated by position p's RoPE row, its value dequantized (and rotated back
// from the Hadamard domain, in fp32 as the format defines it, when hadamard).
void pool_position(const std::byte* base, const kv::Int4KiviLayout& layout, int t, int64_t p,
                   const RopeTable& rope, bool hadamard, Row& k, Row& v) {
  const std::span<const std::byte> kc(base + layout.k_codes_offset, layout.codes_bytes);
  const std::span<const std::byte> vc(base + layout.v_codes_offset, layout.codes_bytes);
  auto at16 = [&](size_t off, int index) {
    uint16_t x;
    std::memcpy(&x, base + off + 2 * static_cast<size_t>(index), 2);
    return fp16_to_float(x);
  };
  Row pre;
  for (int c = 0; c < kHeadDim; ++c) {
    pre[c] = kv::read_int4_code(kc, kHeadDim, t, c) * at16(layout.k_scale_offset, c) +
             at16(layout.k_zero_offset, c);
  }
  const float* cs = rope.cos(p);
  const float* sn = rope.sin(p);
  for (int c = 0; c < kHeadDim / 2; ++c) {
    k[c] = pre[c] * cs[c] - pre[c + 64] * sn[c];
    k[c + 64] = pre[c + 64] * cs[c] + pre[c] * sn[c];
  }
  for (int c = 0; c < kHeadDim; ++c) {
    const int vg = t * layout.num_value_groups() + c / layout.value_group_size;
    v[c] = kv::read_int4_code(vc, kHeadDim, t, c) * at16(layout.v_scale_offset, vg) +
           at16(layout.v_zero_offset, vg);
  }
  if (hadamard) {
    std::vector<float> vv(v.begin(), v.end());
    kv::hadamard_ref(vv);
    std::copy(vv.begin(), vv.end(), v.begin());
  }
}

// One case: returns the largest relative L2 error of an item's normalized output and the largest
// error of its log2 sum (max + log2(sum)), over items x KV heads x query heads.
void run_case(const Shape& s, uint32_t seed, double& worst_out, double& worst_lse) {
  const int B = s.block_size, group = s.heads / s.kv_heads;
  const kv::Int4KiviLayout layout = *kv::Int4KiviLayout::create(B, kHeadDim, s.value_group_size);
  std::mt19937 rng(seed);

  // Three sequences, of 3..9 blocks but the first, whose first item is all of its
  // kInt4UnrolledBlocks .. + 4 blocks (the kernel's unrolled loop, the others its compact loop);
  // their blocks scattered over the pool.
  const std::vector<int> blocks = {decode_detail::kInt4UnrolledBlocks + static_cast<int>(rng() % 5),
                                   3 + static_cast<int>(rng() % 7),
                                   3 + static_cast<int>(rng() % 7)};
  const int num_seqs = static_cast<int>(blocks.size());
  const int max_blocks = *std::max_element(blocks.begin(), blocks.end());
  int total = 0;
  for (const int n : blocks) total += n;
  const int num_pool = total + 2;
  std::vector<int32_t> ids(static_cast<size_t>(num_pool));
  for (int k = 0; k < num_pool; ++k) ids[static_cast<size_t>(k)] = k;
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> table(static_cast<size_t>(num_seqs * max_blocks), 0);
  for (int q = 0, next = 0; q < num_seqs; ++q) {
    for (int k = 0; k < blocks[static_cast<size_t>(q)]; ++k) {
      table[static_cast<size_t>(q * max_blocks + k)] = ids[static_cast<size_t>(next++)];
    }
  }

  const size_t bb = layout.block_bytes;
  const std::vector<std::byte> pool =
      random_pool(layout, static_cast<size_t>(num_pool * s.kv_heads), rng);

  RopeTable rope(cpu::rope_inv_freq(kHeadDim, 1e6, model::RopeScaling{}));
  rope.ensure(static_cast<int64_t>(max_blocks) * B);

  const int q_stride = s.heads * kHeadDim;
  std::vector<float> q(static_cast<size_t>(num_seqs * q_stride));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : q) x = normal(rng);
  std::vector<int32_t> query_start(static_cast<size_t>(num_seqs + 1));
  for (int k = 0; k <= num_seqs; ++k) query_start[static_cast<size_t>(k)] = k;

  std::vector<DecodeItem> items;
  for (int q2 = 0; q2 < num_seqs; ++q2) {
    for (int b0 = 0; b0 < blocks[static_cast<size_t>(q2)];) {
      const int len =
          q2 == 0 ? blocks[0]
                  : std::min(1 + static_cast<int>(rng() % 5), blocks[static_cast<size_t>(q2)] - b0);
      items.push_back({q2, b0, b0 + len});
      b0 += len;
    }
  }

  PagedAttentionArgs a;
  a.q = q.data();
  a.q_stride = q_stride;
  a.num_tokens = num_seqs;
  a.num_heads = s.heads;
  a.num_kv_heads = s.kv_heads;
  a.block_size = B;
  a.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  a.query_start_loc = query_start.data();
  a.block_tables = table.data();
  a.max_blocks_per_seq = max_blocks;
  a.cache = kv::KvCacheDtype::kInt4Kivi;
  a.pool = pool.data();
  a.layout = layout;
  a.num_pool_blocks = num_pool;
  a.rope_cos = rope.cos_table().data();
  a.rope_sin = rope.sin_table().data();
  const std::vector<uint32_t> rotations =
      int4_rotation_image(rope.cos_table(), rope.sin_table(), B);
  a.int4_rotations = rotations.data();
  std::vector<float> partials(
      items.size() * static_cast<size_t>(s.kv_heads * group) * kDecodePartialFloats, std::nanf(""));
  DecodeLaunch d;
  d.items = items.data();
  d.num_items = static_cast<int32_t>(items.size());
  d.num_int4_items = d.num_items;
  d.partials = partials.data();
  decode_detail::launch_decode_int4(a, d, nullptr);

  const double f = static_cast<double>(a.scale) * 1.4426950408889634;
  for (size_t it = 0; it < items.size(); ++it) {
    const DecodeItem& item = items[it];
    for (int g = 0; g < s.kv_heads; ++g) {
      for (int h = 0; h < group; ++h) {
        const float* qh = q.data() + item.seq * q_stride + (g * group + h) * kHeadDim;
        std::vector<double> scores, out(kHeadDim, 0.0);
        std::vector<Row> values;
        for (int blk = item.begin; blk < item.end; ++blk) {
          const int id = table[static_cast<size_t>(item.seq * max_blocks + blk)];
          const std::byte* base = pool.data() + (static_cast<size_t>(id * s.kv_heads + g)) * bb;
          for (int t = 0; t < B; ++t) {
            Row k, v;
            pool_position(base, layout, t, static_cast<int64_t>(blk) * B + t, rope, false, k, v);
            double dot = 0.0;
            for (int c = 0; c < kHeadDim; ++c) dot += qh[c] * k[c];
            scores.push_back(dot * f);
            values.push_back(v);
          }
        }
        const double m = *std::max_element(scores.begin(), scores.end());
        double l = 0.0;
        for (size_t t = 0; t < scores.size(); ++t) {
          const double w = std::exp2(scores[t] - m);
          l += w;
          for (int c = 0; c < kHeadDim; ++c) out[static_cast<size_t>(c)] += w * values[t][c];
        }
        const float* got =
            partials.data() +
            ((it * static_cast<size_t>(s.kv_heads) + static_cast<size_t>(g)) * group +
             static_cast<size_t>(h)) *
                kDecodePartialFloats;
        double err = 0.0, norm = 0.0;
        for (int c = 0; c < kHeadDim; ++c) {
          const double want = out[static_cast<size_t>(c)] / l, have = got[2 + c] / got[1];
          err += (have - want) * (have - want);
          norm += want * want;
        }
        const double rel = std::sqrt(err / norm);
        const double lse = std::fabs((got[0] + std::log2(got[1])) - (m + std::log2(l)));
        worst_out = std::isnan(rel) ? INFINITY : std::max(worst_out, rel);
        worst_lse = std::isnan(lse) ? INFINITY : std::max(worst_lse, lse);
        ASSERT_LE(rel, 1e-2) << "block size " << B << " Gv " << s.value_group_size << " item " << it
                             << " (seq " << item.seq << " blocks " << item.begin << ".." << item.end
                             << ") KV head " << g << " head " << h;
        ASSERT_LE(lse, 1e-2) << "item " << it << " KV head " << g << " head " << h;
      }
    }
  }
}

TEST(DecodeInt4Emulated, PartialsMatchFp64FromTheBlocks) {
  for (const int bs : {32, 64, 128}) {
    for (const int gv : {32, 64, 128}) {
      for (const Shape s : {Shape{bs, gv, 14, 2}, Shape{bs, gv, 16, 2}}) {
        double worst_out = 0.0, worst_lse = 0.0;
        run_case(s, static_cast<uint32_t>(bs * 1000 + gv * 10 + s.heads), worst_out, worst_lse);
        std::printf("B %3d Gv %3d heads %d/%d: output rel L2 <= %.2e, log2 sum within %.2e\n", bs,
                    gv, s.heads, s.kv_heads, worst_out, worst_lse);
      }
    }
  }
}

// ---- the Hadamard transform of the merges and the dequantizer ------------------------------

__global__ void hadamard_rows_kernel(float* rows) {
  __shared__ float row[kHeadDim];
  const int c = static_cast<int>(threadIdx.x);
  float* r = rows + static_cast<size_t>(blockIdx.x) * kHeadDim;
  r[c] = hadamard128(r[c], row, c);
}

// A warp a row, four channels a lane (the fused decode merge's layout).
__global__ void hadamard_warp_rows_kernel(float* rows) {
  const int lane = static_cast<int>(threadIdx.x);
  float* r = rows + static_cast<size_t>(blockIdx.x) * kHeadDim;
  float y[4] = {r[2 * lane], r[2 * lane + 1], r[64 + 2 * lane], r[64 + 2 * lane + 1]};
  hadamard128_warp(y, lane);
  r[2 * lane] = y[0];
  r[2 * lane + 1] = y[1];
  r[64 + 2 * lane] = y[2];
  r[64 + 2 * lane + 1] = y[3];
}

// hadamard128 (warp shuffles for stages 1..16, shared memory for 32 and 64) and hadamard128_warp
// (a warp a row) are kv::hadamard_ref bit for bit: the same butterflies in the same order.
TEST(HadamardEmulated, BitForBitTheCpuTransform) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int n = 16;
  std::vector<float> rows(static_cast<size_t>(n) * kHeadDim);
  for (size_t k = 0; k < rows.size(); ++k) {
    rows[k] = normal(rng) * std::ldexp(1.0f, static_cast<int>(k % 37) - 18);  // mixed scales
  }
  std::vector<float> want(rows), by_warp(rows);
  emu::launch(hadamard_rows_kernel, dim3(n), dim3(kHeadDim), 0, std::tuple<float*>(rows.data()));
  emu::launch(hadamard_warp_rows_kernel, dim3(n), dim3(32), 0, std::tuple<float*>(by_warp.data()));
  for (int r = 0; r < n; ++r) {
    kv::hadamard_ref(std::span<float>(want).subspan(static_cast<size_t>(r) * kHeadDim, kHeadDim));
  }
  EXPECT_EQ(std::memcmp(rows.data(), want.data(), rows.size() * 4), 0);
  EXPECT_EQ(std::memcmp(by_warp.data(), want.data(), by_warp.size() * 4), 0);
}

// ---- the whole decode path: launch_decode_attention (item kernels and merge) ---------------

struct PathCase {
  kv::KvCacheDtype cache;
  bool bf16;  // the 16-bit element type (16-bit cache; int4_kivi's sink, ring and staging)
  int block_size;
  int ring = 1;           // int4_kivi: 1 + window blocks
  bool sink = false;      // int4_kivi: each sequence's block 0 is a sink block
  bool hadamard = false;  // int4_kivi v2: pool values in the Hadamard domain
  // int4_kivi: elements past a sink block's before the next one starts (as when the sinks are
  // runs of pool blocks, KvCacheConfig::sink_base_block): PagedAttentionArgs::sink_stride.
  int sink_pad = 0;
};

uint16_t to16(float x, bool bf16) { return bf16 ? float_to_bf16(x) : float_to_fp16(x); }
double from16(uint16_t h, bool bf16) { return bf16 ? bf16_to_float(h) : fp16_to_float(h); }

constexpr int kPathKv = 2, kPathGv = 32;  // query heads: Scene::heads (a group of 7 or 2)

// A step's batch in one cache format: sequences of given lengths and new-token counts (q_len),
// random caches holding every position where that format keeps it (16-bit / fp8: paged rows;
// int4_kivi: pool blocks before pool_end, the sink block, the residual ring up to the step's
// tokens, the step's own tokens in staging), queries, and PagedAttentionArgs over them (out
// left to the caller). reference() is fp64 attention of one row over positions 0..its own.
struct Scene {
  Scene(const PathCase& pc, int heads, const std::vector<std::pair<int, int>>& seqs, uint32_t seed)
      : pc(pc),
        B(pc.block_size),
        heads(heads),
        rope(cpu::rope_inv_freq(kHeadDim, 1e6, model::RopeScaling{})) {
    const int64_t kv_dim = int64_t{kPathKv} * kHeadDim;
    const bool int4 = pc.cache == kv::KvCacheDtype::kInt4Kivi;
    const bool fp8 = pc.cache == kv::KvCacheDtype::kFp8E4M3;
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    num_seqs = static_cast<int>(seqs.size());
    int longest = 0;
    for (const auto& [len, q_len] : seqs) longest = std::max(longest, len);
    max_blocks = (longest + B - 1) / B + 1;
    num_pool = num_seqs * max_blocks + 1;
    builder = std::make_unique<ForwardBatchBuilder>(B, max_blocks);
    std::vector<int32_t> ids(static_cast<size_t>(num_pool));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int q = 0, next = 0; q < num_seqs; ++q) {
      const auto [len, q_len] = seqs[static_cast<size_t>(q)];
      std::vector<int32_t> t;
      for (int k = 0; k < (len + B - 1) / B; ++k) t.push_back(ids[static_cast<size_t>(next++)]);
      // The sink block: block 0, once it was full before the step (until then it is in the ring).
      if (int4 && pc.sink && (len - q_len) / B >= 1) t[0] = num_pool + q;
      const std::vector<int32_t> tokens(static_cast<size_t>(q_len), 1);
      builder->add(tokens, len - q_len, t, int4 ? q : -1, 0);
    }
    b = builder->batch();
    const int64_t num_tokens = b.num_tokens();
    auto fill16 = [&](std::vector<uint16_t>& v, size_t n) {
      v.resize(n);
      for (uint16_t& x : v) x = to16(normal(rng), pc.bf16);
    };
    if (!int4) {
      const int es = fp8 ? 1 : 2;
      const size_t n = static_cast<size_t>(num_pool) * B * kv_dim * es;
      kc.resize(n);
      vc.resize(n);
      for (size_t k = 0; k < n; k += es) {
        for (std::vector<uint8_t>* arr : {&kc, &vc}) {
          if (fp8) {
            (*arr)[k] = __nv_cvt_float_to_fp8(normal(rng), __NV_SATFINITE, __NV_E4M3);
          } else {
            const uint16_t h = to16(normal(rng), pc.bf16);
            std::memcpy(arr->data() + k, &h, 2);
          }
        }
      }
    } else {
      layout = *kv::Int4KiviLayout::create(B, kHeadDim, kPathGv);
      pool = random_pool(layout, static_cast<size_t>(num_pool * kPathKv), rng);
      sink_stride = 2 * B * kv_dim + pc.sink_pad;
      fill16(sink, static_cast<size_t>(num_seqs * sink_stride));
      fill16(ring, static_cast<size_t>(num_seqs * 2 * pc.ring * B * kv_dim));
      fill16(stk, static_cast<size_t>(num_tokens * kv_dim));
      fill16(stv, static_cast<size_t>(num_tokens * kv_dim));
      for (int q = 0; q < num_seqs; ++q) {
        pool_ends.push_back(static_cast<int32_t>(int4_pool_end(b, q, B, pc.ring, num_pool)));
      }
    }
    rope.ensure(static_cast<int64_t>(max_blocks) * B);
    q.resize(static_cast<size_t>(num_tokens * heads * kHeadDim));
    for (float& x : q) x = normal(rng);
    token_seq.resize(static_cast<size_t>(num_tokens));
    for (int s2 = 0; s2 < num_seqs; ++s2) {
      for (int32_t t = b.query_start_loc[s2]; t < b.query_start_loc[s2 + 1]; ++t) {
        token_seq[static_cast<size_t>(t)] = s2;
      }
    }
    a.q = q.data();
    a.q_stride = heads * kHeadDim;
    a.num_tokens = num_tokens;
    a.num_heads = heads;
    a.num_kv_heads = kPathKv;
    a.block_size = B;
    a.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
    a.token_seq = token_seq.data();
    a.positions = b.positions.data();
    a.query_start_loc = b.query_start_loc.data();
    a.seq_lens = b.seq_lens.data();
    a.block_tables = b.block_tables.data();
    a.max_blocks_per_seq = b.max_num_blocks_per_seq;
    a.cache = pc.cache;
    a.bf16 = pc.bf16;
    if (!int4) {
      a.k_cache = kc.data();
      a.v_cache = vc.data();
    } else {
      a.pool = pool.data();
      a.layout = layout;
      a.num_pool_blocks = num_pool;
      a.residual = ring.data();
      a.seat_stride = 2 * ring_v_offset(B, pc.ring, kv_dim);
      a.ring = pc.ring;
      a.sink = sink.data();
      a.sink_stride = pc.sink_pad > 0 ? sink_stride : 0;
      a.staging_k = stk.data();
      a.staging_v = stv.data();
      a.pool_ends = pool_ends.data();
      a.seats = b.seats.data();
      a.seat_starts = b.seat_starts.data();
      a.rope_cos = rope.cos_table().data();
      a.rope_sin = rope.sin_table().data();
      rotations = int4_rotation_image(rope.cos_table(), rope.sin_table(), B);
      a.int4_rotations = rotations.data();
      rope_rows = int4_prefill_rope_image(rope.cos_table(), rope.sin_table());
      a.rope_f16 = rope_rows.data();
      a.value_hadamard = pc.hadamard;
    }
  }

  // Position p's K (after RoPE) and V of KV head g in sequence s.
  void position(int s, int g, int p, Row& k, Row& v) const {
    const int64_t kv_dim = int64_t{kPathKv} * kHeadDim;
    const int32_t* table = b.block_tables.data() + s * b.max_num_blocks_per_seq;
    const int blk = p / B, in = p % B;
    if (pc.cache != kv::KvCacheDtype::kInt4Kivi) {
      const size_t row = (static_cast<size_t>(table[blk]) * B + in) * kv_dim + g * kHeadDim;
      for (int c = 0; c < kHeadDim; ++c) {
        if (pc.cache == kv::KvCacheDtype::kFp8E4M3) {
          k[c] = fp16_to_float(__nv_cvt_fp8x2_to_halfraw2(kc[row + c], __NV_E4M3).x);
          v[c] = fp16_to_float(__nv_cvt_fp8x2_to_halfraw2(vc[row + c], __NV_E4M3).x);
        } else {
          uint16_t hk, hv;
          std::memcpy(&hk, kc.data() + 2 * (row + c), 2);
          std::memcpy(&hv, vc.data() + 2 * (row + c), 2);
          k[c] = from16(hk, pc.bf16);
          v[c] = from16(hv, pc.bf16);
        }
      }
      return;
    }
    const int q0 = b.query_start_loc[s], start = b.seq_lens[s] - (b.query_start_loc[s + 1] - q0);
    const int pool_end = pool_ends[static_cast<size_t>(s)];
    const uint16_t *k16 = nullptr, *v16 = nullptr;
    if (blk < pool_end && table[blk] >= num_pool) {  // the sink block
      k16 = sink.data() + static_cast<size_t>(table[blk] - num_pool) * sink_stride +
            static_cast<size_t>(in) * kv_dim + g * kHeadDim;
      v16 = k16 + B * kv_dim;
    } else if (blk < pool_end) {
      pool_position(
          pool.data() + static_cast<size_t>(table[blk] * kPathKv + g) * layout.block_bytes, layout,
          in, p, rope, pc.hadamard, k, v);
      return;
    } else if (p < start) {
      k16 = ring.data() + ring_k_offset(b.seats[s], p, B, pc.ring, kv_dim, a.seat_stride) +
            g * kHeadDim;
      v16 = k16 + ring_v_offset(B, pc.ring, kv_dim);
    } else {
      k16 = stk.data() + static_cast<size_t>(q0 + p - start) * kv_dim + g * kHeadDim;
      v16 = stv.data() + static_cast<size_t>(q0 + p - start) * kv_dim + g * kHeadDim;
    }
    for (int c = 0; c < kHeadDim; ++c) {
      k[c] = from16(k16[c], pc.bf16);
      v[c] = from16(v16[c], pc.bf16);
    }
  }

  // fp64 attention of token row t, query head h, over positions 0..its own.
  Row reference(int t, int h) const {
    const int s = token_seq[static_cast<size_t>(t)], g = h / (heads / kPathKv);
    const int pos = b.positions[static_cast<size_t>(t)];
    const float* qh = q.data() + (static_cast<size_t>(t) * heads + h) * kHeadDim;
    auto& [K, V] = kv_rows[{s, g}];  // the sequence's positions of KV head g, made once
    if (K.empty()) {
      K.resize(static_cast<size_t>(b.seq_lens[s]));
      V.resize(K.size());
      for (int p = 0; p < b.seq_lens[s]; ++p) {
        position(s, g, p, K[static_cast<size_t>(p)], V[static_cast<size_t>(p)]);
      }
    }
    std::vector<double> sc(static_cast<size_t>(pos + 1));
    double m = -INFINITY;
    for (int p = 0; p <= pos; ++p) {
      const Row& k = K[static_cast<size_t>(p)];
      double dot = 0.0;
      for (int c = 0; c < kHeadDim; ++c) dot += qh[c] * k[c];
      sc[static_cast<size_t>(p)] = dot * static_cast<double>(a.scale);
      m = std::max(m, sc[static_cast<size_t>(p)]);
    }
    double l = 0.0;
    Row out{};
    for (int p = 0; p <= pos; ++p) {
      const double w = std::exp(sc[static_cast<size_t>(p)] - m);
      l += w;
      for (int c = 0; c < kHeadDim; ++c) out[c] += w * V[static_cast<size_t>(p)][c];
    }
    for (double& x : out) x /= l;
    return out;
  }

  PathCase pc;
  int B, heads, num_seqs = 0, max_blocks = 0, num_pool = 0;
  std::unique_ptr<ForwardBatchBuilder> builder;
  ForwardBatch b;
  std::vector<uint8_t> kc, vc;
  std::vector<uint16_t> sink, ring, stk, stv;
  size_t sink_stride = 0;  // elements from one sink block to the next
  std::vector<std::byte> pool;
  kv::Int4KiviLayout layout;
  std::vector<int32_t> pool_ends, token_seq;
  RopeTable rope;
  std::vector<uint32_t> rotations;  // int4_rotation_image (a.int4_rotations)
  std::vector<uint16_t> rope_rows;  // int4_prefill_rope_image (a.rope_f16)
  std::vector<float> q;
  PagedAttentionArgs a;
  mutable std::map<std::pair<int, int>, std::pair<std::vector<Row>, std::vector<Row>>> kv_rows;
};

double rel_l2(const Row& want, const float* have) {
  double err = 0.0, norm = 0.0;
  for (int c = 0; c < kHeadDim; ++c) {
    err += (have[c] - want[c]) * (have[c] - want[c]);
    norm += want[c] * want[c];
  }
  return std::sqrt(err / norm);
}

// Each decode token's K and V rows in its ring row where the ring keeps it (the merge's
// write_residual), checked, then the ring put back as `before`.
void check_ring(Scene& sc, const DecodePlan& plan, const std::vector<uint16_t>& before,
                const char* what) {
  const PathCase& pc = sc.pc;
  const ForwardBatch& b = sc.b;
  const int64_t kv_dim = int64_t{kPathKv} * kHeadDim;
  for (const DecodeSeq& ds : plan.seqs) {
    const int s = sc.token_seq[static_cast<size_t>(ds.token)];
    const int64_t pos = b.positions[static_cast<size_t>(ds.token)];
    if (!ring_keeps(pos, b.seq_lens[s], pc.block_size, pc.ring)) continue;
    const uint16_t* k = sc.ring.data() + ring_k_offset(b.seats[s], pos, pc.block_size, pc.ring,
                                                       kv_dim, sc.a.seat_stride);
    const uint16_t* v = k + ring_v_offset(pc.block_size, pc.ring, kv_dim);
    const size_t st = static_cast<size_t>(ds.token) * static_cast<size_t>(kv_dim);
    EXPECT_EQ(std::memcmp(k, sc.stk.data() + st, static_cast<size_t>(kv_dim) * 2), 0)
        << what << ", token " << ds.token << ": its K row not in the ring";
    EXPECT_EQ(std::memcmp(v, sc.stv.data() + st, static_cast<size_t>(kv_dim) * 2), 0)
        << what << ", token " << ds.token << ": its V row not in the ring";
  }
  std::copy(before.begin(), before.end(), sc.ring.begin());
}

// A decode launch as a CUDA graph replays it: grids of the capacity of the plan's decode rows,
// the counts in d.live (blocks past them return at once), its own partial sums.
struct ReplayLaunch {
  ReplayLaunch(const DecodePlan& plan, const DecodeShape& shape, const DecodeLaunch& plain,
               int heads)
      : cap(decode_capacity(plain.num_seqs, shape)),
        room(plan.items),
        live{plan.num_int4_items, static_cast<int32_t>(plan.items.size())},
        d(plain) {
    room.resize(static_cast<size_t>(cap.int4_items + cap.row_items), DecodeItem{-1, -1, -1, -1});
    partials.resize(room.size() * static_cast<size_t>(heads) * kDecodePartialFloats);
    d.items = room.data();
    d.num_int4_items = static_cast<int32_t>(cap.int4_items);
    d.num_items = static_cast<int32_t>(cap.int4_items + cap.row_items);
    d.live = live;
    d.partials = partials.data();
  }
  ReplayLaunch(const ReplayLaunch&) = delete;  // d points into it
  ReplayLaunch& operator=(const ReplayLaunch&) = delete;

  DecodeCapacity cap;
  std::vector<DecodeItem> room;
  int32_t live[2];
  std::vector<float> partials;
  DecodeLaunch d;
};

// Decode rows of a batch of sequences (and one 3-token prefill, which the plan leaves out)
// through plan_attention and launch_decode_attention, plain and as a graph replays it; each
// decode row against Scene::reference. Returns the worst relative L2.
double run_path(const PathCase& pc, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::pair<int, int>> seqs;
  for (int k = 0; k < 5; ++k) {
    seqs.push_back({1 + static_cast<int>(rng() % static_cast<unsigned>(12 * pc.block_size)), 1});
  }
  seqs.push_back({2 * pc.block_size + 5, 3});
  constexpr int kHeads = 14;
  Scene sc(pc, kHeads, seqs, seed + 1000);
  const ForwardBatch& b = sc.b;
  DecodeShape shape;
  shape.cache = pc.cache;
  shape.block_size = pc.block_size;
  shape.num_pool_blocks = sc.num_pool;
  shape.ring = pc.ring;
  shape.num_kv_heads = kPathKv;
  shape.num_sms = 2;  // small waves: long contexts split into several items, merged
  shape.blocks_per_sm = 2;
  DecodePlan plan;
  plan_attention(b, shape, true, plan);
  EXPECT_TRUE(pc.cache != kv::KvCacheDtype::kInt4Kivi || plan.pool_ends == sc.pool_ends);

  const size_t row_floats = static_cast<size_t>(kHeads) * kHeadDim;
  std::vector<float> out32(static_cast<size_t>(b.num_tokens()) * row_floats, std::nanf(""));
  PagedAttentionArgs a = sc.a;
  a.out = out32.data();
  a.out_dtype = DType::kF32;
  std::vector<float> partials(plan.items.size() * static_cast<size_t>(kHeads) *
                              kDecodePartialFloats);
  DecodeLaunch d;
  d.items = plan.items.data();
  d.num_items = static_cast<int32_t>(plan.items.size());
  d.num_int4_items = plan.num_int4_items;
  d.seqs = plan.seqs.data();
  d.num_seqs = static_cast<int32_t>(plan.seqs.size());
  d.partials = partials.data();
  launch_decode_attention(a, d, nullptr);

  // As a CUDA graph replays it: grids of the capacity of this many decode rows, the counts in
  // d.live (blocks past them return at once); the same kernels, so the same bits.
  {
    ReplayLaunch rl(plan, shape, d, kHeads);
    std::vector<float> replay(out32.size(), std::nanf(""));
    PagedAttentionArgs ar = a;
    ar.out = replay.data();
    DecodeLaunch dr = rl.d;
    // int4_kivi: as in a decode-only step, the merge also writes each decode token's K and V
    // from staging into its ring row (residual_write's job otherwise): checked, then undone.
    const bool int4 = pc.cache == kv::KvCacheDtype::kInt4Kivi;
    const std::vector<uint16_t> ring_before = sc.ring;
    dr.write_residual = int4;
    launch_decode_attention(ar, dr, nullptr);
    for (const DecodeSeq& ds : plan.seqs) {
      const size_t row = static_cast<size_t>(ds.token) * row_floats;
      EXPECT_EQ(std::memcmp(replay.data() + row, out32.data() + row, row_floats * 4), 0)
          << "token " << ds.token << ": the replayed launch differs";
    }
    if (int4) check_ring(sc, plan, ring_before, "merge kernel");
  }

  // The merge fused into the item kernels (DecodeLaunch::merge_counts), as a graph replays it
  // (the step's choice in merge_flag: 1, the items merge and the merge kernel's blocks return):
  // the rows of the merge kernel within fp32 rounding (the weights' sums in another order), each
  // group merged once (the counts back at zero), the ring rows written; then plain with bf16
  // output: those rows rounded, bit for bit (the fused merge's bf16 store); then a replay whose
  // flag is 0: the merge kernel's rows, bit for bit, and no count touched.
  {
    ReplayLaunch rl(plan, shape, d, kHeads);
    std::vector<float> fused(out32.size(), std::nanf(""));
    std::vector<int32_t> counts(plan.seqs.size() * kPathKv, 0);
    PagedAttentionArgs af = a;
    af.out = fused.data();
    DecodeLaunch df = rl.d;
    df.merge_counts = counts.data();
    const int32_t merge_here = 1, merge_kernel = 0;
    df.merge_flag = &merge_here;
    const bool int4 = pc.cache == kv::KvCacheDtype::kInt4Kivi;
    const std::vector<uint16_t> ring_before = sc.ring;
    df.write_residual = int4;
    launch_decode_attention(af, df, nullptr);
    EXPECT_TRUE(std::all_of(counts.begin(), counts.end(), [](int32_t c) { return c == 0; }))
        << "a group's count left non-zero";
    for (const DecodeSeq& ds : plan.seqs) {
      for (int h = 0; h < kHeads; ++h) {
        const size_t row = static_cast<size_t>(ds.token) * row_floats + size_t{kHeadDim} * h;
        Row want{};
        for (int c = 0; c < kHeadDim; ++c) want[c] = out32[row + static_cast<size_t>(c)];
        EXPECT_LE(rel_l2(want, fused.data() + row), 1e-5)
            << "token " << ds.token << " head " << h << ": fused merge against the merge kernel";
      }
    }
    if (int4) check_ring(sc, plan, ring_before, "fused merge");
    df = d;  // plain: no flag, no merge kernel
    df.partials = rl.d.partials;
    df.merge_counts = counts.data();
    std::vector<float> plain(out32.size(), std::nanf(""));
    af.out = plain.data();
    launch_decode_attention(af, df, nullptr);
    for (const DecodeSeq& ds : plan.seqs) {
      const size_t row = static_cast<size_t>(ds.token) * row_floats;
      EXPECT_EQ(std::memcmp(plain.data() + row, fused.data() + row, row_floats * 4), 0)
          << "token " << ds.token << ": the fused merge's replay (flag 1) not its plain launch";
    }
    std::vector<uint16_t> out16(out32.size(), 0xffffu);
    af.out = out16.data();
    af.out_dtype = DType::kBF16;
    launch_decode_attention(af, df, nullptr);
    int64_t differing = 0;
    for (const DecodeSeq& ds : plan.seqs) {
      for (size_t x = 0; x < row_floats; ++x) {
        const size_t at = static_cast<size_t>(ds.token) * row_floats + x;
        differing += out16[at] != float_to_bf16(fused[at]) ? 1 : 0;
      }
    }
    EXPECT_EQ(differing, 0) << "bf16 outputs of the fused merge not its fp32 rows rounded";

    ReplayLaunch rk(plan, shape, d, kHeads);
    std::vector<float> merged(out32.size(), std::nanf(""));
    af.out = merged.data();
    af.out_dtype = DType::kF32;
    DecodeLaunch dk = rk.d;
    dk.merge_counts = counts.data();
    dk.merge_flag = &merge_kernel;
    launch_decode_attention(af, dk, nullptr);
    EXPECT_TRUE(std::all_of(counts.begin(), counts.end(), [](int32_t c) { return c == 0; }))
        << "a count touched in a step whose flag says the merge kernel";
    for (const DecodeSeq& ds : plan.seqs) {
      const size_t row = static_cast<size_t>(ds.token) * row_floats;
      EXPECT_EQ(std::memcmp(merged.data() + row, out32.data() + row, row_floats * 4), 0)
          << "token " << ds.token << ": flag 0, not the merge kernel's rows";
    }
  }

  double worst = 0.0;
  for (const DecodeSeq& ds : plan.seqs) {
    for (int h = 0; h < kHeads; ++h) {
      const double rel = rel_l2(sc.reference(ds.token, h),
                                out32.data() + static_cast<size_t>(ds.token) * row_floats +
                                    static_cast<size_t>(h) * kHeadDim);
      EXPECT_LE(rel, 2e-2) << "token " << ds.token << " head " << h;
      worst = std::isnan(rel) ? INFINITY : std::max(worst, rel);
    }
  }
  // Rows the plan leaves to the reference kernel are not written here.
  for (const int32_t t : plan.other_tokens) {
    EXPECT_TRUE(std::isnan(out32[static_cast<size_t>(t) * row_floats])) << "token " << t;
  }
  return worst;
}

// run(case, seed) for each case (seeds from `seed` on), printing each one's worst relative L2.
void run_cases(std::span<const PathCase> cases, uint32_t seed,
               double (*run)(const PathCase&, uint32_t), const char* what) {
  for (const PathCase& pc : cases) {
    const double worst = run(pc, seed++);
    std::printf("%s %s B %d ring %d%s%s: %s rows within %.2e relative L2\n",
                std::string(kv::kv_cache_dtype_name(pc.cache)).c_str(), pc.bf16 ? "bf16" : "fp16",
                pc.block_size, pc.ring, pc.sink ? (pc.sink_pad > 0 ? " sink runs" : " sink") : "",
                pc.hadamard ? " hadamard" : "", what, worst);
  }
}

TEST(DecodeAttentionEmulated, EveryFormatMatchesFp64) {
  const PathCase cases[] = {
      {kv::KvCacheDtype::k16Bit, true, 16},
      {kv::KvCacheDtype::k16Bit, false, 32},
      {kv::KvCacheDtype::kFp8E4M3, true, 16},
      {kv::KvCacheDtype::kInt4Kivi, true, 64, 2, true, true},
      {kv::KvCacheDtype::kInt4Kivi, false, 32, 2, true, true},
      {kv::KvCacheDtype::kInt4Kivi, true, 64, 1, false, false},
      {kv::KvCacheDtype::kInt4Kivi, true, 64, 2, true, true, 4608},  // sinks in runs
  };
  run_cases(cases, 11, run_path, "decode");
}

// ---- prefill attention (prefill_attention.cu) ----------------------------------------------

// Scenes whose pool rows held part of a sequence's pool (check_pool_rows), and of them those
// whose launch had tiles past the cut.
int g_partial_pool_rows = 0, g_wider_grid_cuts = 0;

// int4_kivi's pool tiles made before the prefill kernel (plan_int4_pool_rows,
// launch_int4_pool_rows) give the output of the kernel that dequantizes them itself, bit for bit:
// every sequence's pool in rows; (where two or more have pool blocks) only the first planned
// one's, the others dequantized in the kernel; and the first pool of two tiles or more cut in
// half, its later tiles dequantized in the kernel. The rows start as NaN (room for all), so a row
// read but not made shows.
void check_pool_rows(const Scene& sc, const std::vector<PrefillTile>& tiles,
                     const PrefillSplitLaunch& split, const std::vector<uint16_t>& want) {
  const PagedAttentionArgs& base_args = sc.a;
  Int4PoolRows all;
  plan_int4_pool_rows(sc.b, tiles, sc.pool_ends, base_args.num_pool_blocks, base_args.block_size,
                      INT32_MAX, all);
  ASSERT_FALSE(all.seqs.empty()) << "the scene has a sequence with pool blocks";
  struct Capacity {
    int64_t rows;
    size_t seqs;    // sequences given rows
    int32_t tiles;  // the last one's tiles in rows
  };
  const auto tiles_of = [&](size_t i) { return all.tiles[static_cast<size_t>(all.seqs[i])]; };
  std::vector<Capacity> capacities = {{all.rows, all.seqs.size(), tiles_of(all.seqs.size() - 1)}};
  if (all.seqs.size() >= 2) {
    capacities.push_back({all.base[static_cast<size_t>(all.seqs[1])], 1, tiles_of(0)});
  }
  // The cut: the first pool of two tiles or more after a longer pool where there is one (the
  // launch's grid then has tiles for the cut sequence past those it may make).
  size_t cut = all.seqs.size();
  int32_t longest = 0;  // of the pools before i
  for (size_t i = 0; i < all.seqs.size(); ++i) {
    if (tiles_of(i) >= 2 && (cut == all.seqs.size() || longest > tiles_of(i) / 2)) {
      const bool wider = longest > tiles_of(i) / 2;
      cut = i;
      if (wider) {
        ++g_wider_grid_cuts;
        break;
      }
    }
    longest = std::max(longest, tiles_of(i));
  }
  if (cut < all.seqs.size()) {
    const int32_t half = tiles_of(cut) / 2;
    capacities.push_back({all.base[static_cast<size_t>(all.seqs[cut])] + 64 * half, cut + 1, half});
    ++g_partial_pool_rows;
  }
  for (const Capacity& capacity : capacities) {
    SCOPED_TRACE(testing::Message() << "pool rows for " << capacity.rows << " of " << all.rows);
    Int4PoolRows plan;
    plan_int4_pool_rows(sc.b, tiles, sc.pool_ends, base_args.num_pool_blocks, base_args.block_size,
                        capacity.rows, plan);
    ASSERT_EQ(plan.seqs.size(), capacity.seqs);
    EXPECT_EQ(plan.tiles[static_cast<size_t>(plan.seqs.back())], capacity.tiles);
    const auto kv_elems = static_cast<size_t>(all.rows) * kPathKv * kHeadDim;
    std::vector<uint16_t> rows_k(kv_elems, 0xffffu), rows_v(kv_elems, 0xffffu);
    std::vector<uint16_t> out(want.size(), 0xffffu);
    PagedAttentionArgs a = base_args;
    a.out = out.data();
    a.out_dtype = a.bf16 ? DType::kBF16 : DType::kF16;
    a.pool_rows_k = rows_k.data();
    a.pool_rows_v = rows_v.data();
    a.pool_row_base = plan.base.data();
    a.pool_row_tiles = plan.tiles.data();
    launch_int4_pool_rows(a, plan.seqs.data(), static_cast<int32_t>(plan.seqs.size()),
                          plan.max_tiles, nullptr);
    launch_prefill_attention(a, tiles.data(), static_cast<int32_t>(tiles.size()), nullptr, &split);
    size_t differ = 0;
    for (size_t i = 0; i < out.size(); ++i) differ += out[i] != want[i] ? 1 : 0;
    EXPECT_EQ(differ, 0U) << "outputs differ from the kernel's own dequantization";
    // Past the planned rows (the room a capacity leaves): nothing written.
    const auto made = static_cast<size_t>(plan.rows) * kPathKv * kHeadDim;
    size_t past = 0;
    for (size_t i = made; i < kv_elems; ++i) past += rows_k[i] != 0xffffu || rows_v[i] != 0xffffu;
    EXPECT_EQ(past, 0U) << "pool rows written past the plan's " << plan.rows;
  }
}

// Prefill rows of `seqs` ({seq_len, q_len}) through plan_prefill and launch_prefill_attention,
// with split_prefill's split of the context when `wave_blocks` > 0 (its merges must be there
// then); every row a tile covers against Scene::reference (causal), the others unwritten.
// Returns the worst relative L2.
double check_prefill(const PathCase& pc, const std::vector<std::pair<int, int>>& seqs,
                     int64_t wave_blocks, uint32_t seed) {
  constexpr int kHeads = 4;  // a block a query head: fewer heads, fewer emulated blocks
  Scene sc(pc, kHeads, seqs, seed);
  std::vector<PrefillTile> tiles;
  plan_prefill(sc.b, 2, tiles);
  std::vector<PrefillMerge> merges;
  std::vector<float> partials(static_cast<size_t>(prefill_split_partial_floats(kHeads)), NAN);
  if (wave_blocks > 0) {
    split_prefill(sc.b, kHeads, wave_blocks, tiles, merges);
    EXPECT_FALSE(merges.empty()) << "no tile was split";
  }
  const size_t row_elems = static_cast<size_t>(kHeads) * kHeadDim;
  std::vector<uint16_t> out(static_cast<size_t>(sc.b.num_tokens()) * row_elems, 0xffffu);  // NaN
  PagedAttentionArgs a = sc.a;
  a.out = out.data();
  a.out_dtype = pc.bf16 ? DType::kBF16 : DType::kF16;
  EXPECT_TRUE(prefill_kernels_support(kHeads, kPathKv, a));
  const PrefillSplitLaunch split{partials.data(), merges.data(),
                                 static_cast<int32_t>(merges.size())};
  launch_prefill_attention(a, tiles.data(), static_cast<int32_t>(tiles.size()), nullptr, &split);
  if (pc.cache == kv::KvCacheDtype::kInt4Kivi) check_pool_rows(sc, tiles, split, out);
  // fp16 operands and output: 4e-3; bf16 taking part: 2e-2 (the GPU test's bounds).
  const double bound = pc.bf16 ? 2e-2 : 4e-3;
  double worst = 0.0;
  for (int t = 0; t < sc.b.num_tokens(); ++t) {
    const bool covered = prefill_covers(sc.b, 2, t);
    for (int h = 0; h < kHeads; ++h) {
      const uint16_t* row =
          out.data() + static_cast<size_t>(t) * row_elems + static_cast<size_t>(h) * kHeadDim;
      if (!covered) {
        EXPECT_EQ(row[0], 0xffffu) << "token " << t << " written, though no tile covers it";
        continue;
      }
      float have[kHeadDim];
      for (int c = 0; c < kHeadDim; ++c) have[c] = static_cast<float>(from16(row[c], pc.bf16));
      const double rel = rel_l2(sc.reference(t, h), have);
      EXPECT_LE(rel, bound) << "token " << t << " (position " << sc.b.positions[t] << ") head "
                            << h;
      worst = std::isnan(rel) ? INFINITY : std::max(worst, rel);
    }
  }
  return worst;
}

// Uniform integers in [lo, hi] from a seeded generator (the prefill cases' shapes).
struct Picker {
  explicit Picker(uint32_t seed) : rng(seed) {}
  int operator()(int lo, int hi) {
    return lo + static_cast<int>(rng() % static_cast<unsigned>(hi - lo + 1));
  }
  std::mt19937 rng;
};

// A prompt from position 0, a chunk starting mid-block (its earlier positions in the cache, for
// int4_kivi in the pool, sink and ring), a chunk at a block boundary, a 2-token chunk, and a
// decode row (left to the other kernels).
double run_prefill(const PathCase& pc, uint32_t seed) {
  const int B = pc.block_size;
  Picker pick(seed);
  const int whole = pick(40, 90), mid = pick(2, 3) * B + pick(1, B - 1);
  return check_prefill(pc,
                       {{whole, whole},
                        {mid + pick(20, 90), pick(20, 90)},
                        {3 * B + 40, 40},
                        {pick(B + 1, 3 * B), 2},
                        {pick(B, 4 * B), 1}},
                       0, seed + 2000);
}

// Split-KV (split_prefill): short chunks at contexts of 12-26 KV tiles, split into runs of at
// least 4 tiles (the pool's, the sink block's and the tail's runs in one part or apart), a
// 70-row chunk (two tiles, the second of 6 rows), a prompt too short to split, a decode row.
double run_prefill_split(const PathCase& pc, uint32_t seed) {
  Picker pick(seed);
  return check_prefill(pc,
                       {{pick(800, 1000), pick(2, 9)},
                        {pick(1200, 1650), 70},
                        {pick(60, 120), pick(30, 60)},
                        {pick(400, 700), 1}},
                       1000, seed + 3000);
}

TEST(PrefillAttentionEmulated, EveryFormatMatchesFp64) {
  const PathCase cases[] = {
      {kv::KvCacheDtype::k16Bit, true, 16},
      {kv::KvCacheDtype::k16Bit, false, 32},
      {kv::KvCacheDtype::kFp8E4M3, false, 64},
      {kv::KvCacheDtype::kInt4Kivi, true, 64, 2, true, true},
      {kv::KvCacheDtype::kInt4Kivi, false, 32, 2, true, true},
      {kv::KvCacheDtype::kInt4Kivi, false, 128, 1, false, false},
      {kv::KvCacheDtype::kInt4Kivi, true, 64, 2, true, true, 4608},  // sinks in runs
  };
  run_cases(cases, 21, run_prefill, "prefill");
}

TEST(PrefillAttentionEmulated, SplitContextsMatchFp64) {
  const PathCase cases[] = {
      {kv::KvCacheDtype::k16Bit, true, 16},
      {kv::KvCacheDtype::kFp8E4M3, false, 64},
      {kv::KvCacheDtype::kInt4Kivi, true, 64, 2, true, true},
      {kv::KvCacheDtype::kInt4Kivi, false, 32, 2, true, true},
      {kv::KvCacheDtype::kInt4Kivi, false, 128, 1, false, false},
  };
  run_cases(cases, 31, run_prefill_split, "split prefill");
  EXPECT_GT(g_partial_pool_rows, 0) << "no pool was cut: the rows' partial path went untested";
  EXPECT_GT(g_wider_grid_cuts, 0) << "no cut pool after a longer one: the rows kernel's limit "
                                     "went untested";
}

}  // namespace
}  // namespace s4kv::backend::cuda
