// Helpers shared by the attention bench's modes (cuda_attention_bench.cu: decode,
// cuda_prefill_bench.cu: --prefill): random device fills that never make a NaN, int4_kivi block
// parameters, CUDA-event timing (median of reps after warm-up), list parsing. Bench code: each
// including file gets its own copy (internal linkage).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/rope.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_attention.cuh"
#include "backend/cuda/device.h"
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

// The RoPE cos and sin tables (theta 1e6, head_dim kD) of positions 0 .. positions - 1 (at
// least) on the device.
struct DeviceRope {
  DeviceBuffer cos, sin;
  DeviceBuffer rotations;  // int4_rotation_image for the block size given
  DeviceRope(int64_t positions, int block_size) {
    RopeTable rope(cpu::rope_inv_freq(kD, 1000000.0, model::RopeScaling{}));
    rope.ensure(std::max<int64_t>(positions, block_size));
    cos = DeviceBuffer(rope.cos_table().size_bytes());
    sin = DeviceBuffer(rope.sin_table().size_bytes());
    cos.copy_from_host(rope.cos_table().data(), rope.cos_table().size_bytes());
    sin.copy_from_host(rope.sin_table().data(), rope.sin_table().size_bytes());
    const std::vector<uint32_t> image =
        int4_rotation_image(rope.cos_table(), rope.sin_table(), block_size);
    rotations = DeviceBuffer(image.size() * 4);
    rotations.copy_from_host(image.data(), image.size() * 4);
  }
};

}  // namespace

// cuda_attention_bench --prefill (cuda_prefill_bench.cu).
int run_prefill(int argc, char** argv);

}  // namespace s4kv::backend::cuda
