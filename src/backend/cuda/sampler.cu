#include "backend/cuda/sampler.h"

#include <cooperative_groups.h>

#include <cub/block/block_reduce.cuh>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string_view>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"

namespace s4kv::backend::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 1024;     // threads of a block
constexpr int kClusterBlocks = 8;  // the most blocks of a row on sm_90: one thread block cluster
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One row's settings, lowered further for the device. The id lists live in the call's `ids`
// (and `values`) arrays: logit_bias ids (values: the biases), the ids masked below min_tokens
// (only when the row is below it) and the ids the penalties touch (PenaltyScratch::collect: the
// distinct ids of prompt and output for repetition_penalty, the distinct ids of the output with
// their counts in `values` for frequency / presence).
struct RowParams {
  double inv_temperature, top_p, min_p, u;
  int64_t top_k;
  float repetition_penalty, frequency_penalty, presence_penalty;
  int32_t greedy, num_logprobs;
  int32_t bias_begin, bias_count, mask_begin, mask_count;
  int32_t repeat_begin, repeat_count, count_begin, count_count;
};

struct RowResult {
  int32_t token;
  float logprob;
  int64_t rank;
  int32_t num_top;
  int32_t top_ids[kMaxTopLogprobs];
  float top_logprobs[kMaxTopLogprobs];
};

// A candidate for "the best": the larger value, the lower id among equals; id < 0 is none.
struct Best {
  float v;
  int32_t id;
};

__device__ bool better(Best a, Best b) {
  if (b.id < 0) return a.id >= 0;
  if (a.id < 0) return false;
  return a.v > b.v || (a.v == b.v && a.id < b.id);
}

struct BestOp {
  __device__ Best operator()(Best a, Best b) const { return better(b, a) ? b : a; }
};

// Monotone map of a float onto uint32 (larger float, larger key); -0 and +0 share +0's key, as
// they compare equal.
__device__ uint32_t order_key(float x) {
  if (x == 0.0f) x = 0.0f;
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}

__device__ float from_key(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) != 0 ? (k & 0x7fffffffu) : ~k);
}

template <int kCl>
struct Shared {
  union {
    cub::BlockReduce<double, kThreads>::TempStorage dsum;
    cub::BlockReduce<int, kThreads>::TempStorage isum;
    cub::BlockReduce<Best, kThreads>::TempStorage best;
  } tmp;
  // Each block's part of a reduction, double-buffered by the reductions' parity: the next
  // reduction's barrier orders every block's reads of a buffer before its next write.
  double dpart[2];
  int ipart[2];
  Best bpart[2];
  double ranges[kWarps];            // the draw: this block's warps' sums
  double all_ranges[kWarps * kCl];  // the draw: every warp's sum of the row, gathered
  double d;
  int i;
  Best b;
};

// A row's kCl blocks of kThreads (kCl > 1: one thread block cluster, sm_90 only); thread t of
// block `rank` is the row's thread rank * kThreads + t. Reductions over 0..n-1: each thread sums
// its own indices in order, its block reduces in a fixed tree, the blocks' parts are combined in
// rank order: the same result on every run and in every block. Every block of a row makes the
// same reductions in the same order (control flow depends only on the row's settings and on
// reduction results).
template <int kCl>
struct RowCtx {
  static constexpr int kSpan = kThreads * kCl;  // threads of a row
  Shared<kCl>& s;
  unsigned rank;
  int64_t first;  // the row's thread index
  int parity = 0;

  // Every thread of the row's blocks; their shared and global writes before it are seen after.
  __device__ void sync() const {
    if constexpr (kCl == 1) {
      __syncthreads();
    } else {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
      cg::this_cluster().sync();
#else
      __trap();  // never launched below sm_90 (CudaSampler takes one block a row there)
#endif
    }
  }
  // p, an address in this block's shared memory, in block b's.
  template <class T>
  __device__ T* remote(T* p, unsigned b) const {
    if constexpr (kCl == 1) {
      return p;
    } else {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
      return cg::this_cluster().map_shared_rank(p, b);
#else
      __trap();
      return p;
#endif
    }
  }
};

template <int kCl>
__device__ unsigned rank_in_row() {
  if constexpr (kCl == 1) {
    return 0;
  } else {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
    return cg::this_cluster().block_rank();
#else
    __trap();
    return 0;
#endif
  }
}

