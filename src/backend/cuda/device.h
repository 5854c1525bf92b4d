// Device discovery and an RAII owner for device buffers. Host-side API: no CUDA headers
// leak to callers, so tests and the engine can ask "is there a device?" without them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace s4kv::backend::cuda {

// Number of usable CUDA devices; 0 when there is no driver or no device (never aborts).
int device_count();
// "NVIDIA H200 (sm_90, 139 GiB)"-style description of device 0; empty when none.
std::string device_description();
// Multiprocessors of device 0 (0 when there is none).
int device_sm_count();
// Device 0's name ("NVIDIA H200") and global memory in bytes (empty / 0 when there is none).
std::string device_name();
int64_t device_total_memory();

// Owns one cudaMalloc'd buffer. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  void copy_from_host(const void* src, size_t bytes);
  void copy_to_host(void* dst, size_t bytes) const;

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace s4kv::backend::cuda
