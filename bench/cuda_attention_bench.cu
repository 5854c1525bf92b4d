// Decode attention on the GPU, every KV format: a batch x context grid of q_len 1 rows over a
// paged cache, timed with CUDA events (median of --reps launches after warm-up; "us" launched
// one by one from the host, "us_graph" replayed from a CUDA graph as the server's decode steps
// run, so without the host's launch gaps between the kernels), with the bytes
// each launch must read and the device-to-device copy bandwidth measured in the same run.
// bench/attention_bench.py runs this program and times torch SDPA (fp16, contiguous) on the
// same shapes as the outside anchor.
//
//   cuda_attention_bench [--heads 28/4,32/8] [--batches 1,4,16,64,256]
//       [--contexts 1024,8192,32768,131072] [--max-tokens 2097152] [--reps 20]
//       [--formats 16bit,fp8,int4] [--reference] [--block-size 64] [--value-group-size 128]
//       [--int4-v1] [--check-only] [--fused-merge] [--timeline] [--resident-bytes N]
//       > results.json
// --int4-v1: int4_kivi without sink block, window and Hadamard (v2 otherwise); --check-only:
// the correctness check of every (format, shape), no timing (tools/device_attention.sh check);
// --fused-merge: each shape also with the merge fused into the item kernels
// (DecodeLaunch::merge_counts, S4KV_DECODE_MERGE=fused), checked and timed in the same run
// ("us_fused", "pct_copy_fused", "check_fused_rel_l2"); --timeline (a build with
// -DS4KV_DECODE_TIMELINE): each shape's launch also recorded block by block, from the host and
// from a graph ("timeline", cuda_timeline.cuh); --timeline-csv DIR: the records too, a CSV file
// a shape and way in DIR. --resident-bytes N: the block tables walk over only the pool blocks
// of the first N bytes of each format's pool (16-bit and fp8: of K and V together), e.g.
// 16777216, which stay in L2: the kernels then read at the rate their multiprocessors reach
// rather than the memory's, which "pct_copy" compares with the copy bandwidth of the device
// memory. On an H100 that rate is the ceiling an H200 would see (the same multiprocessors and
// clock, 1.4x the memory bandwidth): the multiprocessors' limit (issue slots, shared memory),
// timed without an H200.
//
//   cuda_attention_bench --prefill [...]: prefill attention instead (cuda_prefill_bench.cu has
//   its options): the tensor-core prefill kernels against the reference kernel.
//
// Caches hold random values (no NaN) in a pool of blocks shared by all sequences: each
// sequence's block table is a random walk over the pool, which is far larger than L2, so the
// bytes come from device memory as they would from distinct sequences (unless
// --resident-bytes).
#include <cuda_runtime.h>

#include <algorithm>
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
#include "backend/cuda/decode_attention.cuh"
#include "backend/cuda/device.h"
#include "backend/cuda/paged_attention.cuh"
#include "backend/forward_batch_builder.h"
#include "cuda_bench_util.cuh"
#include "cuda_timeline.cuh"
#include "kv/int4_kivi_layout.h"

namespace s4kv::backend::cuda {
namespace {

int run(int argc, char** argv) {
  CacheFlags flags;
  std::vector<int> batches = {1, 4, 16, 64, 256};
  std::vector<int> contexts = {1024, 8192, 32768, 131072};
  int64_t max_tokens = int64_t{1} << 21;
  int reps = 20;
  int64_t resident_bytes = 0;  // 0: the whole pool
  bool reference = false, check_only = false, fused_merge = false, timeline = false;
  std::string timeline_dir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (flags.parse(a, next)) {
      continue;
    } else if (a == "--batches") {
      batches = parse_list(next());
    } else if (a == "--contexts") {
      contexts = parse_list(next());
    } else if (a == "--max-tokens") {
      max_tokens = std::atoll(next().c_str());
    } else if (a == "--reps") {
      reps = std::atoi(next().c_str());
    } else if (a == "--resident-bytes") {
      resident_bytes = std::atoll(next().c_str());
      if (resident_bytes <= 0) {
        std::fprintf(stderr, "--resident-bytes: a positive byte count\n");
        return 2;
      }
    } else if (a == "--reference") {
      reference = true;
    } else if (a == "--check-only") {
      check_only = true;
    } else if (a == "--fused-merge") {
      fused_merge = true;
    } else if (a == "--timeline" || a == "--timeline-csv") {
      timeline = true;
      if (a == "--timeline-csv") timeline_dir = next();
      if (!kTimelineBuilt) {
        std::fprintf(stderr, "--timeline: this build records none (nvcc -DS4KV_DECODE_TIMELINE)\n");
        return 2;
      }
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
  const int num_sms = device_sm_count();
  const int ring = int4_v1 ? 1 : 2;
  // The backend's fork: int4_kivi's row items beside its int4 items.
  DecodeFork fork;
  S4KV_CUDA_CHECK(cudaStreamCreateWithFlags(&fork.side, cudaStreamNonBlocking));
  S4KV_CUDA_CHECK(cudaEventCreateWithFlags(&fork.fork, cudaEventDisableTiming));
  S4KV_CUDA_CHECK(cudaEventCreateWithFlags(&fork.join, cudaEventDisableTiming));

  // Copy bandwidth: 2 GiB device to device, bytes read plus written.
  double copy_gbps = 0;
  {
    const size_t n = size_t{2} << 30;
    DeviceBuffer src(n), dst(n);
    fill(src.data(), static_cast<int64_t>(n), 1, 0xffffffffu, 0);
    const Result r = time_it(
        [&] {
          S4KV_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), n, cudaMemcpyDeviceToDevice));
        },
        reps);
    copy_gbps = 2.0 * static_cast<double>(n) / (r.us_median * 1e3);
  }