// The row's sum of f(i) over 0..n-1 as T (double: the block's dsum storage, dpart and d; int:
// isum, ipart and i), in every thread of the row.
template <typename T, int kCl, class F>
__device__ T row_sum(RowCtx<kCl>& c, int64_t n, F f) {
  constexpr bool kDouble = std::is_same_v<T, double>;
  T acc = 0;
  for (int64_t i = c.first; i < n; i += c.kSpan) acc += f(i);
  T r;
  if constexpr (kDouble) {
    r = cub::BlockReduce<double, kThreads>(c.s.tmp.dsum).Sum(acc);
  } else {
    r = cub::BlockReduce<int, kThreads>(c.s.tmp.isum).Sum(acc);
  }
  T* part;
  T* total;
  if constexpr (kDouble) {
    part = c.s.dpart;
    total = &c.s.d;
  } else {
    part = c.s.ipart;
    total = &c.s.i;
  }
  c.parity ^= 1;
  if (threadIdx.x == 0) part[c.parity] = r;
  c.sync();
  if (threadIdx.x == 0) {
    T t = 0;
    for (unsigned b = 0; b < kCl; ++b) t += *c.remote(&part[c.parity], b);
    *total = t;
  }
  __syncthreads();
  const T out = *total;
  __syncthreads();
  return out;
}

template <int kCl, class F>
__device__ double block_sum(RowCtx<kCl>& c, int64_t n, F f) {
  return row_sum<double>(c, n, f);
}

template <int kCl, class F>
__device__ int block_count(RowCtx<kCl>& c, int64_t n, F f) {
  return row_sum<int>(c, n, [&](int64_t i) { return f(i) ? 1 : 0; });
}

// f(i) -> Best (id < 0: not eligible). Over the row's threads' own values when n is the row's
// thread count and f ignores i (the draw's hits).
template <int kCl, class F>
__device__ Best block_best(RowCtx<kCl>& c, int64_t n, F f) {
  Best acc{0.0f, -1};
  for (int64_t i = c.first; i < n; i += c.kSpan) {
    const Best x = f(i);
    if (better(x, acc)) acc = x;
  }
  const Best r = cub::BlockReduce<Best, kThreads>(c.s.tmp.best).Reduce(acc, BestOp());
  c.parity ^= 1;
  if (threadIdx.x == 0) c.s.bpart[c.parity] = r;
  c.sync();
  if (threadIdx.x == 0) {
    Best t{0.0f, -1};
    for (unsigned b = 0; b < kCl; ++b) {
      const Best x = *c.remote(&c.s.bpart[c.parity], b);
      if (better(x, t)) t = x;
    }
    c.s.b = t;
  }
  __syncthreads();
  const Best out = c.s.b;
  __syncthreads();
  return out;
}

