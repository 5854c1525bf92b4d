// Tokenizer options beyond the four real files (tests/golden/tokenizers/variants.json, made
// by tools/make_tokenizer_golden.py with Hugging Face tokenizers), the incremental
// detokenizer on split characters, and concurrent use from several threads.
#include <gtest/gtest.h>

#include <thread>

#include "common/json.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace s4kv::tokenizer {
namespace {

constexpr const char* kTiny = "models/s4kv-tiny/tokenizer.json";

Json tiny_json() {
  auto j = read_json_file(kTiny);
  S4KV_CHECK(j.is_ok(), j.status().message());
  return *j;
}

const Tokenizer& tiny() {
  static const Tokenizer t = [] {
    auto r = Tokenizer::from_file(kTiny);
    S4KV_CHECK(r.is_ok(), r.status().message());
    return std::move(r).value();
  }();
  return t;
}

TEST(TokenizerVariants, MatchHuggingFace) {
  auto variants = read_json_file("tests/golden/tokenizers/variants.json");
  ASSERT_TRUE(variants.is_ok()) << variants.status().message();
  int checked = 0;
  for (const Json& v : *variants) {
    Json j = tiny_json();
    for (const auto& [key, value] : v["patch"].items()) {
      if (key == "added_tokens_extra") {
        for (const Json& t : value) j["added_tokens"].push_back(t);
      } else {
        j[key] = value;
      }
    }
    auto tok = Tokenizer::from_json(j);
    ASSERT_TRUE(tok.is_ok()) << v["name"] << ": " << tok.status().message();
    for (const Json& c : v["cases"]) {
      const std::string text = c["text"];
      SCOPED_TRACE(v["name"].get<std::string>() + " " + Json(text).dump() +
                   (c["add_special_tokens"].get<bool>() ? " +special" : ""));
      auto ids = tok->encode(text, c["add_special_tokens"].get<bool>());
      ASSERT_TRUE(ids.is_ok());
      EXPECT_EQ(*ids, c["ids"].get<std::vector<int32_t>>());
      EXPECT_EQ(tok->decode(*ids, false), c["decoded"].get<std::string>());
      EXPECT_EQ(tok->decode(*ids, true), c["decoded_skip"].get<std::string>());
      ++checked;
    }
  }
  EXPECT_GE(checked, 200);
}

TEST(Tokenizer, SpecialTokenTextBecomesSpecialToken) {
  auto ids = tiny().encode("a<|im_start|>b", false);
  ASSERT_TRUE(ids.is_ok());
  ASSERT_EQ(ids->size(), 3u);
  EXPECT_EQ((*ids)[1], 8190);
  EXPECT_TRUE(tiny().is_special(8190));
  EXPECT_EQ(tiny().token_to_id("<|im_end|>"), 8191);
  EXPECT_EQ(tiny().id_to_token(8191), "<|im_end|>");
  EXPECT_EQ(tiny().decode(*ids, true), "ab");
}

TEST(Tokenizer, RefusesInvalidUtf8AndSkipsUnknownIds) {
  auto r = tiny().encode("ok \xC3\x28", false);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("byte offset 3"), std::string::npos);
  const std::vector<int32_t> ids = {-5, 72, 1 << 30, 72};
  EXPECT_EQ(tiny().decode(ids, false), tiny().decode(std::vector<int32_t>{72, 72}, false));
  EXPECT_FALSE(tiny().id_to_token(-1));
  EXPECT_FALSE(tiny().id_to_token(tiny().vocab_size()));
}

TEST(IncrementalDetokenizer, HoldsPartialCharactersUntilComplete) {
  const std::string text = "x\xF0\x9F\x98\x80y \xE6\x97\xA5\xE6\x9C\xAC";  // x😀y 日本
  auto ids = tiny().encode(text, false);
  ASSERT_TRUE(ids.is_ok());
  IncrementalDetokenizer d(tiny(), false);
  std::string all;
  int held = 0;
  for (int32_t id : *ids) {
    const std::string piece = d.add(id);
    EXPECT_EQ(find_invalid_utf8(piece), std::string_view::npos);  // never a partial character
    held += d.has_pending() ? 1 : 0;
    all += piece;
  }
  all += d.finish();
  EXPECT_EQ(all, text);
  EXPECT_GT(held, 0);  // the tiny vocabulary splits these characters into byte tokens
}

TEST(IncrementalDetokenizer, FlushesTruncatedSequenceAsReplacement) {
  const auto lead = tiny().token_to_id("\xC3\xA6");  // byte 0xE6 (a 3-byte lead), shown as U+00E6
  ASSERT_TRUE(lead.has_value());
  IncrementalDetokenizer d(tiny(), false);
  EXPECT_EQ(d.add(*lead), "");
  EXPECT_TRUE(d.has_pending());
  EXPECT_EQ(d.finish(), "\xEF\xBF\xBD");
  const std::vector<int32_t> one = {*lead};
  EXPECT_EQ(tiny().decode(one, false), "\xEF\xBF\xBD");
  // Lead byte then a byte that cannot continue it: U+FFFD, then the byte's own reading.
  IncrementalDetokenizer d2(tiny(), false);
  std::string s = d2.add(*lead);
  s += d2.add(tiny().token_to_id("a").value());
  s += d2.finish();
  EXPECT_EQ(s,
            "\xEF\xBF\xBD"
            "a");
}

TEST(Tokenizer, ConcurrentEncodeGivesSameIds) {
  const std::string text =
      "Concurrent callers share one tokenizer and its word cache. 同時に呼び出す。 1234567890";
  auto want = tiny().encode(text, false);
  ASSERT_TRUE(want.is_ok());
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        auto got = tiny().encode(text + std::to_string(i % 7), false);
        if (!got.is_ok() || got->size() < want->size()) ++bad[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int b : bad) EXPECT_EQ(b, 0);
}

}  // namespace
}  // namespace s4kv::tokenizer
