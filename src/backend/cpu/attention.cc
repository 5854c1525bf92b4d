#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/paged_kv_cache.h"
#include "backend/cpu/thread_pool.h"
#include "common/check.h"
#include "kv/hadamard.h"

namespace s4kv::backend::cpu {
namespace {

// Query tokens per work item: enough items for the threads on one long prefill, few enough
// that gathering the item's K/V (once per item) stays small against its dot products.
constexpr int64_t kQueryChunk = 32;

struct WorkItem {
  int64_t seq;
  int64_t kv_head;
  int64_t j_begin, j_end;  // new tokens [j_begin, j_end) of the sequence
};

// Eight independent partial sums: the compiler keeps them in vector registers without
// -ffast-math. Summation order differs from a sequential loop only at fp32 rounding level.
float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int u = 0; u < 8; ++u) acc[u] += a[i + u] * b[i + u];
  }
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y += a * x in blocks of 8 (head_dim % 8 == 0, checked): vectorizes at -O2.
void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 8) {
    for (int u = 0; u < 8; ++u) y[i + u] += a * x[i + u];
  }
}

void run_item(const AttentionArgs& a, const KvGatherFn& gather, const WorkItem& w) {
  const int64_t d = a.head_dim;
  const int64_t q_begin = a.query_start_loc[w.seq];
  const int64_t q_len = a.query_start_loc[w.seq + 1] - q_begin;
  const int64_t seq_len = a.seq_lens[w.seq];
  const int64_t ctx_end = seq_len - q_len + w.j_end;  // positions the last query sees

  // This kv head's keys and values for positions [0, ctx_end) as fp32 rows.
  thread_local std::vector<float> keys, values, scores;
  keys.resize(static_cast<size_t>(ctx_end * d));
  values.resize(static_cast<size_t>(ctx_end * d));
  scores.resize(static_cast<size_t>(ctx_end));
  const RotatedValues rot = gather(w.seq, w.kv_head, ctx_end, keys.data(), values.data());
  S4KV_CHECK(rot.begin >= 0 && rot.begin <= rot.end && rot.end <= ctx_end,
             "attention: rotated values [", rot.begin, ", ", rot.end, ") outside ", ctx_end);
  thread_local std::vector<float> o_rot;
  o_rot.resize(static_cast<size_t>(d));

  const int64_t group = a.num_heads / a.num_kv_heads;
  for (int64_t j = w.j_begin; j < w.j_end; ++j) {
    const int64_t t = q_begin + j;
    const int64_t ctx = seq_len - q_len + j + 1;
    for (int64_t h = w.kv_head * group; h < (w.kv_head + 1) * group; ++h) {
      const float* q = a.q.data() + t * a.q_stride + h * d;
      float max_score = -INFINITY;
      for (int64_t p = 0; p < ctx; ++p) {
        scores[p] = dot(q, keys.data() + p * d, d) * a.scale;
        max_score = std::max(max_score, scores[p]);
      }
      float sum = 0.0f;
      for (int64_t p = 0; p < ctx; ++p) {
        scores[p] = std::exp(scores[p] - max_score);
        sum += scores[p];
      }
      float* o = a.out.data() + t * a.num_heads * d + h * d;
      std::fill_n(o, d, 0.0f);
      const int64_t rot_end = std::min(rot.end, ctx);
      if (rot.begin < rot_end) {
        // Hadamard-domain values: their weighted sum, rotated back once, joins the rest.
        std::fill(o_rot.begin(), o_rot.end(), 0.0f);
        for (int64_t p = rot.begin; p < rot_end; ++p) {
          axpy(scores[p], values.data() + p * d, o_rot.data(), d);
        }
        kv::hadamard_ref(o_rot);
        for (int64_t i = 0; i < d; ++i) o[i] = o_rot[static_cast<size_t>(i)];
      }
      // The plain values: before and after the rotated range (all of them when it is empty).
      const int64_t plain_end = rot.begin < rot_end ? rot.begin : ctx;
      for (int64_t p = 0; p < plain_end; ++p) axpy(scores[p], values.data() + p * d, o, d);
      for (int64_t p = std::max(plain_end, rot_end); p < ctx; ++p) {
        axpy(scores[p], values.data() + p * d, o, d);
      }
      const float inv_sum = 1.0f / sum;
      for (int64_t i = 0; i < d; ++i) o[i] *= inv_sum;
    }
  }
}

}  // namespace