// One row per kCl blocks (kCl > 1: a thread block cluster of that size, launched with the
// cluster attribute). Block `rank` owns the ids i with (i % kSpan) / kThreads == rank: it writes
// them in the processed row (so no 128-byte line of it is written by two blocks) and its
// threads' strided loops read only them; the draw, which walks id ranges, reads the others'
// after a barrier of the row.
template <int kCl>
__global__ void __launch_bounds__(kThreads)
    sample_rows(const RowParams* params, const int32_t* ids, const float* values,
                const float* logits, float* work, int64_t vocab, RowResult* results) {
  constexpr int kSpan = kThreads * kCl;
  constexpr int kRowWarps = kWarps * kCl;
  __shared__ Shared<kCl> s;
  const unsigned rank = rank_in_row<kCl>();
  const int tid = static_cast<int>(threadIdx.x);
  RowCtx<kCl> rc{s, rank, static_cast<int64_t>(rank) * kThreads + tid};
  const int64_t row = blockIdx.x / kCl;
  const RowParams p = params[row];
  const float* raw = logits + row * vocab;
  float* w = work + row * vocab;
  const auto owned = [&](int32_t t) { return (t % kSpan) / kThreads == static_cast<int>(rank); };

  // The processed row: bias, min_tokens mask, penalties, each rounded as the reference does.
  for (int64_t i = rc.first; i < vocab; i += kSpan) w[i] = raw[i];
  __syncthreads();
  if (tid == 0) {  // in list order, as the reference (an id listed twice gets both)
    for (int j = 0; j < p.bias_count; ++j) {
      const int32_t t = ids[p.bias_begin + j];
      if (owned(t)) w[t] = __fadd_rn(w[t], values[p.bias_begin + j]);
    }
  }
  __syncthreads();
  for (int j = tid; j < p.mask_count; j += kThreads) {
    const int32_t t = ids[p.mask_begin + j];
    if (owned(t)) w[t] = kNegInf;
  }
  __syncthreads();
  for (int j = tid; j < p.repeat_count; j += kThreads) {  // distinct ids
    const int32_t t = ids[p.repeat_begin + j];
    if (!owned(t)) continue;
    const float x = w[t];
    w[t] = x > 0.0f ? __fdiv_rn(x, p.repetition_penalty) : __fmul_rn(x, p.repetition_penalty);
  }
  __syncthreads();
  for (int j = tid; j < p.count_count; j += kThreads) {  // distinct ids, values: counts
    const int32_t t = ids[p.count_begin + j];
    if (!owned(t)) continue;
    w[t] = __fsub_rn(w[t], __fadd_rn(__fmul_rn(p.frequency_penalty, values[p.count_begin + j]),
                                     p.presence_penalty));
  }
  rc.sync();  // the whole processed row, for the draw's ranges

  const auto all = [&](int64_t i) { return Best{w[i], static_cast<int32_t>(i)}; };
  int32_t token = -1;
  if (p.greedy != 0) {
    token = block_best(rc, vocab, all).id;
  } else {
    const int num_candidates = block_count(rc, vocab, [&](int64_t i) { return w[i] > kNegInf; });
    const Best top = block_best(rc, vocab, all);
    if (num_candidates == 0) {
      token = top.id;  // everything masked: the plain argmax, as the reference
    } else {
      const double m = top.v;
      // top_k: the k-th largest value (the largest key with at least k candidates at or above
      // it); ties with it are kept.
      const bool use_k = p.top_k > 0 && p.top_k < num_candidates;
      uint32_t kth = 0;
      if (use_k) {
        uint64_t lo = 0, hi = uint64_t{1} << 32;
        while (hi - lo > 1) {
          const uint64_t mid = (lo + hi) / 2;
          const int c = block_count(
              rc, vocab, [&](int64_t i) { return w[i] > kNegInf && order_key(w[i]) >= mid; });
          if (c >= p.top_k) {
            lo = mid;
          } else {
            hi = mid;
          }
        }
        kth = static_cast<uint32_t>(lo);
      }
      const auto kept_k = [&](int64_t i) {
        return w[i] > kNegInf && (!use_k || order_key(w[i]) >= kth);
      };
      const auto prob = [&](float x) {
        return exp(__dmul_rn(__dsub_rn(static_cast<double>(x), m), p.inv_temperature));
      };
      // top_p: the most likely tokens (value descending, lower id first among equals) whose
      // mass reaches top_p x total; `cut` is the last kept value's key, `id_cut` the last kept
      // id among the tokens of that value.
      const bool use_p = p.top_p < 1.0;
      uint32_t cut = 0;
      int32_t id_cut = INT_MAX;
      if (use_p) {
        const double total =
            block_sum(rc, vocab, [&](int64_t i) { return kept_k(i) ? prob(w[i]) : 0.0; });
        const double target = p.top_p * total;
        uint64_t lo = 0, hi = uint64_t{1} << 32;
        while (hi - lo > 1) {
          const uint64_t mid = (lo + hi) / 2;
          const double g = block_sum(rc, vocab, [&](int64_t i) {
            return kept_k(i) && order_key(w[i]) >= mid ? prob(w[i]) : 0.0;
          });
          if (g >= target) {
            lo = mid;
          } else {
            hi = mid;
          }
        }
        cut = static_cast<uint32_t>(lo);
        const double above = block_sum(rc, vocab, [&](int64_t i) {
          return kept_k(i) && order_key(w[i]) > cut ? prob(w[i]) : 0.0;
        });
        const auto at_cut = [&](int64_t i) { return kept_k(i) && order_key(w[i]) == cut; };
        const int num_at_cut = block_count(rc, vocab, at_cut);
        const double p_cut = prob(from_key(cut));
        int n = 0;
        for (double cum = above; cum < target && n < num_at_cut; ++n) cum += p_cut;
        if (n <
            num_at_cut) {  // the n lowest ids of that value: the smallest id_cut with n at or below
          int64_t lo_id = -1, hi_id = vocab - 1;
          while (hi_id - lo_id > 1) {
            const int64_t mid = (lo_id + hi_id) / 2;
            const int c = block_count(rc, vocab, [&](int64_t i) { return i <= mid && at_cut(i); });
            if (c >= n) {
              hi_id = mid;
            } else {
              lo_id = mid;
            }
          }
          id_cut = static_cast<int32_t>(hi_id);
        }
      }
      const auto kept = [&](int64_t i) {
        if (!kept_k(i)) return false;
        if (use_p) {
          const uint32_t k = order_key(w[i]);
          if (k < cut || (k == cut && i > id_cut)) return false;
        }
        // min_p: the most likely token's probability is exactly 1 here.
        return p.min_p <= 0.0 || prob(w[i]) >= p.min_p;
      };
      const double total =
          block_sum(rc, vocab, [&](int64_t i) { return kept(i) ? prob(w[i]) : 0.0; });
      // The draw: the first id whose cumulative normalized probability exceeds u. Warp j owns
      // the j-th range of ids: it sums its range's probabilities (lane order, then a fixed
      // tree), every warp starts from the sum of the ranges before its own and walks its range
      // 32 ids at a time (a warp scan per step, no block barrier); the lowest id that crosses
      // u wins. Fixed orders throughout: the same token on every run.
      const int lane = tid % 32, warp = tid / 32;
      const int64_t gw = static_cast<int64_t>(rank) * kWarps + warp;  // the row's warp
      const int64_t range = (vocab + kRowWarps - 1) / kRowWarps;
      const int64_t first = gw * range;
      const int64_t last = first + range < vocab ? first + range : vocab;
      const auto q_of = [&](int64_t i) {
        return i < last && kept(i) ? __ddiv_rn(prob(w[i]), total) : 0.0;
      };
      double part = 0.0;
      for (int64_t i = first + lane; i < last; i += 32) part += q_of(i);
      for (int off = 16; off > 0; off /= 2) part += __shfl_down_sync(kFullMask, part, off);
      if (lane == 0) s.ranges[warp] = part;
      rc.sync();
      if (tid < kRowWarps) s.all_ranges[tid] = *rc.remote(&s.ranges[tid % kWarps], tid / kWarps);
      __syncthreads();
      double carry = 0.0;
      for (int64_t j = 0; j < gw; ++j) carry += s.all_ranges[j];
      // Only a warp whose range can hold the draw walks it: the walk's own sums of the range
      // (in another order than `part`'s) differ from carry + part by rounding, ~1e-13 of them,
      // so a range clearly below u (no id of it crosses u) or clearly above it (a lower range's
      // walk hits first) is left out, and every other warp walks as before: the same token.
      const double mine = s.all_ranges[gw];
      const double slack = 1e-9 * (carry + mine) + 1e-300;
      const bool below = p.u >= carry + mine + slack, above = carry > p.u + slack;
      Best hit{0.0f, -1};
      for (int64_t base = first; base < last && !below && !above; base += 32) {
        const double q = q_of(base + lane);
        double inclusive = q;
        for (int off = 1; off < 32; off *= 2) {
          const double y = __shfl_up_sync(kFullMask, inclusive, off);
          if (lane >= off) inclusive += y;
        }
        const unsigned hits = __ballot_sync(kFullMask, q > 0.0 && p.u < carry + inclusive);
        if (hits != 0) {
          hit = Best{0.0f, static_cast<int32_t>(base + __ffs(static_cast<int>(hits)) - 1)};
          break;
        }
        carry += __shfl_sync(kFullMask, inclusive, 31);
      }
      token = block_best(rc, kSpan, [&](int64_t) { return hit; }).id;
      if (token < 0) {  // rounding left u above the total: the last candidate owns the gap
        token = block_best(rc, vocab, [&](int64_t i) {
                  return kept(i) ? Best{static_cast<float>(i), static_cast<int32_t>(i)}
                                 : Best{0.0f, -1};
                }).id;
      }
    }
  }

  RowResult* out = results + row;
  const bool writer = rank == 0 && tid == 0;
  if (p.num_logprobs < 0) {
    if (writer) {
      out->token = token;
      out->logprob = 0.0f;
      out->rank = 0;
      out->num_top = 0;
    }
    rc.sync();  // no block leaves while another may read its shared memory
    return;
  }
  // Raw logprobs: log_softmax of the model's logits, before any processing.
  const Best raw_top = block_best(rc, vocab, [&](int64_t i) {
    return Best{raw[i], static_cast<int32_t>(i)};
  });
  const float mr = raw_top.v;
  const double sum = block_sum(rc, vocab, [&](int64_t i) {
    return exp(__dsub_rn(static_cast<double>(raw[i]), static_cast<double>(mr)));
  });
  const double lse = __dadd_rn(static_cast<double>(mr), log(sum));
  const float chosen = raw[token];
  const int larger = block_count(rc, vocab, [&](int64_t i) { return raw[i] > chosen; });
  Best prev{0.0f, -1};
  int num_top = 0;
  for (; num_top < p.num_logprobs; ++num_top) {
    const Best b = block_best(rc, vocab, [&](int64_t i) {
      const float x = raw[i];
      const bool after =
          prev.id < 0 || x < prev.v || (x == prev.v && i > static_cast<int64_t>(prev.id));
      return after ? Best{x, static_cast<int32_t>(i)} : Best{0.0f, -1};
    });
    if (b.id < 0) break;
    if (writer) {
      out->top_ids[num_top] = b.id;
      out->top_logprobs[num_top] = static_cast<float>(__dsub_rn(static_cast<double>(b.v), lse));
    }
    prev = b;
  }
  if (writer) {
    out->token = token;
    out->logprob = static_cast<float>(__dsub_rn(static_cast<double>(chosen), lse));
    out->rank = 1 + larger;
    out->num_top = num_top;
  }
  rc.sync();  // no block leaves while another may read its shared memory
}

