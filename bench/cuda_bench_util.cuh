// Helpers shared by the attention bench's modes (cuda_attention_bench.cu: decode,
// cuda_prefill_bench.cu: --prefill): random device fills that never make a NaN, int4_kivi block
// parameters and 16-bit parts, the batch (block tables walking the pool) and its arguments on the
// device, CUDA-event timing (median of reps after warm-up), list parsing, the check's distance.
// Bench code: each including file gets its own copy (internal linkage).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/rope.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_attention.cuh"
#include "backend/cuda/device.h"
#include "backend/cuda/paged_attention.cuh"
#include "backend/cuda/prefill_attention.cuh"
#include "backend/forward_batch_builder.h"
#include "backend/rope_table.h"
#include "kv/int4_kivi_layout.h"

namespace s4kv::backend::cuda {
namespace {  // NOLINT(google-build-namespaces): one copy per bench source

constexpr int kD = 128;

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::atoi(item.c_str()));
  return out;
}

__global__ void fill_random_u32(uint32_t* p, int64_t n, uint32_t seed, uint32_t mask,
                                uint32_t add) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    p[i] = (x & mask) + add;
  }
}

// Random 32-bit words: every 16-bit half a bf16 / fp16 in about +-2 (exponent 0x3f/0x40 for
// bf16, 0x3c..0x3f for fp16 by masking), every byte an fp8_e4m3 that is not NaN.
void fill(void* p, int64_t bytes, uint32_t seed, uint32_t mask, uint32_t add) {
  fill_random_u32<<<1024, 256>>>(static_cast<uint32_t*>(p), bytes / 4, seed, mask, add);
  S4KV_CUDA_CHECK(cudaGetLastError());
}

// int4_kivi blocks: random codes, fp16 scales in [2^-6, 2^-5), zeros in [-1, -0.5).
__global__ void fill_int4_params(std::byte* pool, int64_t num_blocks, kv::Int4KiviLayout l) {
  for (int64_t b = blockIdx.x; b < num_blocks; b += gridDim.x) {
    std::byte* base = pool + b * static_cast<int64_t>(l.block_bytes);
    auto* ks = reinterpret_cast<uint16_t*>(base + l.k_scale_offset);
    auto* kz = reinterpret_cast<uint16_t*>(base + l.k_zero_offset);
    auto* vs = reinterpret_cast<uint16_t*>(base + l.v_scale_offset);
    auto* vz = reinterpret_cast<uint16_t*>(base + l.v_zero_offset);
    for (int i = threadIdx.x; i < kD; i += blockDim.x) {
      ks[i] = static_cast<uint16_t>(0x2400 | ((i * 37 + b) & 0x3ff));
      kz[i] = static_cast<uint16_t>(0xb800 | ((i * 11 + b) & 0x3ff));
    }
    const int nv = l.block_size * (l.head_dim / l.value_group_size);
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
      vs[i] = static_cast<uint16_t>(0x2400 | ((i * 37 + b) & 0x3ff));
      vz[i] = static_cast<uint16_t>(0xb800 | ((i * 11 + b) & 0x3ff));
    }
  }
}

struct Shape {
  int heads, kv_heads;
};

struct Result {
  double us_median, us_min, us_max;
};

// launch() enqueued on `stream` 3 times to warm up, then reps times, each between two events
// and waited for: the median, least and most microseconds.
template <typename F>
Result time_on(F&& launch, cudaStream_t stream, int reps) {
  cudaEvent_t a, b;
  S4KV_CUDA_CHECK(cudaEventCreate(&a));
  S4KV_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) launch();
  S4KV_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    S4KV_CUDA_CHECK(cudaEventRecord(a, stream));
    launch();
    S4KV_CUDA_CHECK(cudaEventRecord(b, stream));
    S4KV_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    S4KV_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000.0);
  }
  std::sort(t.begin(), t.end());
  S4KV_CUDA_CHECK(cudaEventDestroy(a));
  S4KV_CUDA_CHECK(cudaEventDestroy(b));
  return {t[t.size() / 2], t.front(), t.back()};
}

