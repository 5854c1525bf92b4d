// Files: whole-file reads with a size cap, and read-only memory maps (RAII).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "common/status.h"

namespace s4kv {

// Reads a regular file; refuses directories and files larger than max_bytes.
Result<std::string> read_file(const std::string& path, size_t max_bytes);

bool is_directory(const std::string& path);
bool is_regular_file(const std::string& path);

// A read-only, private memory map of a whole file. Move-only; unmaps on destruction.
class MappedFile {
 public:
  static Result<MappedFile> open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace s4kv