// Deferred tokens (backend.h): -1 - r becomes the token row r sampled.
__global__ void resolve_deferred_kernel(int32_t* token_ids, int64_t num_tokens,
                                        const RowResult* results) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= num_tokens) return;
  const int32_t id = token_ids[i];
  if (id < 0) token_ids[i] = results[-1 - static_cast<int64_t>(id)].token;
}

// Words of id lists one call may carry: any single row fits (logit_bias up to the whole
// vocabulary, the masked ids, the distinct prompt + output ids, the distinct output ids).
int64_t list_capacity(int64_t vocab, int64_t max_model_len) {
  return 2 * vocab + 2 * max_model_len + 4096;
}

int64_t arena_bytes(int64_t vocab, int64_t max_rows, int64_t max_model_len) {
  return max_rows * static_cast<int64_t>(sizeof(RowParams)) +
         list_capacity(vocab, max_model_len) * 8 + 3 * 16;
}

}  // namespace

int64_t CudaSampler::device_bytes(int64_t vocab_size, int64_t max_rows, int64_t max_model_len,
                                  int64_t max_call_rows) {
  return max_rows * vocab_size * 4 + arena_bytes(vocab_size, max_rows, max_model_len) +
         std::max(max_rows, max_call_rows) * static_cast<int64_t>(sizeof(RowResult));
}

