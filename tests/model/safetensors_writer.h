// Test helpers: a minimal safetensors writer (valid files, laid out as the reference writer
// does: header padded with spaces to a multiple of 8, tensors packed in order) and raw
// builders for corrupt files, plus a per-test temporary directory under $S4KV_TEST_TMP.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/json.h"

namespace s4kv::model::testing {

struct TestTensor {
  std::string name;
  std::string dtype;  // safetensors name: "BF16", "I8" ...
  std::vector<int64_t> shape;
  std::string data;  // raw little-endian bytes
};

// u64 little-endian length, header text, data: no checks, so tests can build broken files.
inline std::string raw_safetensors(uint64_t header_len, const std::string& header,
                                   const std::string& data = "") {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>(header_len >> (8 * i));
  return out + header + data;
}

inline std::string raw_safetensors(const std::string& header, const std::string& data = "") {
  return raw_safetensors(header.size(), header, data);
}

inline std::string safetensors_bytes(const std::vector<TestTensor>& tensors,
                                     const std::map<std::string, std::string>& metadata = {}) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string data;
  for (const TestTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.data.size()}}};
    data += t.data;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return raw_safetensors(text, data);
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

// A fresh directory per test, removed when the test ends.
class TempDir {
 public:
  TempDir() {
    const char* root = std::getenv("S4KV_TEST_TMP");
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::path(root && *root ? root : "/tmp") /
            ("s4kv_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" +
             std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // Writes bytes to name inside the directory; returns the full path.
  std::string write(const std::string& name, const std::string& bytes) const {
    write_file(file(name), bytes);
    return file(name);
  }

 private:
  std::filesystem::path path_;
};

}  // namespace s4kv::model::testing
