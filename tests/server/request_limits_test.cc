// Request limits (docs/server.md, "Limits"): a body over a JSON limit is refused while it is
// parsed, naming the field (F1: an object of 100k keys, in any field, stops at key 1025); the
// field limits are checked before any rendering or tokenizing (F2: messages; stop strings,
// stop token ids, logit_bias entries, tools, prompts); chat's echo is a boolean and a UTF-8
// byte order mark is refused (F7).
#include <gtest/gtest.h>

#include <string>

#include "common/json.h"
#include "server/openai_protocol.h"

namespace s4kv::server {
namespace {

OrderedJson J(const std::string& text) { return OrderedJson::parse(text); }

ModelContext tiny_context() {
  ModelContext m;
  m.served_model_names = {"s4kv-tiny"};
  m.vocab_size = 8192;
  m.max_model_len = 256;
  return m;
}

// {"k0": 0, "k1": 1, ...}
std::string object_of(size_t num_keys) {
  std::string s = "{";
  for (size_t i = 0; i < num_keys; ++i) {
    s += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  }
  return s + "}";
}

std::string list_of(size_t n, const std::string& item) {
  std::string s = "[";
  for (size_t i = 0; i < n; ++i) s += (i ? "," : "") + item;
  return s + "]";
}

const std::string kHi = R"({"role": "user", "content": "Hi"})";

// The body parsed as ApiServer parses it; the refusal's param and message.
struct Refusal {
  std::string message;
  std::string param;
};
std::optional<Refusal> body_refusal(const std::string& text) {
  JsonViolation where;
  auto r = parse_ordered_json(text, "request body", kRequestJsonLimits, &where);
  if (r.is_ok()) return std::nullopt;
  return Refusal{r.status().message(), where.top_level_key};
}

TEST(RequestJsonLimitsTest, ManyKeysInAnIgnoredFieldAreRefusedNamingIt) {
  const std::string body =
      R"({"messages": [)" + kHi + R"(], "ignored": )" + object_of(100000) + "}";
  auto refusal = body_refusal(body);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->param, "ignored");
  EXPECT_EQ(refusal->message, "request body is not accepted: ignored has more than 1024 keys");
  // At the limit the object is taken whole, in document order.
  auto ok = parse_ordered_json(R"({"ignored": )" + object_of(kMaxObjectKeys) + "}", "request body",
                               kRequestJsonLimits);
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  const OrderedJson& o = (*ok)["ignored"];
  ASSERT_EQ(o.size(), kMaxObjectKeys);
  size_t i = 0;
  for (const auto& [key, value] : o.items()) {
    EXPECT_EQ(key, "k" + std::to_string(i));
    EXPECT_EQ(value, i);
    ++i;
  }
}

TEST(RequestJsonLimitsTest, LogitBiasAndNestedObjectsNameTheirPath) {
  auto bias = body_refusal(R"({"logit_bias": )" + object_of(100000) + "}");
  ASSERT_TRUE(bias.has_value());
  EXPECT_EQ(bias->param, "logit_bias");
  JsonViolation where;
  auto nested =
      parse_ordered_json(R"({"tools": [{"function": {"parameters": )" + object_of(2000) + "}}]}",
                         "request body", kRequestJsonLimits, &where);
  ASSERT_FALSE(nested.is_ok());
  EXPECT_EQ(where.path, "tools[0].function.parameters");
  EXPECT_EQ(where.top_level_key, "tools");
  EXPECT_NE(nested.status().message().find("tools[0].function.parameters has more than 1024 keys"),
            std::string::npos)
      << nested.status().message();
}

TEST(RequestJsonLimitsTest, LongArraysAreRefusedNamingTheField) {
  auto refusal = body_refusal(R"({"prompt": )" + list_of(kMaxArrayElements + 1, "1") + "}");
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->param, "prompt");
  EXPECT_NE(refusal->message.find("prompt has more than 1048576 elements"), std::string::npos)
      << refusal->message;
}

