// read_file and MappedFile: size caps, missing files, directories.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "common/file.h"

namespace s4kv {
namespace {

std::string tmp_dir() {
  const char* d = std::getenv("S4KV_TEST_TMP");
  return d != nullptr ? d : "/tmp";
}

TEST(File, ReadsAndMaps) {
  const std::string path = tmp_dir() + "/file_test_a.txt";
  std::ofstream(path) << "hello";
  auto text = read_file(path, 100);
  ASSERT_TRUE(text.is_ok());
  EXPECT_EQ(*text, "hello");
  auto map = MappedFile::open(path);
  ASSERT_TRUE(map.is_ok());
  EXPECT_EQ(map->size(), 5u);
  EXPECT_EQ(static_cast<char>(map->bytes()[4]), 'o');
}

TEST(File, RefusesTooLargeMissingAndDirectories) {
  const std::string path = tmp_dir() + "/file_test_b.txt";
  std::ofstream(path) << "0123456789";
  EXPECT_EQ(read_file(path, 9).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(read_file(tmp_dir() + "/no_such_file", 9).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(read_file(tmp_dir(), 9).is_ok());
  EXPECT_FALSE(MappedFile::open(tmp_dir()).is_ok());
  EXPECT_TRUE(is_directory(tmp_dir()));
  EXPECT_TRUE(is_regular_file(path));
}

}  // namespace
}  // namespace s4kv
