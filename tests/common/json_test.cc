// parse_json: limits on depth, duplicate keys, object keys and array elements (stopping at the
// first violation and naming where it is), a refused UTF-8 byte order mark, document order of
// ordered objects, errors that name the source, no throws.
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

// {"k0": 0, "k1": 1, ...}
std::string object_of(size_t num_keys) {
  std::string s = "{";
  for (size_t i = 0; i < num_keys; ++i) {
    s += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  }
  return s + "}";
}

TEST(ParseJson, OrderedObjectsKeepDocumentOrderAndFindDuplicates) {
  // 200k keys: nlohmann's ordered_map alone scans the object for each key (quadratic).
  auto r = parse_ordered_json(object_of(200000), "body");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->size(), 200000u);
  size_t i = 0;
  for (const auto& [key, value] : r->items()) {
    ASSERT_EQ(key, "k" + std::to_string(i));
    ASSERT_EQ(value, i);
    ++i;
  }
  std::string dup = object_of(100000);
  dup.insert(dup.size() - 1, ",\"k500\":1");
  auto d = parse_ordered_json(dup, "body");
  ASSERT_FALSE(d.is_ok());
  EXPECT_NE(d.status().message().find("duplicate key \"k500\""), std::string::npos);
  // Allowed duplicates: the first position, the last value (as nlohmann's parser).
  JsonLimits lax;
  lax.allow_duplicate_keys = true;
  auto l = parse_ordered_json(R"({"a": 1, "b": 2, "a": 3})", "body", lax);
  ASSERT_TRUE(l.is_ok());
  EXPECT_EQ(l->dump(), R"({"a":3,"b":2})");
}

TEST(ParseJson, ObjectKeyAndArrayLimitsNameThePath) {
  JsonLimits limits;
  limits.max_object_keys = 3;
  limits.max_array_elements = 2;
  JsonViolation where;
  auto keys =
      parse_json(R"({"a": [{"b": {"w": 1, "x": 2, "y": 3, "z": 4}}]})", "body", limits, &where);
  ASSERT_FALSE(keys.is_ok());
  EXPECT_EQ(keys.status().message(), "body is not accepted: a[0].b has more than 3 keys");
  EXPECT_EQ(where.path, "a[0].b");
  EXPECT_EQ(where.top_level_key, "a");
  auto elements = parse_ordered_json(R"({"p": [[1, 2], [1, 2, 3]]})", "body", limits, &where);
  ASSERT_FALSE(elements.is_ok());
  EXPECT_EQ(elements.status().message(), "body is not accepted: p[1] has more than 2 elements");
  EXPECT_EQ(where.top_level_key, "p");
  auto top = parse_json("[1, 2, 3]", "body", limits, &where);
  ASSERT_FALSE(top.is_ok());
  EXPECT_NE(top.status().message().find("the top-level value has more than 2 elements"),
            std::string::npos);
  EXPECT_EQ(where.top_level_key, "");
  // The violation is reported, not the broken JSON after it: parsing stopped there.
  auto stopped = parse_json(R"({"a": 1, "b": 2, "c": 3, "d": 4, )", "body", limits);
  ASSERT_FALSE(stopped.is_ok());
  EXPECT_NE(stopped.status().message().find("more than 3 keys"), std::string::npos);
  EXPECT_TRUE(
      parse_json(R"({"a": [1, 2], "b": {"x": 1, "y": 2, "z": 3}})", "body", limits).is_ok());
}

TEST(ParseJson, ByteOrderMarkIsRefused) {
  for (const char* text : {"\xEF\xBB\xBF{}", "\xEF\xBB\xBF[1]"}) {
    auto r = parse_json(text, "body");
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().message(),
              "body is not valid JSON: it starts with a UTF-8 byte order mark");
    EXPECT_FALSE(parse_ordered_json(text, "body").is_ok());
  }
}

TEST(ParseJson, ScalarsAndNumbersAsNlohmannParsesThem) {
  auto r = parse_ordered_json(
      R"({"i": -3, "u": 18446744073709551615, "f": 1.5, "s": "x\u00e9", "n": null, "t": true})",
      "body");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(*r, OrderedJson::parse(
                    R"({"i": -3, "u": 18446744073709551615, "f": 1.5, "s": "x\u00e9", "n": null,
                        "t": true})"));
  EXPECT_TRUE((*r)["u"].is_number_unsigned());
  EXPECT_FALSE(parse_json("1e400", "body").is_ok());  // out of range, as nlohmann refuses
  EXPECT_FALSE(parse_json("", "body").is_ok());
  EXPECT_FALSE(parse_json("{} x", "body").is_ok());
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
