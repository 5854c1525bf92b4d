// backend/cuda/device.h on the CPU, for the emulation tests (S4KV_CUDA_EMULATION): one device,
// whose buffers are host memory, so that tests written for the GPU run their kernels through
// backend/cuda/emulation.h unchanged.
#include <cstdlib>
#include <cstring>
#include <utility>

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

}  // namespace s4kv::backend::cuda
