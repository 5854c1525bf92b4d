// parse_json: limits on depth and duplicate keys, errors that name the source, no throws.
#include <gtest/gtest.h>

#include <string>

#include "common/json.h"

namespace s4kv {
namespace {

TEST(ParseJson, ParsesObject) {
  auto r = parse_json(R"({"a": 1, "b": [true, null, "x"]})", "test");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->at("a"), 1);
  EXPECT_EQ(r->at("b").size(), 3u);
}

TEST(ParseJson, InvalidJsonNamesSource) {
  auto r = parse_json("{\"a\": ", "dir/config.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message().rfind("dir/config.json is not valid JSON: ", 0), 0u)
      << r.status().message();
}

TEST(ParseJson, RefusesDeepNesting) {
  std::string deep(65, '[');
  deep += std::string(65, ']');
  auto r = parse_json(deep, "body");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("nesting deeper than 64"), std::string::npos);
  std::string ok(64, '[');
  ok += std::string(64, ']');
  EXPECT_TRUE(parse_json(ok, "body").is_ok());
}

TEST(ParseJson, RefusesDuplicateKeysAtAnyDepth) {
  auto r = parse_json(R"({"a": {"x": 1, "x": 2}})", "body");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("duplicate key \"x\""), std::string::npos);
  // The same key in sibling objects is fine.
  EXPECT_TRUE(parse_json(R"([{"x": 1}, {"x": 2}])", "body").is_ok());
  JsonLimits lax;
  lax.allow_duplicate_keys = true;
  EXPECT_TRUE(parse_json(R"({"x": 1, "x": 2})", "body", lax).is_ok());
}

TEST(ParseJson, InvalidUtf8IsAnErrorNotACrash) {
  auto r = parse_json("{\"a\": \"\xff\xfe\"}", "body");
  EXPECT_FALSE(r.is_ok());
}

TEST(JsonBrief, ShortensLongValues) {
  Json v = std::string(200, 'a');
  EXPECT_LE(json_brief(v).size(), 80u);
  EXPECT_EQ(json_brief(Json(12)), "12");
  EXPECT_EQ(json_type_name(Json("x")), "string");
  EXPECT_EQ(json_type_name(Json(1.5)), "number");
  EXPECT_EQ(json_type_name(Json(3)), "integer");
}

}  // namespace
}  // namespace s4kv
