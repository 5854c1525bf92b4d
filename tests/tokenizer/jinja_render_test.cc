// The Jinja subset feature by feature: tests/golden/chat/snippets.json (made by
// tools/make_chat_golden.py with jinja2 as transformers configures it) holds one template per
// feature, its variables and jinja2's output or error; we must agree byte for byte.
#include <gtest/gtest.h>

#include <string>

#include "common/file.h"
#include "tokenizer/jinja/json_value.h"
#include "tokenizer/jinja/template.h"
#include "tokenizer/jinja/value.h"

namespace s4kv::tokenizer::jinja {
namespace {

Result<std::string> render(const std::string& source,
                           const OrderedJson& vars = OrderedJson::object(),
                           const RenderLimits& limits = {}) {
  S4KV_ASSIGN_OR_RETURN(Template t, Template::parse(source));
  Variables v;
  for (const auto& [k, x] : vars.items()) v.emplace_back(k, from_json(x));
  return t.render(v, limits);
}

TEST(JinjaRenderTest, SnippetsMatchJinja2) {
  auto text = read_file("tests/golden/chat/snippets.json", 1u << 20);
  ASSERT_TRUE(text.is_ok()) << text.status().message();
  auto cases = parse_ordered_json(*text, "snippets.json");
  ASSERT_TRUE(cases.is_ok()) << cases.status().message();
  ASSERT_GE(cases->size(), 25u);
  for (const OrderedJson& c : *cases) {
    const std::string source = c["template"].get<std::string>();
    auto got = render(source, c["vars"]);
    if (c.contains("error")) {
      EXPECT_FALSE(got.is_ok()) << source << "\njinja2: " << c["error"];
    } else {
      ASSERT_TRUE(got.is_ok()) << source << "\n" << got.status().message();
      EXPECT_EQ(*got, c["text"].get<std::string>()) << source;
    }
  }
}

TEST(JinjaRenderTest, FloatReprMatchesPython) {
  EXPECT_EQ(float_repr(1.0), "1.0");
  EXPECT_EQ(float_repr(0.1), "0.1");
  EXPECT_EQ(float_repr(1e16), "1e+16");
  EXPECT_EQ(float_repr(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(float_repr(0.0001), "0.0001");
  EXPECT_EQ(float_repr(0.00001), "1e-05");
  EXPECT_EQ(float_repr(-2.5e-300), "-2.5e-300");
  EXPECT_EQ(float_repr(1.0 / 3), "0.3333333333333333");
}

TEST(JinjaRenderTest, TrailingNewlineDroppedOnceAndCrLfNormalized) {
  EXPECT_EQ(*render("a\n\n"), "a\n");
  EXPECT_EQ(*render("a\r\nb\rc"), "a\nb\nc");
}

TEST(JinjaRenderTest, StrftimeNowFormatsLocalTime) {
  char year[8];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::strftime(year, sizeof(year), "%Y", &tm);
  EXPECT_EQ(*render("{{ strftime_now('%Y') }}"), year);
}

TEST(JinjaRenderTest, KeyOrderOfInputIsKept) {
  auto vars = parse_ordered_json(R"({"t": {"type": "function", "b": 1, "a": 2}})", "v");
  ASSERT_TRUE(vars.is_ok());
  EXPECT_EQ(*render("{{ t | tojson }}", *vars), R"({"type": "function", "b": 1, "a": 2})");
}

}  // namespace
}  // namespace s4kv::tokenizer::jinja
