// backend/cuda/device.h on the CPU, for the emulation tests (S4KV_CUDA_EMULATION): one device,
// whose buffers are host memory, so that tests written for the GPU run their kernels through
// backend/cuda/emulation.h unchanged.
#include <cstdlib>
#include <cstring>
#include <utility>

#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/device.h"
#include "common/check.h"

namespace s4kv::backend::cuda {

int device_count() { return 1; }
std::string device_description() { return "the CPU (backend/cuda/emulation.h)"; }
int device_sm_count() { return 2; }
std::string device_name() { return "emulation"; }
int64_t device_total_memory() { return 0; }

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) {
    data_ = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    S4KV_CHECK(data_ != nullptr, "emulated device buffer of ", bytes, " bytes");
  }
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { std::free(data_); }

void DeviceBuffer::copy_from_host(const void* src, size_t bytes) {
  S4KV_CHECK(bytes <= bytes_, "copy_from_host: ", bytes, " > ", bytes_);
  if (bytes > 0) std::memcpy(data_, src, bytes);
}

void DeviceBuffer::copy_to_host(void* dst, size_t bytes) const {
  S4KV_CHECK(bytes <= bytes_, "copy_to_host: ", bytes, " > ", bytes_);
  if (bytes > 0) std::memcpy(dst, data_, bytes);
}

// The emulated device has the copy engine unless S4KV_INT4_COPY=async (read at every call, so
// that a test can take both paths).
bool bulk_copy_enabled() {
  const char* env = std::getenv("S4KV_INT4_COPY");
  return env == nullptr || std::strcmp(env, "async") != 0;
}

// The map as emulation.h's bulk_copy_5d reads it.
void encode_byte_tensor_map(CUtensorMap* map, const void* base, int rank, const uint64_t* dims,
                            const uint64_t* strides, const uint32_t* box) {
  S4KV_CHECK(rank >= 1 && rank <= 5, "tensor map of rank ", rank);
  S4KV_CHECK(reinterpret_cast<uintptr_t>(base) % 16 == 0, "tensor map base not 16-byte aligned");
  S4KV_CHECK(box[0] % 16 == 0 && box[0] <= 64, "tensor map box rows of ", box[0], " bytes");
  emu::TensorMap m{};
  m.base = static_cast<const unsigned char*>(base);
  m.rank = rank;
  for (int i = 0; i < rank; ++i) {
    S4KV_CHECK(box[i] >= 1 && box[i] <= 256 && dims[i] >= 1, "tensor map dimension ", i);
    m.dims[i] = dims[i];
    m.box[i] = box[i];
    if (i + 1 < rank) {
      S4KV_CHECK(strides[i] % 16 == 0, "tensor map stride ", strides[i]);
      m.strides[i] = strides[i];
    }
  }
  std::memcpy(map, &m, sizeof m);
}

}  // namespace s4kv::backend::cuda