  // Pools: 12 GiB of 16-bit blocks (fp8 and int4 use their share of it).
  const int64_t pool_bytes = int64_t{12} << 30;
  DeviceBuffer pool(static_cast<size_t>(pool_bytes));
  const DeviceRope rope(*std::max_element(contexts.begin(), contexts.end()) + B, B);

  std::printf(
      "{\n  \"gpu\": \"%s\",\n  \"copy_gbps\": %.1f,\n  \"block_size\": %d,\n"
      "  \"int4_value_group_size\": %d,\n  \"int4_copy\": \"%s\",\n  \"resident_bytes\": %lld,\n"
      "  \"rows\": [\n",
      device_description().c_str(), copy_gbps, B, Gv,
      decode_int4_bulk_copies() ? "bulk tensor copy" : "cp.async",
      static_cast<long long>(resident_bytes));
  bool first_row = true;
  std::mt19937 rng(7);
  for (const Shape& sh : shapes) {
    const int64_t kv_dim = int64_t{sh.kv_heads} * kD;
    for (const std::string& fmt : formats) {
      const bool int4 = fmt == "int4", fp8 = fmt == "fp8";
      // Pool geometry for this format and head count.
      const int64_t block_bytes = int4 ? sh.kv_heads * static_cast<int64_t>(layout.block_bytes)
                                       : B * kv_dim * (fp8 ? 1 : 2);
      // 16-bit and fp8 keep K and V in the pool's two halves, a block id in each.
      const int64_t parts = int4 ? 1 : 2;
      const int64_t num_blocks = pool_bytes / parts / block_bytes - 1;
      // The blocks the tables walk over: all, or those of the first resident_bytes.
      const int64_t walk_blocks =
          resident_bytes > 0
              ? std::clamp<int64_t>(resident_bytes / parts / block_bytes, 1, num_blocks)
              : num_blocks;
      auto* base = static_cast<std::byte*>(pool.data());
      if (int4) {
        fill(base, pool_bytes, 3, 0xffffffffu, 0);
        fill_int4_params<<<4096, 128>>>(base, num_blocks * sh.kv_heads, layout);
        S4KV_CUDA_CHECK(cudaGetLastError());
      } else if (fp8) {
        fill(base, pool_bytes, 3, 0x37373737u, 0);  // no 0x7f / 0xff: never NaN
      } else {
        fill(base, pool_bytes, 3, 0x807f807fu, 0x3f803f80u);  // bf16 in (-2, 2)
      }
      // int4_kivi's 16-bit parts beside the pool: sink blocks, residual rings, staging.
      const int max_batch = *std::max_element(batches.begin(), batches.end());
      std::optional<Int4Rows> rows;
      if (int4) rows.emplace(max_batch + 1, max_batch, B, ring, kv_dim);
      for (int batch : batches) {
        for (int ctx : contexts) {
          if (int64_t{batch} * ctx > max_tokens) continue;
          // The batch: one decode token per sequence at position ctx - 1.
          const ForwardBatchBuilder built =
              walk_batch(batch, 1, ctx, B, walk_blocks, num_blocks, int4, int4_v1, rng);
          const ForwardBatch fb = built.batch();
          DecodeShape ds;
          ds.cache = int4  ? kv::KvCacheDtype::kInt4Kivi
                     : fp8 ? kv::KvCacheDtype::kFp8E4M3
                           : kv::KvCacheDtype::k16Bit;
          ds.block_size = B;
          ds.num_pool_blocks = num_blocks;
          ds.ring = int4 ? ring : 1;
          ds.num_kv_heads = sh.kv_heads;
          ds.num_sms = num_sms;
          ds.blocks_per_sm = decode_blocks_per_sm(ds.cache, B, int4 ? Gv : 128);
          DecodePlan plan;
          plan_attention(fb, ds, true, plan);

          const DeviceBatch db(fb);
          DeviceBuffer d_items = put(plan.items), d_seqs = put(plan.seqs),
                       d_pool_ends = put(plan.pool_ends);
          DeviceBuffer q(static_cast<size_t>(batch) * sh.heads * kD * 4);
          DeviceBuffer out(static_cast<size_t>(batch) * sh.heads * kD * 2);
          fill(q.data(), static_cast<int64_t>(q.bytes()), 9, 0x807fffffu, 0x3f000000u);
          DeviceBuffer partials(static_cast<size_t>(std::max<size_t>(plan.items.size(), 1)) *
                                sh.heads * kDecodePartialFloats * 4);
          const Int4Cache int4_cache{base, &layout,      num_blocks, int4 ? &*rows : nullptr,
                                     ring, &d_pool_ends, int4_v1};
          const PagedAttentionArgs at =
              attention_args(sh, B, ds.cache, db, q, int64_t{sh.heads} * kD, out.data(), rope,
                             int4 ? &int4_cache : nullptr, base, base + pool_bytes / 2);
          DecodeLaunch dl;
          dl.items = static_cast<const DecodeItem*>(d_items.data());
          dl.num_items = static_cast<int32_t>(plan.items.size());
          dl.num_int4_items = plan.num_int4_items;
          dl.seqs = static_cast<const DecodeSeq*>(d_seqs.data());
          dl.num_seqs = static_cast<int32_t>(plan.seqs.size());
          dl.partials = static_cast<float*>(partials.data());
          // The same launch with the merge fused into the item kernels (counts zero between
          // launches: each group's last block sets its count back).
          DeviceBuffer counts(std::max<size_t>(plan.seqs.size() * sh.kv_heads * 4, 16));
          S4KV_CUDA_CHECK(cudaMemset(counts.data(), 0, counts.bytes()));
          DecodeLaunch dl_fused = dl;
          dl_fused.merge_counts = static_cast<int32_t*>(counts.data());
          // The first shape of each format: the decode kernels against the reference kernel
          // (fp32 throughout), relative L2 per row.
          auto check_against_reference = [&](const DecodeLaunch& launch) {
            const size_t elems = static_cast<size_t>(batch) * sh.heads * kD;
            DeviceBuffer fast(elems * 4), exact(elems * 4);
            PagedAttentionArgs c = at;
            c.out_dtype = DType::kF32;
            c.out = fast.data();
            launch_decode_attention(c, launch, nullptr, &fork);
            c.out = exact.data();
            launch_paged_attention(c, nullptr);
            std::vector<float> f(elems), e(elems);
            fast.copy_to_host(f.data(), elems * 4);
            exact.copy_to_host(e.data(), elems * 4);
            return max_rel_l2(f, e);
          };
          double check = -1, check_fused = -1;
          if (check_only || (batch == batches.front() && ctx == contexts.front())) {
            check = check_against_reference(dl);
            if (fused_merge) check_fused = check_against_reference(dl_fused);
          }
          const Result r =
              check_only ? Result{0, 0, 0}
                         : time_it([&] { launch_decode_attention(at, dl, nullptr, &fork); }, reps);
          const Result rf =
              check_only || !fused_merge
                  ? Result{0, 0, 0}
                  : time_it([&] { launch_decode_attention(at, dl_fused, nullptr, &fork); }, reps);
          // The same launch replayed from a CUDA graph, as a decode step runs it in the server.
          const Result rg =
              check_only
                  ? Result{0, 0, 0}
                  : time_graph([&](cudaStream_t s) { launch_decode_attention(at, dl, s, &fork); },
                               reps);
          Result ref{0, 0, 0};
          if (reference) {
            ref = time_it([&] { launch_paged_attention(at, nullptr); }, std::max(3, reps / 4));
          }
          // Bytes a launch must read: the KV of every position (int4: pool blocks and the
          // 16-bit parts), the queries, the output written.
          double kv_bytes = 0;
          for (int s = 0; s < batch; ++s) {
            if (int4) {
              const int64_t pool_end = plan.pool_ends[s];
              const int64_t int4_blocks = std::max<int64_t>(0, pool_end - (int4_v1 ? 0 : 1));
              kv_bytes += static_cast<double>(int4_blocks * layout.block_bytes +
                                              (ctx - int4_blocks * B) * kD * 2 * 2);
            } else {
              kv_bytes += static_cast<double>(ctx) * kD * 2 * (fp8 ? 1 : 2);
            }
          }
          kv_bytes *= sh.kv_heads;
          const double bytes = kv_bytes + double(batch) * sh.heads * kD * (4 + 2);
          const double gbps = r.us_median > 0 ? bytes / (r.us_median * 1e3) : 0.0;
          const double gbps_graph = rg.us_median > 0 ? bytes / (rg.us_median * 1e3) : 0.0;
          std::printf(
              "%s    {\"format\": \"%s\", \"heads\": %d, \"kv_heads\": %d, \"batch\": %d, "
              "\"context\": %d, \"items\": %zu, \"int4_items\": %d, \"us\": %.2f, \"us_min\": "
              "%.2f, \"us_max\": %.2f, "
              "\"bytes\": %.0f, \"gbps\": %.1f, \"pct_copy\": %.1f, \"reference_us\": %.2f, "
              "\"check_rel_l2\": %.3g, \"us_graph\": %.2f, \"pct_copy_graph\": %.1f",
              first_row ? "" : ",\n", fmt.c_str(), sh.heads, sh.kv_heads, batch, ctx,
              plan.items.size(), plan.num_int4_items, r.us_median, r.us_min, r.us_max, bytes, gbps,
              100.0 * gbps / copy_gbps, ref.us_median, check, rg.us_median,
              100.0 * gbps_graph / copy_gbps);
          if (fused_merge) {
            const double gf = rf.us_median > 0 ? bytes / (rf.us_median * 1e3) : 0.0;
            std::printf(
                ", \"us_fused\": %.2f, \"pct_copy_fused\": %.1f, \"check_fused_rel_l2\": %.3g",
                rf.us_median, 100.0 * gf / copy_gbps, check_fused);
          }
          if (timeline && !check_only) {
            auto launch = [&](cudaStream_t s) { launch_decode_attention(at, dl, s, &fork); };
            const std::string label = fmt + " " + std::to_string(sh.heads) + "/" +
                                      std::to_string(sh.kv_heads) + " B " + std::to_string(batch) +
                                      " ctx " + std::to_string(ctx);
            const std::vector<TimelineRecord> e = record_timeline(launch, false);
            const std::vector<TimelineRecord> g = record_timeline(launch, true);
            if (!timeline_dir.empty()) {
              const std::string stem = timeline_dir + "/" + fmt + "_" + std::to_string(sh.heads) +
                                       "_" + std::to_string(sh.kv_heads) + "_b" +
                                       std::to_string(batch) + "_c" + std::to_string(ctx);
              write_timeline_csv(e, stem + "_eager.csv");
              write_timeline_csv(g, stem + "_graph.csv");
            }
            const std::string eager = summarize_timeline(e, label);
            const std::string graph = summarize_timeline(g, label + " graph");
            std::string fused = "{}";
            if (fused_merge) {
              fused = summarize_timeline(
                  record_timeline(
                      [&](cudaStream_t s) { launch_decode_attention(at, dl_fused, s, &fork); },
                      false),
                  label + " fused");
            }
            std::printf(", \"timeline\": {\"eager\": %s, \"graph\": %s, \"fused\": %s}",
                        eager.c_str(), graph.c_str(), fused.c_str());
          }
          std::printf("}");
          std::fflush(stdout);
          if (check >= 0) {
            std::fprintf(stderr,
                         "check %s %d/%d B %d ctx %d: max relative L2 vs the reference %.3g\n",
                         fmt.c_str(), sh.heads, sh.kv_heads, batch, ctx, check);
          }
          if (check_fused >= 0) {  // a line of its own: tools/device_attention.sh check counts them
            std::fprintf(stderr,
                         "check %s %d/%d B %d ctx %d, fused merge: max relative L2 vs the "
                         "reference %.3g\n",
                         fmt.c_str(), sh.heads, sh.kv_heads, batch, ctx, check_fused);
          }
          std::fprintf(
              stderr, "%-5s %2d/%d B %3d ctx %6d: %9.2f us  %7.1f GB/s  %5.1f %% of copy%s\n",
              fmt.c_str(), sh.heads, sh.kv_heads, batch, ctx, r.us_median, gbps,
              100.0 * gbps / copy_gbps,
              (std::string(reference ? " ref " + std::to_string(ref.us_median) + " us" : "") +
               (fused_merge ? " fused " + std::to_string(rf.us_median) + " us" : ""))
                  .c_str());
          first_row = false;
        }
      }
    }
  }
  std::printf("\n  ]\n}\n");
  return 0;
}

}  // namespace
}  // namespace s4kv::backend::cuda

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--prefill") return s4kv::backend::cuda::run_prefill(argc, argv);
  }
  return s4kv::backend::cuda::run(argc, argv);
}
