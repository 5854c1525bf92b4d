// The CUDA KV cache kernels against the CPU caches, on the same bytes: for every KV dtype, block
// size and Gv (int4_kivi v1 and v2), a scenario of steps (chunked prefills of odd sizes,
// decodes, a prefix-cache hit that starts from another sequence's full blocks, a preemption
// recomputed into a fresh residual slot) runs on a CPU cache (cpu_kv_cache.h); at each step the
// CPU cache's arrays are loaded into device memory and
//   - kv_write on the device stores exactly the CPU's bytes (paged 16-bit / fp8 rows, int4
//     staging);
//   - paged attention on the device equals context_attention_ref over the CPU's gather, per
//     query row within 1e-5 relative L2 (fp32 either way: exp and summation order differ;
//     measured <= 2.2e-6);
//   - the tensor-core decode kernels (decode_attention.cuh: the q_len 1 rows, split over many
//     items so that the merge runs) equal it within 16-bit tolerance: relative L2 per row
//     <= 4e-3 with fp16 operands (fp8), <= 2e-2 where bf16 operands take part (the 16-bit
//     cache; int4_kivi's 16-bit sink, window and tail beside its fp16 pool arithmetic: bf16
//     keeps 8 bits, measured 1.2e-2); an indexing slip shows as O(1);
//   - the int4_kivi commit (gather_fills -> quantize -> residual_write) leaves exactly the CPU
//     commit's pool, residual ring and sink bytes: 0 differing bytes.
// cache_emulation_test builds this file with every kernel run on the CPU (backend/cuda/
// emulation.h), on every machine.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/cpu_kv_cache.h"
#include "backend/cpu/rope.h"
#include "backend/cuda/decode_attention.cuh"
#include "backend/cuda/device.h"
#include "backend/cuda/forward_kernels.cuh"
#include "backend/cuda/int4_kivi_cache.cuh"
#include "backend/cuda/paged_attention.cuh"
#include "backend/forward_batch_builder.h"
#include "backend/rope_table.h"

namespace s4kv::backend::cuda {
namespace {

constexpr int64_t kD = 128, kKvHeads = 2, kHeads = 6, kKvDim = kKvHeads * kD;
constexpr int64_t kMaxLen = 512;
constexpr int kNumSeqs = 4;

struct Format {
  const char* name;
  kv::KvCacheDtype dtype;
  int64_t block_size;
  int64_t gv = 128;
  bool v2 = false;
};

constexpr Format kFormats[] = {
    {"16bit_b16", kv::KvCacheDtype::k16Bit, 16},
    {"16bit_b128", kv::KvCacheDtype::k16Bit, 128},
    {"fp8_b32", kv::KvCacheDtype::kFp8E4M3, 32},
    {"fp8_b64", kv::KvCacheDtype::kFp8E4M3, 64},
    {"int4_v2_b32_gv32", kv::KvCacheDtype::kInt4Kivi, 32, 32, true},
    {"int4_v2_b64_gv128", kv::KvCacheDtype::kInt4Kivi, 64, 128, true},
    {"int4_v2_b128_gv64", kv::KvCacheDtype::kInt4Kivi, 128, 64, true},
    {"int4_v1_b32_gv64", kv::KvCacheDtype::kInt4Kivi, 32, 64, false},
    {"int4_v1_b64_gv128", kv::KvCacheDtype::kInt4Kivi, 64, 128, false},
    {"int4_v1_b128_gv32", kv::KvCacheDtype::kInt4Kivi, 128, 32, false},
};

// A device copy of a host array; freed with the test.
class Dev {
 public:
  template <typename T>
  T* put(const T* data, size_t n) {
    bufs_.emplace_back(std::max<size_t>(n * sizeof(T), 16));
    if (n > 0) bufs_.back().copy_from_host(data, n * sizeof(T));
    return static_cast<T*>(bufs_.back().data());
  }
  template <typename T>
  T* put(std::span<const T> s) {
    return put(s.data(), s.size());
  }
  template <typename T>
  T* zeros(size_t n) {
    std::vector<T> z(n);
    return put(z.data(), n);
  }