TEST(RequestJsonLimitsTest, ArrayFieldsStopBeingParsedAtTheirLimit) {
  auto messages = body_refusal(R"({"messages": )" + list_of(200000, kHi) + "}");
  ASSERT_TRUE(messages.has_value());
  EXPECT_EQ(messages->param, "messages");
  EXPECT_EQ(messages->message,
            "request body is not accepted: messages has more than 2048 elements");
  auto stop = body_refusal(R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})");
  ASSERT_TRUE(stop.has_value());
  EXPECT_EQ(stop->param, "stop");
  // Only the top-level fields: a nested "messages" is any array.
  EXPECT_FALSE(body_refusal(R"({"x": {"messages": )" + list_of(3000, "1") + "}}").has_value());
  EXPECT_FALSE(body_refusal(R"({"messages": )" + list_of(kMaxMessages, kHi) + "}").has_value());
}

TEST(RequestJsonLimitsTest, ByteOrderMarkIsRefused) {
  auto refusal = body_refusal(
      "\xEF\xBB\xBF"
      R"({"prompt": "x"})");
  ASSERT_TRUE(refusal.has_value());
  EXPECT_NE(refusal->message.find("byte order mark"), std::string::npos) << refusal->message;
  EXPECT_FALSE(body_refusal(R"({"prompt": "x"})").has_value());
}

void expect_chat_refused(const OrderedJson& body, const std::string& param,
                         const std::string& needle) {
  ApiError error;
  EXPECT_FALSE(parse_chat_request(body, tiny_context(), error).has_value()) << param;
  EXPECT_EQ(error.status, 400);
  EXPECT_EQ(error.param.value_or(""), param) << error.message;
  EXPECT_NE(error.message.find(needle), std::string::npos) << error.message;
}

void expect_chat_accepted(const OrderedJson& body) {
  ApiError error;
  EXPECT_TRUE(parse_chat_request(body, tiny_context(), error).has_value()) << error.message;
}

TEST(RequestFieldLimitsTest, MessagesOverTheLimitAreRefusedBeforeRendering) {
  expect_chat_refused(J(R"({"messages": )" + list_of(200000, kHi) + "}"), "messages",
                      "at most 2048 messages per request, got 200000");
  expect_chat_accepted(J(R"({"messages": )" + list_of(kMaxMessages, kHi) + "}"));
}

TEST(RequestFieldLimitsTest, StopStringsStopTokenIdsLogitBiasAndTools) {
  const std::string msgs = R"({"messages": [)" + kHi + "]";
  expect_chat_refused(J(msgs + R"(, "stop": ["a", "b", "c", "d", "e"]})"), "stop",
                      "at most 4 stop strings per request, got 5");
  expect_chat_accepted(J(msgs + R"(, "stop": ["a", "b", "c", "d"]})"));
  expect_chat_refused(
      J(msgs + R"(, "stop_token_ids": )" + list_of(kMaxStopTokenIds + 1, "1") + "}"),
      "stop_token_ids", "at most 1024 stop token ids per request, got 1025");
  expect_chat_accepted(J(msgs + R"(, "stop_token_ids": )" + list_of(kMaxStopTokenIds, "1") + "}"));
  // Built directly: the parser's key limit would refuse it first.
  OrderedJson body = J(msgs + "}");
  for (size_t i = 0; i <= kMaxLogitBias; ++i) body["logit_bias"][std::to_string(i)] = 1.0;
  expect_chat_refused(body, "logit_bias", "at most 1024 entries per request, got 1025");
  body["logit_bias"].erase("0");
  expect_chat_accepted(body);
  const std::string tool = R"({"type": "function", "function": {"name": "f"}})";
  expect_chat_refused(J(msgs + R"(, "tools": )" + list_of(kMaxTools + 1, tool) + "}"), "tools",
                      "at most 128 tools per request, got 129");
  expect_chat_accepted(J(msgs + R"(, "tools": )" + list_of(kMaxTools, tool) + "}"));
}

TEST(RequestFieldLimitsTest, ChatEchoIsABooleanAndOnlyFalse) {
  const std::string msgs = R"({"messages": [)" + kHi + "]";
  for (const char* value : {R"("yes")", "1", "[]", "{}"}) {
    expect_chat_refused(J(msgs + R"(, "echo": )" + value + "}"), "echo", "expected boolean");
  }
  expect_chat_refused(J(msgs + R"(, "echo": true})"), "echo", "only supported as false");
  expect_chat_accepted(J(msgs + R"(, "echo": false})"));
  expect_chat_accepted(J(msgs + R"(, "echo": null})"));
}

}  // namespace
}  // namespace s4kv::server
