// int4_kivi reference against blocks computed independently with numpy
// (tools/make_kivi_golden.py, tests/golden/kivi): the bytes must match exactly. Each case's
// .bin holds keys [B, D] f32, values [B, D] f32, then the expected block. Cases with
// "value_hadamard" (format v2) rotate each value row with hadamard_ref before quantizing, as
// the commit does.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/file.h"
#include "common/json.h"
#include "kv/hadamard.h"
#include "kv/int4_kivi_layout.h"
#include "kv/int4_kivi_ref.h"

namespace s4kv::kv {
namespace {

constexpr const char* kDir = "tests/golden/kivi";

std::vector<float> floats_at(const std::string& data, size_t offset, size_t count) {
  std::vector<float> v(count);
  std::memcpy(v.data(), data.data() + offset, count * sizeof(float));  // little-endian host
  return v;
}

// First differing byte, named by part, for a readable failure.
std::string first_difference(const Int4KiviLayout& l, const std::vector<std::byte>& got,
                             const std::string& want) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (static_cast<uint8_t>(got[i]) == static_cast<uint8_t>(want[i])) continue;
    const char* part = i < l.k_scale_offset   ? "k_codes"
                       : i < l.k_zero_offset  ? "k_scale"
                       : i < l.v_codes_offset ? "k_zero"
                       : i < l.v_scale_offset ? "v_codes"
                       : i < l.v_zero_offset  ? "v_scale"
                                              : "v_zero";
    return "byte " + std::to_string(i) + " (" + part + "): got " +
           std::to_string(static_cast<int>(got[i])) + ", numpy " +
           std::to_string(static_cast<uint8_t>(want[i]));
  }
  return "";
}

TEST(Int4KiviGolden, MatchesNumpyByteForByte) {
  auto manifest = read_json_file(std::string(kDir) + "/cases.json");
  ASSERT_TRUE(manifest.is_ok()) << manifest.status().message();
  const int d = manifest->at("head_dim").get<int>();
  const auto& cases = manifest->at("cases");
  ASSERT_GE(cases.size(), 4u);
  int hadamard_cases = 0;
  for (const auto& c : cases) {
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(name);
    auto layout = Int4KiviLayout::create(c.at("block_size").get<int>(), d,
                                         c.at("value_group_size").get<int>());
    ASSERT_TRUE(layout.is_ok()) << layout.status().message();
    const Int4KiviLayout& l = *layout;
    ASSERT_EQ(c.at("block_bytes").get<size_t>(), l.block_bytes);
    auto data = read_file(std::string(kDir) + "/" + c.at("file").get<std::string>(), 1u << 20);
    ASSERT_TRUE(data.is_ok()) << data.status().message();
    const size_t n = static_cast<size_t>(l.block_size) * static_cast<size_t>(d);
    ASSERT_EQ(data->size(), 2 * n * sizeof(float) + l.block_bytes);

    const auto keys = floats_at(*data, 0, n);
    auto values = floats_at(*data, n * sizeof(float), n);
    if (c.value("value_hadamard", false)) {
      ++hadamard_cases;
      for (size_t t = 0; t < n; t += static_cast<size_t>(d)) {
        hadamard_ref(std::span<float>(values.data() + t, static_cast<size_t>(d)));
      }
    }
    const std::string want = data->substr(2 * n * sizeof(float));
    std::vector<std::byte> got(l.block_bytes);
    quantize_block_ref(l, keys, values, got);
    EXPECT_EQ(first_difference(l, got, want), "");
  }
  EXPECT_GE(hadamard_cases, 1);
}

}  // namespace
}  // namespace s4kv::kv
