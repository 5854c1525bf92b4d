#include "common/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace s4kv {
namespace {

std::string errno_text() { return std::strerror(errno); }

// Opens path read-only and checks it is a regular file; returns the fd or an error.
Result<int> open_regular(const std::string& path, struct stat* st) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found(path + ": no such file");
    return io_error(path + ": cannot open: " + errno_text());
  }
  if (::fstat(fd, st) != 0) {
    std::string err = errno_text();
    ::close(fd);
    return io_error(path + ": cannot stat: " + err);
  }
  if (!S_ISREG(st->st_mode)) {
    ::close(fd);
    return invalid_argument(path + ": not a regular file");
  }
  return fd;
}

}  // namespace

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

Result<std::string> read_file(const std::string& path, size_t max_bytes) {
  struct stat st {};
  S4KV_ASSIGN_OR_RETURN(int fd, open_regular(path, &st));
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return invalid_argument(path + ": file is " + std::to_string(st.st_size) +
                            " bytes, more than the limit of " + std::to_string(max_bytes));
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string err = n < 0 ? errno_text() : "unexpected end of file";
      ::close(fd);
      return io_error(path + ": read failed: " + err);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return out;
}

Result<MappedFile> MappedFile::open(const std::string& path) {
  struct stat st {};
  S4KV_ASSIGN_OR_RETURN(int fd, open_regular(path, &st));
  MappedFile f;
  f.path_ = path;
  f.size_ = static_cast<size_t>(st.st_size);
  if (f.size_ > 0) {
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      std::string err = errno_text();
      ::close(fd);
      return io_error(path + ": cannot map: " + err);
    }
    f.data_ = static_cast<const std::byte*>(p);
  }
  ::close(fd);
  return f;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    this->~MappedFile();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace s4kv
