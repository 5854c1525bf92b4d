// Failure modes of the Jinja subset: every one is a Status with a clear message naming the
// template line, never a crash — syntax errors, undefined values used wrongly (and the
// Undefined semantics templates rely on), raise_exception, the step budget, the output cap,
// deep macro recursion, deeply nested source, and the sandbox's refusals.
#include <gtest/gtest.h>

#include <string>

#include "tokenizer/jinja/json_value.h"
#include "tokenizer/jinja/template.h"

namespace s4kv::tokenizer::jinja {
namespace {

Result<std::string> render(const std::string& source, const std::string& vars_json = "{}",
                           const RenderLimits& limits = {}) {
  S4KV_ASSIGN_OR_RETURN(Template t, Template::parse(source));
  S4KV_ASSIGN_OR_RETURN(OrderedJson vars, parse_ordered_json(vars_json, "vars"));
  Variables v;
  for (const auto& [k, x] : vars.items()) v.emplace_back(k, from_json(x));
  return t.render(v, limits);
}

void expect_error(const Result<std::string>& r, StatusCode code, const std::string& message) {
  ASSERT_FALSE(r.is_ok()) << "rendered: " << *r;
  EXPECT_EQ(r.status().code(), code) << r.status().message();
  EXPECT_EQ(r.status().message(), message);
}

TEST(JinjaSyntaxTest, ErrorsNameTheLine) {
  const auto code = StatusCode::kInvalidArgument;
  expect_error(
      render("a\nb\n{% if x %}\nno end"), code,
      "chat template syntax error: line 4: unexpected end of template; looking for 'elif', "
      "'else' or 'endif' (the innermost open block is 'if')");
  expect_error(
      render("{{ 1 + }}"), code,
      "chat template syntax error: line 1: expected an expression, got end of print statement");
  expect_error(
      render("x\n{% for a in b %}{% endif %}"), code,
      "chat template syntax error: line 2: unexpected tag 'endif'; looking for 'endfor' or "
      "'else' (the innermost open block is 'for')");
  expect_error(render("\n\n{{ x | nosuchfilter }}"), code,
               "chat template syntax error: line 3: no filter named 'nosuchfilter'");
  expect_error(render("{{ x is nosuchtest }}"), code,
               "chat template syntax error: line 1: no test named 'nosuchtest'");
  expect_error(
      render("{% include 'other.jinja' %}"), code,
      "chat template syntax error: line 1: the 'include' tag is not supported in chat templates");
  expect_error(render("{% frobnicate %}"), code,
               "chat template syntax error: line 1: encountered unknown tag 'frobnicate'");
  expect_error(render("{% break %}"), code,
               "chat template syntax error: line 1: 'break' outside of a loop");
  expect_error(render("{{ 'open }}"), code,
               "chat template syntax error: line 1: unexpected end of string literal");
  expect_error(render("{# never closed"), code,
               "chat template syntax error: line 1: missing end of comment tag");
  expect_error(render("{{ (1 ] }}"), code, "chat template syntax error: line 1: unexpected ']'");
  expect_error(render(std::string("\xff")), code,
               "chat template syntax error: line 1: template is not valid UTF-8");
}

TEST(JinjaSyntaxTest, DeeplyNestedSourceIsRefusedNotACrash) {
  std::string deep = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  auto r = render(deep);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("nesting is deeper than"), std::string::npos);
  std::string blocks;
  for (int i = 0; i < 10000; ++i) blocks += "{% if true %}";
  EXPECT_FALSE(render(blocks).is_ok());
  EXPECT_FALSE(render("{{ " + std::string(100000, '-') + "1 }}").is_ok());
  EXPECT_FALSE(render("{{ " + std::string(50000, '[') + " }}").is_ok());
}

TEST(JinjaUndefinedTest, SemanticsTemplatesRelyOn) {
  const std::string msg = R"({"m": {"role": "assistant", "content": "x"}})";
  EXPECT_EQ(
      *render(
          "{{ m.tool_calls is defined }}|{{ m.tool_calls is not defined }}|{% if m.tool_calls "
          "%}T{% endif %}|"
          "{{ m.tool_calls }}|{{ m.tool_calls | length }}|{% for c in m.tool_calls %}x{% endfor %}|"
          "{{ m.tool_calls is none }}|{{ not m.tool_calls }}|{{ m.tool_calls ~ 'z' }}|{{ m['nope'] "
          "is defined }}",
          msg),
      "False|True|||0||False|True|z|False");
  expect_error(render("\n{{ m.tool_calls.name }}", msg), StatusCode::kInvalidArgument,
               "chat template error at line 2: 'dict object' has no attribute 'tool_calls'");
  expect_error(render("{{ 'a' + m.nope }}", msg), StatusCode::kInvalidArgument,
               "chat template error at line 1: 'dict object' has no attribute 'nope'");
  expect_error(render("{{ messages[0]['role'] }}", R"({"messages": []})"),
               StatusCode::kInvalidArgument,
               "chat template error at line 1: list object has no element 0");
  expect_error(render("{{ nothing() }}"), StatusCode::kInvalidArgument,
               "chat template error at line 1: 'nothing' is undefined");
  expect_error(render("{{ 'a' + none }}"), StatusCode::kInvalidArgument,
               "chat template error at line 1: can only concatenate str (not \"NoneType\") to str");
  expect_error(render("{{ m.content2.startswith('<think>') }}", msg), StatusCode::kInvalidArgument,
               "chat template error at line 1: 'dict object' has no attribute 'content2'");
}

TEST(JinjaUndefinedTest, InUndefinedIsFalseLikeJinja) {
  EXPECT_EQ(*render("{{ 'x' in nothing }}"), "False");
}

TEST(JinjaSandboxTest, RaiseExceptionMessageIsPropagated) {
  expect_error(
      render("ok\n{{ raise_exception('Conversation roles must alternate user/assistant') }}"),
      StatusCode::kInvalidArgument,
      "chat template raised an exception at line 2: Conversation roles must alternate "
      "user/assistant");
}

TEST(JinjaSandboxTest, StepBudget) {
  RenderLimits limits;
  limits.max_steps = 100000;
  auto r =
      render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
             "{}", limits);
  expect_error(r, StatusCode::kResourceExhausted,
               "chat template error at line 1: step budget exceeded: the template ran more than "
               "100000 steps");
  // The default budget stops an unbounded-looking loop too.
  auto d = render(
      "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}");
  ASSERT_FALSE(d.is_ok());
  EXPECT_EQ(d.status().code(), StatusCode::kResourceExhausted);
  expect_error(render("{{ range(100001) | length }}"), StatusCode::kInvalidArgument,
               "chat template error at line 1: Range too big. The sandbox blocks ranges larger "
               "than MAX_RANGE (100000).");
}