// launch() on the default stream, each rep launched from the host.
template <typename F>
Result time_it(F&& launch, int reps) {
  return time_on(launch, nullptr, reps);
}

// The launches of launch(stream) captured once into a CUDA graph on a stream of its own, which
// replay() enqueues there (as the server replays its decode steps).
class CapturedGraph {
 public:
  template <typename F>
  explicit CapturedGraph(F&& launch) {
    S4KV_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    S4KV_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    launch(stream_);
    S4KV_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph_));
    S4KV_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  ~CapturedGraph() {
    S4KV_CUDA_CHECK(cudaGraphExecDestroy(exec_));
    S4KV_CUDA_CHECK(cudaGraphDestroy(graph_));
    S4KV_CUDA_CHECK(cudaStreamDestroy(stream_));
  }
  cudaStream_t stream() const { return stream_; }
  void replay() const { S4KV_CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// launch(stream) replayed from a CapturedGraph: the same median of reps as time_it, without the
// host's launch gaps between the kernels.
template <typename F>
Result time_graph(F&& launch, int reps) {
  const CapturedGraph g(launch);
  return time_on([&] { g.replay(); }, g.stream(), reps);
}

// "28/4,32/8" -> head shapes.
inline std::vector<Shape> parse_shapes(const std::string& s) {
  std::vector<Shape> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto slash = item.find('/');
    out.push_back(
        {std::atoi(item.substr(0, slash).c_str()), std::atoi(item.substr(slash + 1).c_str())});
  }
  return out;
}

// The flags both modes take: --heads, --formats, --block-size, --value-group-size, --int4-v1.
struct CacheFlags {
  std::vector<Shape> shapes = {{28, 4}, {32, 8}};
  std::vector<std::string> formats = {"16bit", "fp8", "int4"};
  int block_size = 64;         // --block-size
  int value_group_size = 128;  // int4_kivi's Gv
  bool int4_v1 = false;
  // Takes flag `a` (its value from next()); false when it is not one of these.
  template <typename Next>
  bool parse(const std::string& a, Next next) {
    if (a == "--heads") {
      shapes = parse_shapes(next());
    } else if (a == "--formats") {
      formats.clear();
      std::stringstream ss(next());
      std::string item;
      while (std::getline(ss, item, ',')) formats.push_back(item);
    } else if (a == "--block-size") {
      block_size = std::atoi(next().c_str());
    } else if (a == "--value-group-size") {
      value_group_size = std::atoi(next().c_str());
    } else if (a == "--int4-v1") {
      int4_v1 = true;
    } else {
      return false;
    }
    return true;
  }
  // After parsing: false (the reason on stderr) where no CUDA device is seen or the int4_kivi
  // layout of these flags cannot be made (where "int4" is among the formats; *layout is set).
  bool prepare(kv::Int4KiviLayout* layout) const {
    if (device_count() == 0) {
      std::fprintf(stderr, "no CUDA device\n");
      return false;
    }
    if (std::find(formats.begin(), formats.end(), "int4") != formats.end()) {
      const auto made = kv::Int4KiviLayout::create(block_size, kD, value_group_size);
      if (!made.is_ok()) {
        std::fprintf(stderr, "%s\n", made.status().message().c_str());
        return false;
      }
      *layout = *made;
    }
    return true;
  }
};

// v's bytes on the device (at least 16, so that an empty array has an address too).
template <typename V>
DeviceBuffer put(const V& v) {
  const size_t bytes = v.size() * sizeof(v[0]);
  DeviceBuffer b(std::max<size_t>(bytes, 16));
  if (bytes > 0) b.copy_from_host(v.data(), bytes);
  return b;
}