 private:
  std::vector<DeviceBuffer> bufs_;
};

template <typename T>
std::vector<std::byte> download(const T* dev, size_t bytes) {
  std::vector<std::byte> out(bytes);
  if (bytes > 0) {
    EXPECT_EQ(cudaMemcpy(out.data(), dev, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  return out;
}

int64_t differing(std::span<const std::byte> a, const std::vector<std::byte>& b) {
  EXPECT_EQ(a.size(), b.size());
  int64_t n = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) n += a[i] != b[i];
  return n;
}

// Relative L2 distance of row r (kD values) of got from ref (NaN where got was never written).
double row_rel_l2(const std::vector<float>& got, const std::vector<float>& ref, int64_t r) {
  double num = 0, den = 0;
  for (int64_t c = 0; c < kD; ++c) {
    const double a = got[static_cast<size_t>(r * kD + c)];
    const double b = ref[static_cast<size_t>(r * kD + c)];
    num += (a - b) * (a - b);
    den += b * b;
  }
  return std::sqrt(num / den);
}

struct Seq {
  std::vector<float> k, v;  // [len, kKvDim] fp32, keys after RoPE
  std::vector<int32_t> table;
  int64_t computed = 0;
  int32_t slot = 0;
  int64_t seat_start = 0;
};

class CudaAttention : public ::testing::TestWithParam<Format> {};

TEST_P(CudaAttention, WriteAttentionAndCommitMatchTheCpuCache) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Format f = GetParam();
  const int64_t B = f.block_size;
  const bool int4 = f.dtype == kv::KvCacheDtype::kInt4Kivi;
  const int64_t blocks_per_seq = kMaxLen / B + 1;
  KvCacheConfig kv;
  kv.num_blocks = (kNumSeqs + 1) * blocks_per_seq;
  kv.block_size = B;
  kv.dtype = f.dtype;
  if (int4) {
    kv.num_seats = kNumSeqs + 2;
    kv.value_group_size = f.gv;
    if (f.v2) {
      kv.num_sink_blocks = kNumSeqs + 1;
      kv.num_window_blocks = 1;
      kv.int4_value_hadamard = true;
    }
  }
  const auto inv_freq = cpu::rope_inv_freq(kD, 10000.0, model::RopeScaling{});
  auto made = cpu::make_cpu_kv_cache(kv, {1, kKvHeads, kD, DType::kBF16}, inv_freq);
  ASSERT_TRUE(made.is_ok()) << made.status().message();
  cpu::CpuKvCache& cache = **made;
  RopeTable rope(inv_freq);
  rope.ensure(kMaxLen);
  Dev fixed;
  const float* cos = fixed.put(rope.cos_table());
  const float* sin = fixed.put(rope.sin_table());
  const uint32_t* rotations = int4 ? fixed.put(std::span<const uint32_t>(int4_rotation_image(
                                         rope.cos_table(), rope.sin_table(), static_cast<int>(B))))
                                   : nullptr;
  kv::Int4KiviLayout layout;
  if (int4) layout = *kv::Int4KiviLayout::create(static_cast<int>(B), kD, static_cast<int>(f.gv));

  // Sequences: keys with a per-channel offset (a k_proj bias) and zero / constant channels,
  // rotated as kv_write receives them; a few outliers.
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<Seq> seqs(kNumSeqs);
  const int64_t lens[kNumSeqs] = {333, 190, 77, 401};
  for (int i = 0; i < kNumSeqs; ++i) {
    Seq& s = seqs[static_cast<size_t>(i)];
    const int64_t n = lens[i];
    s.k.resize(static_cast<size_t>(n * kKvDim));
    s.v.resize(s.k.size());
    for (size_t j = 0; j < s.k.size(); ++j) {
      const auto c = static_cast<int64_t>(j % kD);
      s.k[j] = c == 5    ? 0.0f
               : c == 9  ? -0.0f
               : c == 17 ? 1.5f
                         : 2.0f * dist(rng) + static_cast<float>(c % 7) - 3;
      s.v[j] = c == 33 ? 0.25f : dist(rng);
      if (j % 997 == 0) s.v[j] *= 40.0f;
    }
    std::vector<int32_t> pos(static_cast<size_t>(n));
    std::iota(pos.begin(), pos.end(), 0);
    cpu::rope_ref(s.k, kKvDim, kKvHeads, kD, pos, inv_freq);
    for (int64_t b = 0; b < blocks_per_seq; ++b) {
      s.table.push_back(static_cast<int32_t>(i * blocks_per_seq + b));
    }
    if (int4 && f.v2) s.table[0] = static_cast<int32_t>(kv.num_blocks + i);
    s.slot = i;
  }
  // Sequence 3 repeats sequence 0's first 2 blocks (a prefix-cache hit once 0 has them).
  std::copy_n(seqs[0].k.begin(), 2 * B * kKvDim, seqs[3].k.begin());
  std::copy_n(seqs[0].v.begin(), 2 * B * kKvDim, seqs[3].v.begin());

  DecodeShape shape;
  shape.cache = f.dtype;
  shape.block_size = static_cast<int>(B);
  shape.num_pool_blocks = kv.num_blocks;
  shape.ring = 1 + static_cast<int>(kv.num_window_blocks);
  shape.num_kv_heads = static_cast<int>(kKvHeads);
  shape.num_sms = 64;  // items of the shortest length: every sequence splits
  ForwardBatchBuilder builder(B, blocks_per_seq);
  std::uniform_int_distribution<int64_t> chunk(1, 90);
  double max_rel = 0, max_rel_decode = 0;
  int64_t steps = 0, commits = 0, decode_rows = 0;
  for (int step = 1;; ++step) {
    builder.clear();
    std::vector<float> k, v;
    const int64_t seq0_computed = seqs[0].computed;
    for (int i = 0; i < kNumSeqs; ++i) {
      Seq& s = seqs[static_cast<size_t>(i)];
      if (i == 3 && s.computed == 0) {
        if (seq0_computed < 2 * B) continue;
        std::copy_n(seqs[0].table.begin(), 2, s.table.begin());
        s.computed = s.seat_start = 2 * B;
      }
      if (i == 1 && step == 5) {  // preempted: recomputed into a fresh slot
        s.computed = s.seat_start = 0;
        s.slot = kNumSeqs + 1;
      }
      const int64_t n = lens[i];
      if (s.computed >= n) continue;
      const int64_t q = s.computed < n - 30 ? std::min(chunk(rng), n - 30 - s.computed) : 1;
      std::vector<int32_t> tokens(static_cast<size_t>(q), 0);
      builder.add(tokens, s.computed, std::span(s.table).first((s.computed + q + B - 1) / B),
                  int4 ? s.slot : -1, s.seat_start);
      k.insert(k.end(), s.k.begin() + s.computed * kKvDim, s.k.begin() + (s.computed + q) * kKvDim);
      v.insert(v.end(), s.v.begin() + s.computed * kKvDim, s.v.begin() + (s.computed + q) * kKvDim);
      s.computed += q;
    }
    if (builder.num_tokens() == 0) break;
    ++steps;
    const ForwardBatch batch = builder.batch();
    const int64_t n = batch.num_tokens();
    SCOPED_TRACE("step " + std::to_string(step));
    cache.begin_step(batch);

    // kv_write: the device from the pre-write bytes, against the CPU's write.
    Dev d;
    const cpu::KvStorageView pre = cache.storage(0);
    void* dk = int4 ? d.zeros<uint16_t>(static_cast<size_t>(n * kKvDim))
                    : static_cast<void*>(d.put(pre.k));
    void* dv = int4 ? d.zeros<uint16_t>(static_cast<size_t>(n * kKvDim))
                    : static_cast<void*>(d.put(pre.v));
    const float* k_dev = d.put(std::span<const float>(k));
    const float* v_dev = d.put(std::span<const float>(v));
    KvWriteArgs wr;
    wr.k = k_dev;
    wr.v = v_dev;
    wr.row_stride = kKvDim;
    wr.slot_mapping = int4 ? nullptr : d.put(batch.slot_mapping);
    wr.k_cache = dk;
    wr.v_cache = dv;
    wr.cache_dtype = f.dtype == kv::KvCacheDtype::kFp8E4M3 ? DType::kF8E4M3 : DType::kBF16;
    wr.num_tokens = n;
    wr.kv_dim = kKvDim;
    launch_kv_write(wr, nullptr);
    cache.write(0, batch, k, v, kKvDim);
    const cpu::KvStorageView written = cache.storage(0);
    const auto kw = int4 ? written.staging_k.first(static_cast<size_t>(n * kKvDim * 2)) : written.k;
    const auto vw = int4 ? written.staging_v.first(static_cast<size_t>(n * kKvDim * 2)) : written.v;
    ASSERT_EQ(differing(kw, download(dk, kw.size())), 0) << "kv_write keys";
    ASSERT_EQ(differing(vw, download(dv, vw.size())), 0) << "kv_write values";

    // Attention over the written state.
    std::vector<int32_t> token_seq(static_cast<size_t>(n));
    for (int64_t s = 0; s < batch.num_seqs(); ++s) {
      for (int32_t t = batch.query_start_loc[s]; t < batch.query_start_loc[s + 1]; ++t) {
        token_seq[static_cast<size_t>(t)] = static_cast<int32_t>(s);
      }
    }
    std::vector<float> q(static_cast<size_t>(n * kHeads * kD)), ref(q.size()), got(q.size());
    for (auto& x : q) x = dist(rng);
    const cpu::AttentionArgs ca{q,
                                kHeads * kD,
                                kHeads,
                                kKvHeads,
                                kD,
                                1.0f / std::sqrt(float{kD}),
                                batch.query_start_loc,
                                batch.seq_lens,
                                ref};
    cpu::context_attention_ref(
        ca,
        [&](int64_t s, int64_t g, int64_t b, int64_t e, float* kk, float* vv) {
          return cache.gather_range(0, batch, s, g, b, e, kk, vv);
        },
        nullptr);
    PagedAttentionArgs at;
    at.q = d.put(std::span<const float>(q));
    at.q_stride = kHeads * kD;
    at.out = d.zeros<float>(q.size());
    at.out_dtype = DType::kF32;
    at.num_tokens = n;
    at.num_heads = kHeads;
    at.num_kv_heads = kKvHeads;
    at.block_size = static_cast<int>(B);
    at.scale = ca.scale;
    at.token_seq = d.put(std::span<const int32_t>(token_seq));
    at.positions = d.put(batch.positions);
    at.query_start_loc = d.put(batch.query_start_loc);
    at.seq_lens = d.put(batch.seq_lens);
    at.block_tables = d.put(batch.block_tables);
    at.max_blocks_per_seq = batch.max_num_blocks_per_seq;
    at.cache = f.dtype;
    at.bf16 = true;
    std::byte* pool = nullptr;
    if (int4) {
      pool = d.put(written.pool);
      at.pool = pool;
      at.layout = layout;
      at.num_pool_blocks = kv.num_blocks;
      // The rings are in the pool's memory (cpu_kv_cache.h's KvStorageView).
      at.residual =
          reinterpret_cast<const uint16_t*>(pool + (written.residual.data() - written.pool.data()));
      at.seat_stride = written.seat_stride / 2;
      at.ring = 1 + static_cast<int>(kv.num_window_blocks);
      at.sink = d.put(std::span<const uint16_t>(
          reinterpret_cast<const uint16_t*>(written.sink.data()), written.sink.size() / 2));
      at.staging_k = static_cast<const uint16_t*>(dk);
      at.staging_v = static_cast<const uint16_t*>(dv);
      at.seats = d.put(batch.seats);
      at.seat_starts = d.put(batch.seat_starts);
      DecodePlan ref_plan;
      plan_attention(batch, shape, false, ref_plan);
      at.pool_ends = d.put(std::span<const int32_t>(ref_plan.pool_ends));
      at.rope_cos = cos;
      at.rope_sin = sin;
      at.int4_rotations = rotations;
      at.value_hadamard = kv.int4_value_hadamard;
    } else {
      at.k_cache = dk;
      at.v_cache = dv;
    }
    launch_paged_attention(at, nullptr);
    ASSERT_EQ(cudaMemcpy(got.data(), at.out, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int64_t r = 0; r < n * kHeads; ++r) {
      const double rel = row_rel_l2(got, ref, r);
      max_rel = std::max(max_rel, rel);
      ASSERT_LE(rel, 1e-5) << "token " << r / kHeads << " head " << r % kHeads;
    }

    // The decode kernels on the q_len 1 rows (the rest through the reference kernel again).
    DecodePlan dplan;
    plan_attention(batch, shape, true, dplan);
    if (const DecodePlan& plan = dplan; !plan.seqs.empty()) {
      std::vector<float> fast(q.size(), std::nanf(""));
      at.out = d.put(std::span<const float>(fast));
      at.token_list = d.put(std::span<const int32_t>(plan.other_tokens));
      at.num_listed = static_cast<int64_t>(plan.other_tokens.size());
      launch_paged_attention(at, nullptr);
      DecodeLaunch dl;
      dl.items = d.put(std::span<const DecodeItem>(plan.items));
      dl.num_items = static_cast<int32_t>(plan.items.size());
      dl.num_int4_items = plan.num_int4_items;
      dl.seqs = d.put(std::span<const DecodeSeq>(plan.seqs));
      dl.num_seqs = static_cast<int32_t>(plan.seqs.size());
      dl.partials = d.zeros<float>(plan.items.size() * kHeads * kDecodePartialFloats);
      launch_decode_attention(at, dl, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(fast.data(), at.out, fast.size() * 4, cudaMemcpyDeviceToHost),
                cudaSuccess);
      const double bound = f.dtype == kv::KvCacheDtype::kFp8E4M3 ? 4e-3 : 2e-2;
      std::vector<bool> is_decode(static_cast<size_t>(n), false);
      for (const DecodeSeq& ds : plan.seqs) is_decode[static_cast<size_t>(ds.token)] = true;
      for (int64_t r = 0; r < n * kHeads; ++r) {
        const double rel = row_rel_l2(fast, ref, r);  // NaN (never written) fails
        const bool dec = is_decode[static_cast<size_t>(r / kHeads)];
        ASSERT_LE(rel, dec ? bound : 1e-5)
            << "token " << r / kHeads << " head " << r % kHeads
            << (dec ? " (decode kernels)" : " (reference)") << " relative L2 " << rel;
        if (dec) max_rel_decode = std::max(max_rel_decode, rel);
      }
      decode_rows += static_cast<int64_t>(plan.seqs.size());

      // The merge fused into the item kernels: the merge kernel's rows within fp32 rounding
      // (the weights' sums in another order), every group's count back at zero.
      std::vector<float> fused(q.size(), std::nanf(""));
      at.out = d.put(std::span<const float>(fused));
      launch_paged_attention(at, nullptr);
      dl.partials = d.zeros<float>(plan.items.size() * kHeads * kDecodePartialFloats);
      dl.merge_counts = d.zeros<int32_t>(plan.seqs.size() * kKvHeads);
      launch_decode_attention(at, dl, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(fused.data(), at.out, fused.size() * 4, cudaMemcpyDeviceToHost),
                cudaSuccess);
      std::vector<int32_t> counts(plan.seqs.size() * kKvHeads, -1);
      ASSERT_EQ(
          cudaMemcpy(counts.data(), dl.merge_counts, counts.size() * 4, cudaMemcpyDeviceToHost),
          cudaSuccess);
      for (const int32_t c : counts) ASSERT_EQ(c, 0) << "a group's merge count left over";
      for (int64_t r = 0; r < n * kHeads; ++r) {
        const double rel = row_rel_l2(fused, fast, r);
        ASSERT_LE(rel, 1e-5) << "token " << r / kHeads << " head " << r % kHeads
                             << ": the fused merge against the merge kernel, relative L2 " << rel;
      }
    }

    // kv_commit.
    cache.commit(0, batch, nullptr);
    if (!int4) continue;
    Int4FillPlan plan;
    plan_int4_fills(batch, kv.num_blocks, B, kKvHeads, plan);
    commits += plan.num_quantized;
    const size_t scratch =
        static_cast<size_t>(std::max<int64_t>(plan.num_quantized, 1) * kKvHeads * B * kD);
    uint16_t* sk = d.zeros<uint16_t>(scratch);
    uint16_t* sv = d.zeros<uint16_t>(scratch);
    Int4CommitStep st;
    st.fills = d.put(std::span<const Int4FillBlock>(plan.fills));
    st.num_fills = static_cast<int64_t>(plan.fills.size());
    st.first_position = d.put(std::span<const int32_t>(plan.first_position));
    st.out_index = d.put(std::span<const int64_t>(plan.out_index));
    st.num_quantized = plan.num_quantized;
    st.scratch_k = sk;
    st.scratch_v = sv;
    st.pool = pool;
    st.layout = layout;
    st.cos = cos;
    st.sin = sin;
    st.num_positions = kMaxLen;
    st.value_hadamard = kv.int4_value_hadamard;
    launch_int4_kivi_commit_step(st, int4_cache_batch(at), int4_cache_layer(at), nullptr);
    const cpu::KvStorageView post = cache.storage(0);
    ASSERT_EQ(differing(post.pool, download(pool, post.pool.size())), 0) << "pool bytes";
    ASSERT_EQ(differing(post.residual, download(at.residual, post.residual.size())), 0)
        << "residual bytes";
    ASSERT_EQ(differing(post.sink, download(at.sink, post.sink.size())), 0) << "sink bytes";
  }
  std::printf(
      "[ cuda att ] %-18s %3lld steps  attention max rel L2 %.2e  decode kernels %.2e over %lld "
      "rows  int4 blocks committed %lld, 0 differing bytes\n",
      f.name, static_cast<long long>(steps), max_rel, max_rel_decode,
      static_cast<long long>(decode_rows), static_cast<long long>(commits));
  EXPECT_GT(decode_rows, 0);
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaAttention, ::testing::ValuesIn(kFormats),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace s4kv::backend::cuda