// The largest cluster (8, 4 or 2 blocks) with which every row of the call has its blocks at
// once, one block a multiprocessor (1,024 threads of 64 registers fill one), else one block a
// row: a row's passes over the vocabulary (double-precision exponentials among them) are split
// over as many multiprocessors as the call leaves idle. (Two clusters of 8 a multiprocessor
// were counted before: 17-33 rows then ran in two waves, and 34-132 rows took one
// multiprocessor each, 0.39 ms a step at 64 rows on an H100.)
int CudaSampler::blocks_per_row(int64_t rows) const {
  if (clusters_) {
    for (int c = kClusterBlocks; c >= 2; c /= 2) {
      if (rows * c <= sms_) return c;
    }
  }
  return 1;
}

CudaSampler::CudaSampler(int64_t vocab_size, int64_t max_rows, int64_t max_model_len,
                         int64_t max_call_rows)
    : vocab_size_(vocab_size),
      max_rows_(max_rows),
      list_capacity_(list_capacity(vocab_size, max_model_len)),
      max_call_rows_(std::max(max_rows, max_call_rows)),
      work_(static_cast<size_t>(max_rows * vocab_size * 4)),
      arena_(static_cast<size_t>(arena_bytes(vocab_size, max_rows, max_model_len))),
      out_device_(static_cast<size_t>(max_call_rows_) * sizeof(RowResult)),
      out_host_{PinnedBuffer(static_cast<size_t>(max_call_rows_) * sizeof(RowResult)),
                PinnedBuffer(static_cast<size_t>(max_call_rows_) * sizeof(RowResult))},
      penalties_(vocab_size) {
  // A thread block cluster per row where the device has them (sm_90): blocks_per_row.
  // S4KV_SAMPLER_CLUSTER=0 keeps one block per row (for comparisons).
  int device = 0, major = 0, cluster_launch = 0, sms = 0;
  S4KV_CUDA_CHECK(cudaGetDevice(&device));
  S4KV_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  S4KV_CUDA_CHECK(cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, device));
  S4KV_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const char* env = std::getenv("S4KV_SAMPLER_CLUSTER");
  const bool off = env != nullptr && std::string_view(env) == "0";
  clusters_ = major >= 9 && cluster_launch != 0 && !off;
  sms_ = sms;
  // Ids travel as floats in one reduction: exact below 2^24.
  S4KV_CHECK(vocab_size > 0 && vocab_size < (int64_t{1} << 24) && max_rows > 0,
             "cuda sampler: vocab_size ", vocab_size, ", max_rows ", max_rows);
}