// The RoPE cos and sin tables (theta 1e6, head_dim kD) of positions 0 .. positions - 1 (at
// least) on the device.
struct DeviceRope {
  DeviceBuffer cos, sin;
  DeviceBuffer rotations;  // int4_rotation_image for the block size given
  DeviceBuffer rows_f16;   // int4_prefill_rope_image
  DeviceRope(int64_t positions, int block_size) {
    RopeTable rope(cpu::rope_inv_freq(kD, 1000000.0, model::RopeScaling{}));
    rope.ensure(std::max<int64_t>(positions, block_size));
    cos = put(rope.cos_table());
    sin = put(rope.sin_table());
    rotations = put(int4_rotation_image(rope.cos_table(), rope.sin_table(), block_size));
    rows_f16 = put(int4_prefill_rope_image(rope.cos_table(), rope.sin_table()));
  }
};

// The largest relative L2 distance between rows of kD (NaN counts as 1e9).
double max_rel_l2(const std::vector<float>& got, const std::vector<float>& ref) {
  double worst = 0;
  for (size_t row = 0; row < ref.size() / kD; ++row) {
    double num = 0, den = 0;
    for (int c = 0; c < kD; ++c) {
      const double x = got[row * kD + c], y = ref[row * kD + c];
      num += (x - y) * (x - y);
      den += y * y;
    }
    const double rel = std::sqrt(num / den);
    worst = std::isnan(rel) ? 1e9 : std::max(worst, rel);
  }
  return worst;
}

// `seqs` sequences of q_len tokens ending at position context - 1, each block table a random
// walk over the pool blocks [0, walk_blocks) (steps of 1 to 64: a walk, not a run). int4_kivi
// (int4) gives sequence s seat s and, but for v1, the sink block num_blocks + s as its first.
// The builder is returned: its batch() is spans into it, valid while it lives.
ForwardBatchBuilder walk_batch(int seqs, int q_len, int context, int B, int64_t walk_blocks,
                               int64_t num_blocks, bool int4, bool int4_v1, std::mt19937& rng) {
  const int64_t blocks_per_seq = (context + B - 1) / B;
  ForwardBatchBuilder builder(B, blocks_per_seq);
  std::uniform_int_distribution<int64_t> pick(0, walk_blocks - 1);
  std::vector<int32_t> table(static_cast<size_t>(blocks_per_seq));
  const std::vector<int32_t> tokens(static_cast<size_t>(q_len), 0);
  for (int s = 0; s < seqs; ++s) {
    int64_t blk = pick(rng);
    for (int32_t& id : table) {
      id = static_cast<int32_t>(blk);
      blk = (blk + 1 + pick(rng) % 64) % walk_blocks;
    }
    if (int4 && !int4_v1) table[0] = static_cast<int32_t>(num_blocks + s);  // sink block
    builder.add(tokens, context - q_len, table, int4 ? s : -1, 0);
  }
  return builder;
}

// int4_kivi's 16-bit parts beside the pool, random bf16: the sink blocks and residual rings of
// `seats` seats, the staging rows of `rows` tokens.
struct Int4Rows {
  DeviceBuffer sink, residual, staging_k, staging_v;
  Int4Rows(int64_t seats, int64_t rows, int B, int ring, int64_t kv_dim)
      : sink(static_cast<size_t>(seats * 2 * B * kv_dim * 2)),
        residual(static_cast<size_t>(seats * 2 * ring * B * kv_dim * 2)),
        staging_k(static_cast<size_t>(rows * kv_dim * 2)),
        staging_v(static_cast<size_t>(rows * kv_dim * 2)) {
    for (DeviceBuffer* b : {&sink, &residual, &staging_k, &staging_v}) {
      fill(b->data(), static_cast<int64_t>(b->bytes()), 5, 0x807f807fu, 0x3f803f80u);
    }
  }
};

