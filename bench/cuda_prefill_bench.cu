// Prefill attention on the GPU (cuda_attention_bench --prefill): the tensor-core prefill kernels
// (prefill_attention.cuh) against the reference kernel (launch_paged_attention) on one step of
// prompt rows, every KV format. Each case is checked first (relative L2 per row against the
// reference in fp32; bf16 operands and output, bound 2e-2), then timed with CUDA events (median
// of --reps launches after warm-up). Achieved TFLOP/s counts the QK^T and PV products only:
// 4 * 128 * num_heads * sum over rows of (position + 1), i.e. 4 L (L + 1) / 2 * 128 * num_heads
// for a prompt of L tokens.
//
//   cuda_attention_bench --prefill [--heads 28/4,32/8] [--formats 16bit,fp8,int4]
//       [--cases 1x1024,1x4096,1x8192,4x2048,2048@8192] [--reps 10] [--no-reference]
//       [--block-size 64] [--value-group-size 128] [--int4-v1] [--no-split] [--pool-rows]
//       > results.json
// A case NxL is N sequences each prefilling an L-token prompt from position 0 (int4_kivi reads
// all of it from staging); L@C is one chunk of L tokens at context C (positions C - L .. C - 1),
// whose earlier context is in the cache (int4_kivi: sink block, pool blocks, window and tail in
// the residual ring). Caches hold random values (no NaN); block tables are random walks over a
// pool of four times the blocks a case needs. Tiles are split over the context as the backend
// splits them (split_prefill: a short chunk at a long context) unless --no-split.
// --pool-rows: int4_kivi's pool tiles made into pool rows first (launch_int4_pool_rows), timed with
// the attention.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/paged_attention.cuh"
#include "backend/cuda/prefill_attention.cuh"
#include "backend/forward_batch_builder.h"
#include "cuda_bench_util.cuh"
#include "kv/int4_kivi_layout.h"

namespace s4kv::backend::cuda {
namespace {

struct PrefillCase {
  std::string name;
  int seqs = 1, q_len = 0, context = 0;
};

std::vector<PrefillCase> parse_cases(const std::string& s) {
  std::vector<PrefillCase> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    PrefillCase c;
    c.name = item;
    if (const auto x = item.find('x'); x != std::string::npos) {
      c.seqs = std::atoi(item.substr(0, x).c_str());
      c.q_len = c.context = std::atoi(item.substr(x + 1).c_str());
    } else if (const auto at = item.find('@'); at != std::string::npos) {
      c.q_len = std::atoi(item.substr(0, at).c_str());
      c.context = std::atoi(item.substr(at + 1).c_str());
    }
    if (c.seqs < 1 || c.q_len < 1 || c.context < c.q_len) {
      std::fprintf(stderr, "bad case %s (NxL or L@C)\n", item.c_str());
      return {};
    }
    out.push_back(c);
  }
  return out;
}

std::vector<float> widen_bf16(const DeviceBuffer& b, size_t n) {
  std::vector<uint16_t> bits(n);
  b.copy_to_host(bits.data(), n * 2);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = uint32_t{bits[i]} << 16;
    std::memcpy(&out[i], &u, 4);
  }
  return out;
}

}  // namespace