void CudaSampler::sample(const float* logits, std::span<const SamplingRow> rows,
                         cudaStream_t stream, std::vector<SampleOutput>& out) {
  submit(logits, rows, stream, 0);
  S4KV_CUDA_CHECK(cudaStreamSynchronize(stream));
  collect(0, out);
}

void CudaSampler::submit(const float* logits, std::span<const SamplingRow> rows,
                         cudaStream_t stream, int slot) {
  const auto num_rows = static_cast<int64_t>(rows.size());
  S4KV_CHECK((slot == 0 || slot == 1) && num_rows <= max_call_rows_, "cuda sampler: ", num_rows,
             " rows in slot ", slot, " (at most ", max_call_rows_, ")");
  num_rows_[slot] = num_rows;
  auto* results = reinterpret_cast<RowResult*>(out_host_[slot].data());
  auto* results_device = static_cast<RowResult*>(out_device_.data());
  int64_t begin = 0;
  while (begin < num_rows) {
    // A later group reuses the arena's host memory: the copy of the one before must be done.
    if (begin > 0) S4KV_CUDA_CHECK(cudaStreamSynchronize(stream));
    // One group: up to max_rows rows, as many as their lists fit (all of them, but for long
    // penalty lists or a batch with more logits rows than sequences).
    const int64_t group_end = std::min(num_rows, begin + max_rows_);
    arena_.clear();
    RowParams* params = arena_.alloc<RowParams>(static_cast<size_t>(group_end - begin));
    int32_t* ids = arena_.alloc<int32_t>(static_cast<size_t>(list_capacity_));
    float* values = arena_.alloc<float>(static_cast<size_t>(list_capacity_));
    int64_t used = 0, end = begin;
    for (; end < group_end; ++end) {
      const SamplingRow& row = rows[static_cast<size_t>(end)];
      const int64_t num_output = row.num_output_tokens();
      const bool masked = num_output < row.min_tokens;
      const PenaltyIds& touched = penalties_.collect(row);
      const int64_t need = static_cast<int64_t>(row.logit_bias.size()) +
                           (masked ? static_cast<int64_t>(row.min_tokens_masked_ids.size()) : 0) +
                           static_cast<int64_t>(touched.repeated.size() + touched.counted.size());
      if (used + need > list_capacity_) {
        S4KV_CHECK(end > begin, "cuda sampler: one row's lists (", need, " ids) exceed ",
                   list_capacity_);
        break;
      }
      RowParams& p = params[end - begin];
      p.inv_temperature = 1.0 / row.temperature;
      p.top_p = row.top_p;
      p.min_p = row.min_p;
      p.u = row.greedy ? 0.0 : uniform01(row.rng_key, static_cast<uint64_t>(num_output));
      p.top_k = row.top_k;
      p.repetition_penalty = static_cast<float>(row.repetition_penalty);
      p.frequency_penalty = static_cast<float>(row.frequency_penalty);
      p.presence_penalty = static_cast<float>(row.presence_penalty);
      p.greedy = row.greedy ? 1 : 0;
      p.num_logprobs = static_cast<int32_t>(row.num_logprobs);
      const auto put = [&](int32_t& begin_at, int32_t& count, int64_t n) {
        begin_at = static_cast<int32_t>(used);
        count = static_cast<int32_t>(n);
        used += n;
        return static_cast<size_t>(begin_at);
      };
      size_t at = put(p.bias_begin, p.bias_count, static_cast<int64_t>(row.logit_bias.size()));
      for (const auto& [id, bias] : row.logit_bias) {
        ids[at] = id;
        values[at++] = bias;
      }
      const std::span<const int32_t> mask =
          masked ? row.min_tokens_masked_ids : std::span<const int32_t>{};
      at = put(p.mask_begin, p.mask_count, static_cast<int64_t>(mask.size()));
      for (int32_t id : mask) ids[at++] = id;
      at = put(p.repeat_begin, p.repeat_count, static_cast<int64_t>(touched.repeated.size()));
      for (int32_t id : touched.repeated) ids[at++] = id;
      at = put(p.count_begin, p.count_count, static_cast<int64_t>(touched.counted.size()));
      for (const auto& [id, n] : touched.counted) {
        ids[at] = id;
        values[at++] = static_cast<float>(n);
      }
    }
    arena_.upload(stream);
    const RowParams* d_params = arena_.device_of(params);
    const int32_t* d_ids = arena_.device_of(ids);
    const float* d_values = arena_.device_of(values);
    const float* d_logits = logits + begin * vocab_size_;
    auto* d_work = static_cast<float*>(work_.data());
    const auto group_rows = static_cast<unsigned>(end - begin);
    const auto launch_cluster = [&]<int kCl>() {
      cudaLaunchConfig_t config{};
      config.gridDim = dim3(group_rows * kCl);
      config.blockDim = dim3(kThreads);
      config.stream = stream;
      cudaLaunchAttribute cluster{};
      cluster.id = cudaLaunchAttributeClusterDimension;
      cluster.val.clusterDim.x = kCl;
      cluster.val.clusterDim.y = 1;
      cluster.val.clusterDim.z = 1;
      config.attrs = &cluster;
      config.numAttrs = 1;
      S4KV_CUDA_CHECK(cudaLaunchKernelEx(&config, sample_rows<kCl>, d_params, d_ids, d_values,
                                         d_logits, d_work, vocab_size_, results_device + begin));
    };
    switch (blocks_per_row(static_cast<int64_t>(group_rows))) {
      case 8:
        launch_cluster.template operator()<8>();
        break;
      case 4:
        launch_cluster.template operator()<4>();
        break;
      case 2:
        launch_cluster.template operator()<2>();
        break;
      default:
        sample_rows<1><<<group_rows, kThreads, 0, stream>>>(
            d_params, d_ids, d_values, d_logits, d_work, vocab_size_, results_device + begin);
    }
    S4KV_CUDA_CHECK(cudaGetLastError());
    S4KV_CUDA_CHECK(cudaMemcpyAsync(results + begin, results_device + begin,
                                    static_cast<size_t>(end - begin) * sizeof(RowResult),
                                    cudaMemcpyDeviceToHost, stream));
    begin = end;
  }
}