// A batch's arrays on the device, with each token's sequence.
struct DeviceBatch {
  DeviceBuffer qsl, lens, pos, tables, seats, starts, token_seq;
  int64_t num_tokens, max_blocks_per_seq;
  explicit DeviceBatch(const ForwardBatch& fb)
      : qsl(put(fb.query_start_loc)),
        lens(put(fb.seq_lens)),
        pos(put(fb.positions)),
        tables(put(fb.block_tables)),
        seats(put(fb.seats)),
        starts(put(fb.seat_starts)),
        num_tokens(fb.num_tokens()),
        max_blocks_per_seq(fb.max_num_blocks_per_seq) {
    std::vector<int32_t> ts(static_cast<size_t>(num_tokens));
    for (int64_t s = 0; s < fb.num_seqs(); ++s) {
      for (int32_t t = fb.query_start_loc[s]; t < fb.query_start_loc[s + 1]; ++t) {
        ts[static_cast<size_t>(t)] = static_cast<int32_t>(s);
      }
    }
    token_seq = put(ts);
  }
};

// Where an int4_kivi cache's parts are (the pool's blocks, their layout, the 16-bit parts, each
// sequence's pool end) for attention_args.
struct Int4Cache {
  const std::byte* pool;
  const kv::Int4KiviLayout* layout;
  int64_t num_blocks;
  const Int4Rows* rows;
  int ring;
  const DeviceBuffer* pool_ends;  // [num_seqs] DecodePlan::pool_ends
  bool v1;
};

// The attention arguments of the batch on the device for both modes' kernels: queries q
// (q_stride floats a token), bf16 out, the RoPE tables, and int4_kivi's parts (int4 non-null)
// or the 16-bit / fp8 K and V caches.
PagedAttentionArgs attention_args(const Shape& sh, int B, kv::KvCacheDtype cache,
                                  const DeviceBatch& db, const DeviceBuffer& q, int64_t q_stride,
                                  void* out, const DeviceRope& rope, const Int4Cache* int4,
                                  const void* k_cache, const void* v_cache) {
  PagedAttentionArgs at;
  at.q = static_cast<const float*>(q.data());
  at.q_stride = q_stride;
  at.out = out;
  at.out_dtype = DType::kBF16;
  at.num_tokens = db.num_tokens;
  at.num_heads = sh.heads;
  at.num_kv_heads = sh.kv_heads;
  at.block_size = B;
  at.scale = 1.0f / std::sqrt(float{kD});
  at.token_seq = static_cast<const int32_t*>(db.token_seq.data());
  at.positions = static_cast<const int32_t*>(db.pos.data());
  at.query_start_loc = static_cast<const int32_t*>(db.qsl.data());
  at.seq_lens = static_cast<const int32_t*>(db.lens.data());
  at.block_tables = static_cast<const int32_t*>(db.tables.data());
  at.max_blocks_per_seq = db.max_blocks_per_seq;
  at.cache = cache;
  at.bf16 = true;
  if (int4 != nullptr) {
    const int64_t kv_dim = int64_t{sh.kv_heads} * kD;
    at.pool = int4->pool;
    at.layout = *int4->layout;
    at.num_pool_blocks = int4->num_blocks;
    at.residual = static_cast<const uint16_t*>(int4->rows->residual.data());
    at.seat_stride = 2 * int4->ring * B * kv_dim;  // packed rings
    at.ring = int4->ring;
    at.sink = static_cast<const uint16_t*>(int4->rows->sink.data());
    at.staging_k = static_cast<const uint16_t*>(int4->rows->staging_k.data());
    at.staging_v = static_cast<const uint16_t*>(int4->rows->staging_v.data());
    at.seats = static_cast<const int32_t*>(db.seats.data());
    at.seat_starts = static_cast<const int32_t*>(db.starts.data());
    at.pool_ends = static_cast<const int32_t*>(int4->pool_ends->data());
    at.rope_cos = static_cast<const float*>(rope.cos.data());
    at.rope_sin = static_cast<const float*>(rope.sin.data());
    at.int4_rotations = static_cast<const uint32_t*>(rope.rotations.data());
    at.rope_f16 = static_cast<const uint16_t*>(rope.rows_f16.data());
    at.value_hadamard = !int4->v1;
  } else {
    at.k_cache = k_cache;
    at.v_cache = v_cache;
  }
  return at;
}

}  // namespace

// cuda_attention_bench --prefill (cuda_prefill_bench.cu).
int run_prefill(int argc, char** argv);

}  // namespace s4kv::backend::cuda