TEST(JinjaSandboxTest, OutputCap) {
  RenderLimits limits;
  limits.max_output_bytes = 1000;
  auto r = render("{% for i in range(100) %}0123456789AB{% endfor %}", "{}", limits);
  expect_error(r, StatusCode::kResourceExhausted,
               "chat template error at line 1: output size cap exceeded: more than 1000 bytes");
  EXPECT_FALSE(render("{{ 'x' * 100000000000 }}").is_ok());
  EXPECT_FALSE(render("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(64) %}"
                      "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}")
                   .is_ok());
}

TEST(JinjaSandboxTest, DeepMacroRecursion) {
  auto r = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  expect_error(r, StatusCode::kResourceExhausted,
               "chat template error at line 1: maximum recursion depth exceeded: more than 64 "
               "nested macro calls");
  EXPECT_EQ(
      *render(
          "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}"),
      "54321");
}

TEST(JinjaSandboxTest, DunderAndMutatingAttributesRefused) {
  const std::string vars = R"({"d": {"k": 1}, "l": [1], "s": "x"})";
  EXPECT_EQ(
      *render("{{ d.__class__ is defined }}|{{ s.__class__ }}|{{ d.update is defined }}", vars),
      "False||False");
  expect_error(
      render("{{ d.__class__.__name__ }}", vars), StatusCode::kInvalidArgument,
      "chat template error at line 1: access to attribute '__class__' of 'dict' object is unsafe.");
  expect_error(
      render("{{ s.__class__.__mro__ }}", vars), StatusCode::kInvalidArgument,
      "chat template error at line 1: access to attribute '__class__' of 'str' object is unsafe.");
  expect_error(
      render("{{ l.append(2) }}", vars), StatusCode::kInvalidArgument,
      "chat template error at line 1: access to attribute 'append' of 'list' object is unsafe.");
  expect_error(
      render("{{ d.pop('k') }}", vars), StatusCode::kInvalidArgument,
      "chat template error at line 1: access to attribute 'pop' of 'dict' object is unsafe.");
  expect_error(
      render("{{ d['__init__']() }}", vars), StatusCode::kInvalidArgument,
      "chat template error at line 1: access to attribute '__init__' of 'dict' object is unsafe.");
  expect_error(render("{% set d.k = 2 %}", vars), StatusCode::kInvalidArgument,
               "chat template error at line 1: can only assign attributes of a namespace object, "
               "not of 'd'");
}

TEST(JinjaSandboxTest, SelfReferencingNamespaceDoesNotHang) {
  auto r = render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("maximum recursion depth"), std::string::npos);
  EXPECT_FALSE(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns | tojson }}").is_ok());
}

TEST(JinjaSandboxTest, TypeErrorsAreStatuses) {
  EXPECT_FALSE(render("{{ 1 / 0 }}").is_ok());
  EXPECT_FALSE(render("{{ 9223372036854775807 + 1 }}").is_ok());
  EXPECT_FALSE(render("{{ 'a' < 1 }}").is_ok());
  EXPECT_FALSE(render("{{ none | tojson }}{{ nothing | tojson }}").is_ok());
  EXPECT_FALSE(render("{% for x in 3 %}{% endfor %}").is_ok());
  EXPECT_FALSE(render("{{ 'abc'[::0] }}").is_ok());
  EXPECT_FALSE(render("{{ 'x'.startswith() }}").is_ok());
  EXPECT_FALSE(render("{{ 'x' | trim(1, 2, 3) }}").is_ok());
  EXPECT_FALSE(render("{% set a, b = [1] %}").is_ok());
  EXPECT_FALSE(render("{{ 3() }}").is_ok());
}

}  // namespace
}  // namespace s4kv::tokenizer::jinja
