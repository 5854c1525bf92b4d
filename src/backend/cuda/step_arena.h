// Host pinned memory and the step arena: a step's small host arrays packed into one pinned
// buffer and copied to the device with one cudaMemcpyAsync. Host code (includes the CUDA
// runtime header, no kernels).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstring>
#include <span>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "common/check.h"

namespace s4kv::backend::cuda {

// Host pinned memory, freed on destruction.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) S4KV_CUDA_CHECK(cudaMallocHost(&data_, bytes));
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~PinnedBuffer() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }
  std::byte* data() const { return static_cast<std::byte*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Per-step batch arrays packed into one pinned buffer and copied with one cudaMemcpyAsync.
// Two host buffers, used in turn (each clear() moves to the other): the copy of a step still in
// flight reads the one its step packed while the next step packs the other. A buffer is packed
// again two clear()s later, when the caller (at most two steps in flight, waited for in order)
// knows that its copy is done. One device buffer: the copies and the kernels that read it are
// in one stream's order.
class StepArena {
 public:
  explicit StepArena(size_t bytes)
      : host_{PinnedBuffer(bytes), PinnedBuffer(bytes)}, device_(bytes) {}
  void clear() {
    used_ = 0;
    current_ ^= 1;
  }
  // Copies n elements to the arena, in room for `room` (>= n; a captured step's arrays keep
  // the same addresses whatever this step's counts); returns their device address.
  template <typename T>
  const T* put(const T* src, size_t n, size_t room) {
    S4KV_CHECK(n <= room, "cuda step arena: ", n, " elements in room for ", room);
    T* dst = alloc<T>(room);
    if (n > 0) std::memcpy(dst, src, n * sizeof(T));
    return device_of(dst);
  }
  template <typename T>
  const T* put(const T* src, size_t n) {
    return put(src, n, n);
  }
  template <typename T>
  const T* put(std::span<const T> src, size_t room) {
    return put(src.data(), src.size(), room);
  }
  template <typename T>
  T* alloc(size_t n) {
    used_ = (used_ + 15) / 16 * 16;
    S4KV_CHECK(used_ + n * sizeof(T) <= host().bytes(), "cuda step arena: ", used_ + n * sizeof(T),
               " bytes > ", host().bytes());
    T* p = reinterpret_cast<T*>(host().data() + used_);
    used_ += n * sizeof(T);
    return p;
  }
  template <typename T>
  const T* device_of(const T* in_host) const {
    const auto offset = reinterpret_cast<const std::byte*>(in_host) - host().data();
    return reinterpret_cast<const T*>(static_cast<const std::byte*>(device_.data()) + offset);
  }
  void upload(cudaStream_t stream) {
    if (used_ > 0) {
      S4KV_CUDA_CHECK(
          cudaMemcpyAsync(device_.data(), host().data(), used_, cudaMemcpyHostToDevice, stream));
    }
  }

 private:
  const PinnedBuffer& host() const { return host_[current_]; }

  PinnedBuffer host_[2];
  DeviceBuffer device_;
  size_t used_ = 0;
  int current_ = 0;
};

}  // namespace s4kv::backend::cuda
