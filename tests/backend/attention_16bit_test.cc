// Attention over a paged 16-bit cache read in place (attention.h, context_attention with a
// Paged16BitRun) against the gather path, on random bf16 and fp16 data: for every instruction
// set, block size (8, 16, 32), head_dim (64, 72, 128), GQA ratio (1, 2, 4, 7) and step shape
// (decode, multi-token steps over more than one query chunk, contexts ending inside a block, a
// one-token context), the output equals context_attention_ref over gather_paged_16bit with the
// scalar kernels bit for bit, and the run's rows are never gathered.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/paged_kv_cache.h"
#include "backend/cpu/thread_pool.h"

namespace s4kv::backend::cpu {
namespace {

std::vector<CpuIsa> isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (cpu_supports(isa)) out.push_back(isa);
  }
  return out;
}

struct Step {
  std::vector<int32_t> q_lens, seq_lens;
};

// One layer of a paged cache with random rows, random block tables, random queries.
struct Case {
  DType dtype;
  int64_t block_size, head_dim, num_kv_heads, group;
  Step step;

  void run() const {
    std::mt19937 rng(static_cast<uint32_t>(block_size * 131 + head_dim * 7 + group));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const auto num_seqs = static_cast<int64_t>(step.seq_lens.size());
    int64_t max_blocks = 0;
    for (int32_t len : step.seq_lens) max_blocks = std::max<int64_t>(max_blocks, len);
    max_blocks = (max_blocks + block_size - 1) / block_size;
    const int64_t num_blocks = num_seqs * max_blocks + 3;
    std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    const std::vector<int32_t> tables(ids.begin(), ids.begin() + num_seqs * max_blocks);

    const int64_t slot_elems = num_kv_heads * head_dim;
    std::vector<uint16_t> k(static_cast<size_t>(num_blocks * block_size * slot_elems));
    std::vector<uint16_t> v(k.size());
    for (auto& x : k) x = kv_encode(normal(rng) * 2.0f, dtype);
    for (auto& x : v) x = kv_encode(normal(rng), dtype);

    std::vector<int32_t> qsl(1, 0);
    for (int32_t q : step.q_lens) qsl.push_back(qsl.back() + q);
    const int64_t num_heads = num_kv_heads * group;
    const int64_t num_tokens = qsl.back();
    std::vector<float> q(static_cast<size_t>(num_tokens * num_heads * head_dim));
    for (auto& x : q) x = normal(rng);

    AttentionArgs a;
    a.q = q;
    a.q_stride = num_heads * head_dim;
    a.num_heads = num_heads;
    a.num_kv_heads = num_kv_heads;
    a.head_dim = head_dim;
    a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    a.query_start_loc = qsl;
    a.seq_lens = step.seq_lens;
    std::atomic<int64_t> gathered{0};
    const KvGatherFn gather = [&](int64_t s, int64_t g, int64_t begin, int64_t end, float* kk,
                                  float* vv) {
      gathered += end - begin;
      gather_paged_16bit(k, v, dtype, block_size, slot_elems, tables.data() + s * max_blocks,
                         g * head_dim, head_dim, begin, end, kk, vv);
      return RotatedValues{};
    };
    const KvInPlaceRunFn in_place = [&](int64_t s, int64_t g) {
      return KvInPlaceRun{.paged16 = {.k = k.data() + g * head_dim,
                                      .v = v.data() + g * head_dim,
                                      .slot_elems = slot_elems,
                                      .block_size = block_size,
                                      .table = tables.data() + s * max_blocks,
                                      .dtype = dtype}};
    };
    const size_t out_size = static_cast<size_t>(num_tokens * num_heads * head_dim);
    std::vector<float> ref(out_size);
    a.out = ref;
    a.isa = CpuIsa::kScalar;
    context_attention_ref(a, gather, nullptr);
    for (float x : ref) ASSERT_TRUE(std::isfinite(x));
    ThreadPool pool(2);
    for (CpuIsa isa : isas()) {
      SCOPED_TRACE(testing::Message() << cpu_isa_name(isa));
      std::vector<float> got(out_size, -1.0f);
      a.out = got;
      a.isa = isa;
      context_attention_ref(a, gather, &pool);  // the gather path: every instruction set
      ASSERT_EQ(std::memcmp(got.data(), ref.data(), out_size * sizeof(float)), 0);
      std::fill(got.begin(), got.end(), -1.0f);
      gathered = 0;
      context_attention(a, gather, in_place, &pool);
      EXPECT_EQ(gathered.load(), 0);
      ASSERT_EQ(std::memcmp(got.data(), ref.data(), out_size * sizeof(float)), 0);
    }
  }
};

const std::vector<Step>& steps() {
  static const std::vector<Step> all = {
      {{1}, {1}},                   // a one-token context
      {{1, 1, 1}, {513, 17, 256}},  // decode: partial and whole last blocks
      {{5, 1}, {40, 300}},          // multi-token step beside a decode
      {{37}, {37}},                 // a prompt over two query chunks
      {{70, 3}, {601, 3}},          // prefill chunk after a prefix, a short prompt
  };
  return all;
}

TEST(Attention16Bit, InPlaceEqualsGatherBitForBit) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int64_t block_size : {8, 16, 32}) {
      for (int64_t head_dim : {64, 72, 128}) {
        for (int64_t group : {1, 2, 4, 7}) {
          for (const Step& step : steps()) {
            SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " B " << block_size << " D "
                                            << head_dim << " group " << group << " seqs "
                                            << step.seq_lens.size() << " len " << step.seq_lens[0]);
            Case{dtype, block_size, head_dim, 2, group, step}.run();
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace s4kv::backend::cpu
