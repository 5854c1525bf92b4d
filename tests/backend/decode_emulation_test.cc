// The int4_kivi decode attention kernel (decode_int4.cu) run on the CPU through emulation.h, on
// every machine (no GPU needed): random int4_kivi pool blocks, block tables and queries, the
// sequences split into items of 1..5 blocks; each item's partial (max, sum and the 128 value
// sums of every query head of the group) against the same computed here in fp64 from the
// blocks' codes, scales and zeros, keys rotated by their positions from the RoPE table. Every
// block size (32, 64, 128: 2, 4, 8 warps) and value group size (32, 64, 128) the kernel is
// compiled for. What it checks: the kernel's indexing and fragment bookkeeping (an error there is
// O(1)); what it cannot: timing, the GPU's exact rounding (fp16 MMA inputs here too, fp32
// accumulation in another order), races between warps that a barrier would hide here.
// backend_cuda_test runs the same kernel on a GPU against the CPU reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/rope.h"
#include "backend/cuda/decode_int4.cu"  // compiled as C++ with S4KV_CUDA_EMULATION
#include "backend/rope_table.h"
#include "kv/int4_kivi_layout.h"

namespace s4kv::backend::cuda {
namespace {

constexpr int kHeadDim = 128;

struct Shape {
  int block_size, value_group_size, heads, kv_heads;
};

uint16_t f16(float x) { return __half_as_ushort(__float2half_rn(x)); }
double from_f16(uint16_t h) { return static_cast<double>(__half2float(__ushort_as_half(h))); }

// One case: returns the largest relative L2 error of an item's normalized output and the largest
// error of its log2 sum (max + log2(sum)), over items x KV heads x query heads.
void run_case(const Shape& s, uint32_t seed, double& worst_out, double& worst_lse) {
  const int B = s.block_size, group = s.heads / s.kv_heads;
  const kv::Int4KiviLayout layout = *kv::Int4KiviLayout::create(B, kHeadDim, s.value_group_size);
  std::mt19937 rng(seed);
  auto uniform = [&](float lo, float hi) {
    return std::uniform_real_distribution<float>(lo, hi)(rng);
  };

  // Three sequences of 3..9 blocks; their blocks scattered over the pool.
  const std::vector<int> blocks = {3 + static_cast<int>(rng() % 7), 3 + static_cast<int>(rng() % 7),
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

  // The pool: random codes; scales and zeros of the magnitudes the quantizer makes.
  const size_t bb = layout.block_bytes;
  std::vector<std::byte> pool(static_cast<size_t>(num_pool * s.kv_heads) * bb);
  for (std::byte& b : pool) b = static_cast<std::byte>(rng() & 0xffu);
  auto put16 = [&](size_t at, float x) {
    const uint16_t h = f16(x);
    std::memcpy(pool.data() + at, &h, 2);
  };
  for (size_t blk = 0; blk < static_cast<size_t>(num_pool * s.kv_heads); ++blk) {
    const size_t base = blk * bb;
    for (int c = 0; c < kHeadDim; ++c) {
      put16(base + layout.k_scale_offset + 2 * static_cast<size_t>(c), uniform(0.02f, 0.4f));
      put16(base + layout.k_zero_offset + 2 * static_cast<size_t>(c), uniform(-2.0f, 2.0f));
    }
    for (int t = 0; t < B * layout.num_value_groups(); ++t) {
      put16(base + layout.v_scale_offset + 2 * static_cast<size_t>(t), uniform(0.02f, 0.3f));
      put16(base + layout.v_zero_offset + 2 * static_cast<size_t>(t), uniform(-1.0f, 1.0f));
    }
  }

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
          std::min(1 + static_cast<int>(rng() % 5), blocks[static_cast<size_t>(q2)] - b0);
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
        std::vector<std::vector<double>> values;
        for (int blk = item.begin; blk < item.end; ++blk) {
          const int id = table[static_cast<size_t>(item.seq * max_blocks + blk)];
          const std::byte* base = pool.data() + (static_cast<size_t>(id * s.kv_heads + g)) * bb;
          const std::span<const std::byte> kc(base + layout.k_codes_offset, layout.codes_bytes);
          const std::span<const std::byte> vc(base + layout.v_codes_offset, layout.codes_bytes);
          auto at16 = [&](size_t off, int index) {
            uint16_t x;
            std::memcpy(&x, base + off + 2 * static_cast<size_t>(index), 2);
            return from_f16(x);
          };
          for (int t = 0; t < B; ++t) {
            const int64_t p = static_cast<int64_t>(blk) * B + t;
            double k[kHeadDim];
            for (int c = 0; c < kHeadDim; ++c) {
              k[c] = kv::read_int4_code(kc, kHeadDim, t, c) * at16(layout.k_scale_offset, c) +
                     at16(layout.k_zero_offset, c);
            }
            const float* cs = rope.cos(p);
            const float* sn = rope.sin(p);
            double dot = 0.0;
            for (int c = 0; c < kHeadDim / 2; ++c) {
              const double lo = k[c] * cs[c] - k[c + 64] * sn[c];
              const double hi = k[c + 64] * cs[c] + k[c] * sn[c];
              dot += qh[c] * lo + qh[c + 64] * hi;
            }
            scores.push_back(dot * f);
            std::vector<double> v(kHeadDim);
            for (int c = 0; c < kHeadDim; ++c) {
              const int vg = t * layout.num_value_groups() + c / s.value_group_size;
              v[static_cast<size_t>(c)] =
                  kv::read_int4_code(vc, kHeadDim, t, c) * at16(layout.v_scale_offset, vg) +
                  at16(layout.v_zero_offset, vg);
            }
            values.push_back(std::move(v));
          }
        }
        const double m = *std::max_element(scores.begin(), scores.end());
        double l = 0.0;
        for (size_t t = 0; t < scores.size(); ++t) {
          const double w = std::exp2(scores[t] - m);
          l += w;
          for (int c = 0; c < kHeadDim; ++c)
            out[static_cast<size_t>(c)] += w * values[t][static_cast<size_t>(c)];
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

}  // namespace
}  // namespace s4kv::backend::cuda