void CudaSampler::collect(int slot, std::vector<SampleOutput>& out) {
  S4KV_CHECK(slot == 0 || slot == 1, "cuda sampler: slot ", slot);
  const auto* results = reinterpret_cast<const RowResult*>(out_host_[slot].data());
  out.resize(static_cast<size_t>(num_rows_[slot]));
  for (int64_t r = 0; r < num_rows_[slot]; ++r) {
    const RowResult& res = results[r];
    SampleOutput& o = out[static_cast<size_t>(r)];
    o.token_id = res.token;
    o.logprob = res.logprob;
    o.rank = res.rank;
    o.top_logprobs.clear();
    for (int32_t k = 0; k < res.num_top; ++k) {
      o.top_logprobs.push_back({res.top_ids[k], res.top_logprobs[k]});
    }
  }
}

void CudaSampler::resolve_deferred(int32_t* token_ids, int64_t num_tokens,
                                   cudaStream_t stream) const {
  if (num_tokens == 0) return;
  constexpr int kBlock = 256;
  resolve_deferred_kernel<<<static_cast<unsigned>((num_tokens + kBlock - 1) / kBlock), kBlock, 0,
                            stream>>>(token_ids, num_tokens,
                                      static_cast<const RowResult*>(out_device_.data()));
  S4KV_CUDA_CHECK(cudaGetLastError());
}

}  // namespace s4kv::backend::cuda
