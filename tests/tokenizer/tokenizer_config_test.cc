// Malformed or unsupported tokenizer.json: a Status naming the field, never a crash.
#include <gtest/gtest.h>

#include <functional>

#include "common/json.h"
#include "tokenizer/tokenizer.h"

namespace s4kv::tokenizer {
namespace {

Json tiny_json() {
  static const Json j = [] {
    auto r = read_json_file("models/s4kv-tiny/tokenizer.json");
    S4KV_CHECK(r.is_ok(), r.status().message());
    return *r;
  }();
  return j;
}

struct BadCase {
  const char* name;
  std::function<void(Json&)> edit;
  const char* expect;  // substring of the error message
};

TEST(TokenizerConfig, TinyLoads) { EXPECT_TRUE(Tokenizer::from_json(tiny_json()).is_ok()); }

TEST(TokenizerConfig, RefusesWithClearMessages) {
  const std::vector<BadCase> cases = {
      {"not object", [](Json& j) { j = Json::array(); }, "must be a JSON object"},
      {"no model", [](Json& j) { j.erase("model"); }, "model is missing"},
      {"wordpiece", [](Json& j) { j["model"]["type"] = "WordPiece"; }, "model.type \"WordPiece\""},
      {"unigram", [](Json& j) { j["model"]["type"] = "Unigram"; }, "supported: BPE"},
      {"dropout", [](Json& j) { j["model"]["dropout"] = 0.1; }, "model.dropout"},
      {"byte fallback", [](Json& j) { j["model"]["byte_fallback"] = true; }, "byte_fallback"},
      {"prefix", [](Json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
       "continuing_subword_prefix"},
      {"vocab type", [](Json& j) { j["model"]["vocab"] = Json::array(); },
       "model.vocab must be an object"},
      {"vocab id", [](Json& j) { j["model"]["vocab"]["zzz"] = -1; }, "model.vocab[\"zzz\"]"},
      {"vocab id str", [](Json& j) { j["model"]["vocab"]["zzz"] = "7"; }, "token id"},
      {"vocab huge id", [](Json& j) { j["model"]["vocab"]["zzz"] = 2000000000; },
       "above the supported"},
      {"dup id", [](Json& j) { j["model"]["vocab"]["zzz"] = 5; }, "duplicate id"},
      {"merges type", [](Json& j) { j["model"]["merges"] = "a b"; },
       "model.merges must be an array"},
      {"merge 3 parts", [](Json& j) { j["model"]["merges"][0] = "a b c"; }, "merges[0]"},
      {"merge no space", [](Json& j) { j["model"]["merges"][1] = "ab"; }, "merges[1]"},
      {"merge number", [](Json& j) { j["model"]["merges"][2] = 7; }, "merges[2]"},
      {"merge unknown",
       [](Json& j) {
         j["model"]["merges"][0] = Json::array({"\xE2\x82\xAC", "q"});
       },
       "not in model.vocab"},
      {"normalizer",
       [](Json& j) {
         j["normalizer"] = {{"type", "Lowercase"}};
       },
       "normalizer type \"Lowercase\""},
      {"normalizer shape", [](Json& j) { j["normalizer"] = 5; }, "normalizer"},
      {"no pretok", [](Json& j) { j["pre_tokenizer"] = nullptr; }, "byte-level BPE only"},
      {"metaspace",
       [](Json& j) {
         j["pre_tokenizer"] = {{"type", "Metaspace"}};
       },
       "type \"Metaspace\""},
      {"bad regex",
       [](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(["; },
       "does not compile"},
      {"bad behavior",
       [](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Split"; }, "behavior"},
      {"pattern shape", [](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = "x"; },
       "pattern must be"},
      {"bytelevel first",
       [](Json& j) {
         auto& p = j["pre_tokenizer"]["pretokenizers"];
         std::swap(p[0], p[1]);
       },
       "follows ByteLevel"},
      {"no bytelevel", [](Json& j) { j["pre_tokenizer"]["pretokenizers"].erase(1); },
       "no ByteLevel"},
      {"decoder",
       [](Json& j) {
         j["decoder"] = {{"type", "WordPiece"}};
       },
       "decoder type"},
      {"no decoder", [](Json& j) { j["decoder"] = nullptr; }, "decoder is null"},
      {"post",
       [](Json& j) {
         j["post_processor"] = {{"type", "RobertaProcessing"}};
       },
       "RobertaProcessing"},
      {"template",
       [](Json& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"},
                                {"single", Json::array()},
                                {"special_tokens", Json::object()}};
       },
       "no Sequence A"},
      {"template id",
       [](Json& j) {
         j["post_processor"] = Json::parse(
             R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"X"}},{"Sequence":{"id":"A"}}],"special_tokens":{"X":{"ids":[99999]}}})");
       },
       "unknown id 99999"},
      {"added type", [](Json& j) { j["added_tokens"] = Json::object(); },
       "added_tokens must be an array"},
      {"added content", [](Json& j) { j["added_tokens"][0]["content"] = ""; }, "content is empty"},
      {"added flag", [](Json& j) { j["added_tokens"][0]["lstrip"] = "yes"; },
       "lstrip must be a boolean"},
      {"added id", [](Json& j) { j["added_tokens"][0].erase("id"); },
       "added_tokens[0].id is missing"},
  };
  for (const BadCase& c : cases) {
    Json j = tiny_json();
    c.edit(j);
    auto t = Tokenizer::from_json(j);
    ASSERT_FALSE(t.is_ok()) << c.name;
    EXPECT_NE(t.status().message().find(c.expect), std::string::npos)
        << c.name << ": " << t.status().message();
  }
}

TEST(TokenizerConfig, FileErrorsNameThePath) {
  auto missing = Tokenizer::from_file("tests/no/such/tokenizer.json");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("tests/no/such/tokenizer.json"), std::string::npos);
  auto not_json = Tokenizer::from_file("models/s4kv-tiny/README.md");
  ASSERT_FALSE(not_json.is_ok());
  EXPECT_NE(not_json.status().message().find("not valid JSON"), std::string::npos);
}

TEST(TokenizerConfig, MergesAsStringsEqualPairs) {
  Json j = tiny_json();
  for (Json& m : j["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  auto a = Tokenizer::from_json(tiny_json());
  auto b = Tokenizer::from_json(j);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  const std::string text = "Both merge formats give the same ids: 12345, naïve café.";
  EXPECT_EQ(*a->encode(text, false), *b->encode(text, false));
}

}  // namespace
}  // namespace s4kv::tokenizer
