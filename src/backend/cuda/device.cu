#include <cstdlib>
#include <string_view>
#include <utility>

#include <cudaTypedefs.h>

#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/launch.cuh"

namespace s4kv::backend::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

namespace {

// Device 0's properties; false when there is no device.
bool device0_properties(cudaDeviceProp& prop) {
  if (device_count() == 0) return false;
  S4KV_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  return true;
}

}  // namespace

std::string device_description() {
  cudaDeviceProp prop{};
  if (!device0_properties(prop)) return {};
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major * 10 + prop.minor) + ", " +
         std::to_string(prop.totalGlobalMem >> 30) + " GiB)";
}

std::string device_name() {
  cudaDeviceProp prop{};
  return device0_properties(prop) ? std::string(prop.name) : std::string();
}

int64_t device_total_memory() {
  cudaDeviceProp prop{};
  return device0_properties(prop) ? static_cast<int64_t>(prop.totalGlobalMem) : 0;
}

bool dependent_launch_enabled(LaunchKind kind) {
  // 0: off, 1: every launch_dependent, 2: the few-row GEMMs only (unset: 2).
  static const int mode = [] {
    const char* env = std::getenv("S4KV_PDL");
    const std::string_view v = env != nullptr ? env : "gemm";
    const int m = v == "1" ? 1 : v == "gemm" ? 2 : 0;
    cudaDeviceProp prop{};
    return m != 0 && device0_properties(prop) && prop.major >= 9 ? m : 0;
  }();
  return mode == 1 || (mode == 2 && kind == LaunchKind::kGemm);
}

int device_sm_count() {
  if (device_count() == 0) return 0;
  int n = 0;
  S4KV_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0));
  return n;
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) S4KV_CUDA_CHECK(cudaMalloc(&data_, bytes));
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

void DeviceBuffer::copy_from_host(const void* src, size_t bytes) {
  S4KV_CHECK(bytes <= bytes_, "copy_from_host: ", bytes, " > ", bytes_);
  S4KV_CUDA_CHECK(cudaMemcpy(data_, src, bytes, cudaMemcpyHostToDevice));
}

void DeviceBuffer::copy_to_host(void* dst, size_t bytes) const {
  S4KV_CHECK(bytes <= bytes_, "copy_to_host: ", bytes, " > ", bytes_);
  S4KV_CUDA_CHECK(cudaMemcpy(dst, data_, bytes, cudaMemcpyDeviceToHost));
}

bool bulk_copy_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("S4KV_INT4_COPY");
    cudaDeviceProp prop{};
    return (env == nullptr || std::string_view(env) != "async") && device0_properties(prop) &&
           prop.major >= 9;
  }();
  return on;
}

void encode_byte_tensor_map(CUtensorMap* map, const void* base, int rank, const uint64_t* dims,
                            const uint64_t* strides, const uint32_t* box) {
  // The driver's encoder through the runtime (no link against the driver library).
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    S4KV_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                     cudaEnableDefault, &found));
    S4KV_CHECK(found == cudaDriverEntryPointSuccess && fn != nullptr,
               "the driver has no cuTensorMapEncodeTiled (a bulk tensor copy needs CUDA 12+)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  S4KV_CHECK(rank >= 1 && rank <= 5, "tensor map of rank ", rank);
  cuuint64_t d[5], st[4];
  cuuint32_t b[5], one[5];
  for (int i = 0; i < rank; ++i) {
    d[i] = dims[i];
    b[i] = box[i];
    one[i] = 1;
    if (i + 1 < rank) st[i] = strides[i];
  }
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, static_cast<cuuint32_t>(rank),
                            const_cast<void*>(base), d, st, b, one, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  S4KV_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (", static_cast<int>(r), ")");
}

}  // namespace s4kv::backend::cuda