void context_attention_ref(const AttentionArgs& a, const KvGatherFn& gather, ThreadPool* pool) {
  const auto num_seqs = static_cast<int64_t>(a.seq_lens.size());
  S4KV_CHECK(static_cast<int64_t>(a.query_start_loc.size()) == num_seqs + 1,
             "context_attention_ref: query_start_loc size");
  S4KV_CHECK(a.head_dim > 0 && a.head_dim % 8 == 0, "context_attention_ref: head_dim ", a.head_dim);
  S4KV_CHECK(a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0,
             "context_attention_ref: num_heads must be a multiple of num_kv_heads");
  const int64_t num_tokens = num_seqs == 0 ? 0 : a.query_start_loc[num_seqs];
  S4KV_CHECK(static_cast<int64_t>(a.out.size()) == num_tokens * a.num_heads * a.head_dim,
             "context_attention_ref: out size");
  S4KV_CHECK(num_tokens == 0 || static_cast<int64_t>(a.q.size()) >=
                                    (num_tokens - 1) * a.q_stride + a.num_heads * a.head_dim,
             "context_attention_ref: q too small");
  std::vector<WorkItem> items;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t q_len = a.query_start_loc[s + 1] - a.query_start_loc[s];
    S4KV_CHECK(q_len >= 0 && a.seq_lens[s] >= q_len, "context_attention_ref: seq ", s);
    for (int64_t g = 0; g < a.num_kv_heads; ++g) {
      for (int64_t j = 0; j < q_len; j += kQueryChunk) {
        items.push_back({s, g, j, std::min(q_len, j + kQueryChunk)});
      }
    }
  }
  const auto run = [&](int64_t i) { run_item(a, gather, items[static_cast<size_t>(i)]); };
  if (pool != nullptr) {
    pool->parallel_for(static_cast<int64_t>(items.size()), run);
  } else {
    for (int64_t i = 0; i < static_cast<int64_t>(items.size()); ++i) run(i);
  }
}

void paged_attention_ref(const PagedAttentionArgs& a, ThreadPool* pool) {
  const auto num_seqs = static_cast<int64_t>(a.seq_lens.size());
  S4KV_CHECK(a.num_kv_heads > 0 && a.head_dim > 0 && a.block_size > 0,
             "paged_attention_ref: shape");
  const int64_t num_slots = static_cast<int64_t>(a.k_cache.size()) / (a.num_kv_heads * a.head_dim);
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t num_blocks_used = (a.seq_lens[s] + a.block_size - 1) / a.block_size;
    S4KV_CHECK(num_blocks_used <= a.max_num_blocks_per_seq, "paged_attention_ref: block table");
    for (int64_t i = 0; i < num_blocks_used; ++i) {
      const int32_t block = a.block_tables[s * a.max_num_blocks_per_seq + i];
      S4KV_CHECK(block >= 0 && (block + 1) * a.block_size <= num_slots,
                 "paged_attention_ref: block id ", block);
    }
  }
  const AttentionArgs args{a.q,     a.q_stride,        a.num_heads, a.num_kv_heads, a.head_dim,
                           a.scale, a.query_start_loc, a.seq_lens,  a.out};
  const KvGatherFn gather = [&a](int64_t seq, int64_t kv_head, int64_t n, float* k, float* v) {
    const int32_t* table = a.block_tables.data() + seq * a.max_num_blocks_per_seq;
    gather_paged_16bit(a.k_cache, a.v_cache, a.cache_dtype, a.block_size,
                       a.num_kv_heads * a.head_dim, table, kv_head * a.head_dim, a.head_dim, n, k,
                       v);
    return RotatedValues{};
  };
  context_attention_ref(args, gather, pool);
}

}  // namespace s4kv::backend::cpu