int run_prefill(int argc, char** argv) {
  CacheFlags flags;
  std::vector<PrefillCase> cases = parse_cases("1x1024,1x4096,1x8192,4x2048,2048@8192");
  int reps = 10;
  bool reference = true, split = true, pool_rows = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--prefill" || flags.parse(a, next)) {
      continue;
    } else if (a == "--cases") {
      cases = parse_cases(next());
      if (cases.empty()) return 2;
    } else if (a == "--reps") {
      reps = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--no-reference") {
      reference = false;
    } else if (a == "--no-split") {
      split = false;
    } else if (a == "--pool-rows") {
      pool_rows = true;
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  const std::vector<Shape>& shapes = flags.shapes;
  const std::vector<std::string>& formats = flags.formats;
  const int B = flags.block_size, Gv = flags.value_group_size;
  const bool int4_v1 = flags.int4_v1;
  kv::Int4KiviLayout layout;
  if (!flags.prepare(&layout)) return 2;
  const int ring = int4_v1 ? 1 : 2;
  int max_ctx = 0;
  for (const PrefillCase& c : cases) max_ctx = std::max(max_ctx, c.context);
  const DeviceRope rope(max_ctx + B, B);

  std::printf(
      "{\n  \"gpu\": \"%s\",\n  \"mode\": \"prefill\",\n  \"block_size\": %d,\n"
      "  \"int4_value_group_size\": %d,\n  \"int4_v1\": %s,\n  \"rows\": [\n",
      device_description().c_str(), B, Gv, int4_v1 ? "true" : "false");
  bool first_row = true;
  std::mt19937 rng(7);
  for (const Shape& sh : shapes) {
    const int64_t kv_dim = int64_t{sh.kv_heads} * kD;
    const int64_t q_stride = int64_t{sh.heads + 2 * sh.kv_heads} * kD;  // as the qkv rows
    for (const std::string& fmt : formats) {
      const bool int4 = fmt == "int4", fp8 = fmt == "fp8";
      for (const PrefillCase& pc : cases) {
        // The batch: pc.seqs sequences of pc.q_len new tokens at context pc.context.
        const int64_t blocks_per_seq = (pc.context + B - 1) / B;
        const int64_t num_blocks = std::max<int64_t>(1024, 4 * pc.seqs * blocks_per_seq);
        const ForwardBatchBuilder built = walk_batch(pc.seqs, pc.q_len, pc.context, B, num_blocks,
                                                     num_blocks, int4, int4_v1, rng);
        const ForwardBatch fb = built.batch();
        const int64_t n = fb.num_tokens();
        std::vector<int32_t> pool_ends;
        double work = 0;  // sum over rows of (position + 1)
        for (int64_t s = 0; s < fb.num_seqs(); ++s) {
          for (int32_t t = fb.query_start_loc[s]; t < fb.query_start_loc[s + 1]; ++t) {
            work += fb.positions[t] + 1.0;
          }
          if (int4)
            pool_ends.push_back(static_cast<int32_t>(int4_pool_end(fb, s, B, ring, num_blocks)));
        }
        const kv::KvCacheDtype cache = int4  ? kv::KvCacheDtype::kInt4Kivi
                                       : fp8 ? kv::KvCacheDtype::kFp8E4M3
                                             : kv::KvCacheDtype::k16Bit;
        std::vector<PrefillTile> tiles;
        plan_prefill(fb, 2, tiles);
        std::vector<PrefillMerge> merges;
        if (split) {
          split_prefill(fb, sh.heads, int64_t{device_sm_count()} * prefill_blocks_per_sm(cache),
                        tiles, merges);
        }

        // The cache, random (no NaN).
        DeviceBuffer kc, vc, pool;
        std::optional<Int4Rows> rows;
        if (int4) {
          const int64_t pool_bytes =
              num_blocks * sh.kv_heads * static_cast<int64_t>(layout.block_bytes);
          pool = DeviceBuffer(static_cast<size_t>(pool_bytes));
          fill(pool.data(), pool_bytes, 3, 0xffffffffu, 0);
          fill_int4_params<<<4096, 128>>>(static_cast<std::byte*>(pool.data()),
                                          num_blocks * sh.kv_heads, layout);
          S4KV_CUDA_CHECK(cudaGetLastError());
          rows.emplace(pc.seqs + 1, n, B, ring, kv_dim);
        } else {
          const int64_t bytes = num_blocks * B * kv_dim * (fp8 ? 1 : 2);
          kc = DeviceBuffer(static_cast<size_t>(bytes));
          vc = DeviceBuffer(static_cast<size_t>(bytes));
          for (DeviceBuffer* b : {&kc, &vc}) {
            if (fp8) {
              fill(b->data(), bytes, b == &kc ? 3 : 4, 0x37373737u, 0);  // never 0x7f / 0xff
            } else {
              fill(b->data(), bytes, b == &kc ? 3 : 4, 0x807f807fu, 0x3f803f80u);  // bf16 +-[1, 2)
            }
          }
        }
        DeviceBuffer q(static_cast<size_t>(n * q_stride * 4));
        fill(q.data(), static_cast<int64_t>(q.bytes()), 9, 0x807fffffu, 0x3f000000u);
        const size_t out_elems = static_cast<size_t>(n * sh.heads * kD);
        DeviceBuffer out(out_elems * 2), exact(out_elems * 4);
        const DeviceBatch db(fb);
        DeviceBuffer d_pool_ends = put(pool_ends), d_tiles = put(tiles), d_merges = put(merges);
        DeviceBuffer partials(static_cast<size_t>(prefill_split_partial_floats(sh.heads) * 4));
        const PrefillSplitLaunch sl{static_cast<float*>(partials.data()),
                                    static_cast<const PrefillMerge*>(d_merges.data()),
                                    static_cast<int32_t>(merges.size())};
        const Int4Cache int4_cache{static_cast<const std::byte*>(pool.data()),
                                   &layout,
                                   num_blocks,
                                   int4 ? &*rows : nullptr,
                                   ring,
                                   &d_pool_ends,
                                   int4_v1};
        PagedAttentionArgs at = attention_args(sh, B, cache, db, q, q_stride, out.data(), rope,
                                               int4 ? &int4_cache : nullptr, kc.data(), vc.data());
        // --pool-rows: int4_kivi's pool tiles made once a KV head before the attention (every
        // sequence's), timed with it.
        Int4PoolRows pr;
        DeviceBuffer rows_k, rows_v, d_row_base, d_row_tiles, d_row_seqs;
        if (int4 && pool_rows) {
          plan_int4_pool_rows(fb, tiles, pool_ends, num_blocks, B, INT32_MAX, pr);
          rows_k = DeviceBuffer(static_cast<size_t>(std::max<int64_t>(1, pr.rows * kv_dim * 2)));
          rows_v = DeviceBuffer(rows_k.bytes());
          d_row_base = put(pr.base);
          d_row_tiles = put(pr.tiles);
          d_row_seqs = put(pr.seqs);
          at.pool_rows_k = static_cast<uint16_t*>(rows_k.data());
          at.pool_rows_v = static_cast<uint16_t*>(rows_v.data());
          at.pool_row_base = static_cast<const int32_t*>(d_row_base.data());
          at.pool_row_tiles = static_cast<const int32_t*>(d_row_tiles.data());
        }
        const auto* tiles_dev = static_cast<const PrefillTile*>(d_tiles.data());
        const auto num_tiles = static_cast<int32_t>(tiles.size());
        auto fast = [&] {
          if (at.pool_row_base != nullptr) {
            launch_int4_pool_rows(at, static_cast<const int32_t*>(d_row_seqs.data()),
                                  static_cast<int32_t>(pr.seqs.size()), pr.max_tiles, nullptr);
          }
          launch_prefill_attention(at, tiles_dev, num_tiles, nullptr, &sl);
        };
        auto slow = [&] { launch_paged_attention(at, nullptr); };

        // Check: every row against the reference in fp32.
        fast();
        PagedAttentionArgs r = at;
        r.out = exact.data();
        r.out_dtype = DType::kF32;
        launch_paged_attention(r, nullptr);
        S4KV_CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<float> e(out_elems);
        exact.copy_to_host(e.data(), out_elems * 4);
        const double check = max_rel_l2(widen_bf16(out, out_elems), e);

        const Result t = time_it(fast, reps);
        Result ref{0, 0, 0};
        if (reference) ref = time_it(slow, std::max(1, reps / 5));
        const double flops = 4.0 * kD * sh.heads * work;
        const double tflops = flops / (t.us_median * 1e6);
        const double ref_tflops = ref.us_median > 0 ? flops / (ref.us_median * 1e6) : 0.0;
        std::printf(
            "%s    {\"format\": \"%s\", \"heads\": %d, \"kv_heads\": %d, \"case\": \"%s\", "
            "\"seqs\": %d, \"q_len\": %d, \"context\": %d, \"tiles\": %d, \"split_tiles\": %d, "
            "\"us\": %.2f, "
            "\"us_min\": %.2f, \"us_max\": %.2f, \"tflops\": %.2f, \"reference_us\": %.2f, "
            "\"reference_tflops\": %.3f, \"speedup\": %.1f, \"check_rel_l2\": %.3g, "
            "\"pool_rows\": %lld}",
            first_row ? "" : ",\n", fmt.c_str(), sh.heads, sh.kv_heads, pc.name.c_str(), pc.seqs,
            pc.q_len, pc.context, num_tiles, static_cast<int>(merges.size()), t.us_median, t.us_min,
            t.us_max, tflops, ref.us_median, ref_tflops,
            ref.us_median > 0 ? ref.us_median / t.us_median : 0.0, check,
            static_cast<long long>(pr.rows));
        std::fflush(stdout);
        std::fprintf(stderr,
                     "prefill %-5s %2d/%d %-10s: %10.1f us %7.1f TFLOP/s (%d tiles, %d split%s) "
                     "| reference %11.1f us %6.2f TFLOP/s | check rel L2 %.3g%s\n",
                     fmt.c_str(), sh.heads, sh.kv_heads, pc.name.c_str(), t.us_median, tflops,
                     num_tiles, static_cast<int>(merges.size()), pr.rows > 0 ? ", pool rows" : "",
                     ref.us_median, ref_tflops, check, check <= 2e-2 ? "" : "  FAILED (> 2e-2)");
        first_row = false;
      }
    }
  }
  std::printf("\n  ]\n}\n");
  return 0;
}

}  // namespace s4kv::backend::cuda
