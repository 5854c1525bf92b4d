// generation_config.json: EOS ids as an integer or a list, checked against the vocabulary.
#include "engine/generation_config.h"

#include <gtest/gtest.h>

#include <vector>

namespace s4kv::engine {
namespace {

TEST(GenerationConfig, EosIdAsIntegerOrList) {
  auto one = parse_generation_config(Json::parse(R"({"eos_token_id": 7})"), "g", 100);
  ASSERT_TRUE(one.is_ok()) << one.status().message();
  EXPECT_EQ(one->eos_token_ids, std::vector<int32_t>{7});
  auto list = parse_generation_config(
      Json::parse(R"({"eos_token_id": [7, 9], "temperature": 0.6, "top_k": 20,
                      "top_p": 0.8, "repetition_penalty": 1.05, "do_sample": true})"),
      "g", 100);
  ASSERT_TRUE(list.is_ok()) << list.status().message();
  EXPECT_EQ(list->eos_token_ids, (std::vector<int32_t>{7, 9}));
  EXPECT_EQ(list->temperature, 0.6);
  EXPECT_EQ(list->top_k, 20);
  EXPECT_EQ(list->top_p, 0.8);
  EXPECT_EQ(list->repetition_penalty, 1.05);
  EXPECT_FALSE(list->min_p.has_value());
}

TEST(GenerationConfig, BadFieldsNameTheField) {
  auto oov = parse_generation_config(Json::parse(R"({"eos_token_id": [7, 100]})"), "g", 100);
  ASSERT_FALSE(oov.is_ok());
  EXPECT_NE(oov.status().message().find("eos_token_id[1]"), std::string::npos)
      << oov.status().message();
  auto type = parse_generation_config(Json::parse(R"({"top_k": "20"})"), "g", 100);
  ASSERT_FALSE(type.is_ok());
  EXPECT_NE(type.status().message().find("top_k"), std::string::npos);
  EXPECT_FALSE(parse_generation_config(Json::parse("[]"), "g", 100).is_ok());
}

TEST(GenerationConfig, MissingFileIsEmpty) {
  auto g = read_generation_config("/nonexistent-s4kv-dir", 100);
  ASSERT_TRUE(g.is_ok());
  EXPECT_TRUE(g->eos_token_ids.empty());
}

TEST(GenerationConfig, EosIdsUnionConfigJson) {
  GenerationConfig g;
  g.eos_token_ids = {128009, 128001};
  const std::vector<int64_t> config = {128001, 128008};
  EXPECT_EQ(resolve_eos_token_ids(g, config), (std::vector<int32_t>{128009, 128001, 128008}));
  EXPECT_EQ(resolve_eos_token_ids(GenerationConfig{}, config),
            (std::vector<int32_t>{128001, 128008}));
}

}  // namespace
}  // namespace s4kv::engine
