// Golden ids from Hugging Face tokenizers (tools/make_tokenizer_golden.py): for every corpus
// string and each tokenizer, encode must give the same ids, decode (with and without
// skip_special_tokens) the same text, and the incremental detokenizer must stream exactly
// decode's text. Also Llama-3 with a BOS template (add_special_tokens) and random id
// sequences through decode. Data is unpacked into the build tree by CMake.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "common/json.h"
#include "tokenizer/tokenizer.h"

namespace s4kv::tokenizer {
namespace {

const std::string kData = S4KV_TOKENIZER_TEST_DATA;

// Same as LLAMA3_BOS_POST_PROCESSOR in tools/make_tokenizer_golden.py.
constexpr const char* kLlama3BosPostProcessor = R"({"type": "Sequence", "processors": [
  {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
  {"type": "TemplateProcessing",
   "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
              {"Sequence": {"id": "A", "type_id": 0}}],
   "pair": [],
   "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [128000],
                                            "tokens": ["<|begin_of_text|>"]}}}]})";

std::vector<Json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "missing " << path << " (built by s4kv_tokenizer_test_data)";
  std::vector<Json> rows;
  std::string line;
  while (std::getline(in, line)) {
    auto j = parse_json(line, path);
    EXPECT_TRUE(j.is_ok()) << j.status().message();
    if (j.is_ok()) rows.push_back(std::move(*j));
  }
  return rows;
}

const std::vector<std::string>& corpus() {
  static const std::vector<std::string> texts = [] {
    std::vector<std::string> t;
    for (const Json& row : read_jsonl(kData + "/golden/corpus.jsonl")) t.push_back(row["text"]);
    return t;
  }();
  return texts;
}

std::string tokenizer_path(const std::string& name) {
  return name == "s4kv-tiny" ? "models/s4kv-tiny/tokenizer.json"
                             : kData + "/" + name + "/tokenizer.json";
}

std::string streamed(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip) {
  IncrementalDetokenizer detok(tok, skip);
  std::string out;
  for (int32_t id : ids) detok.add(id, out);
  return out + detok.finish();
}

struct Counts {
  int encode = 0, decode = 0, stream = 0, special = 0, reported = 0;
};

void report(Counts& c, const std::string& what, const std::string& text) {
  if (c.reported++ < 8) ADD_FAILURE() << what << " mismatch on " << Json(text).dump();
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, MatchesHuggingFace) {
  const std::string name = GetParam();
  auto tok = Tokenizer::from_file(tokenizer_path(name));
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  const auto rows = read_jsonl(kData + "/golden/" + name + ".jsonl");
  const auto& texts = corpus();
  ASSERT_GE(texts.size(), 5000u);
  ASSERT_GE(rows.size(), texts.size());
  Counts c;
  int num_decode_cases = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Json& row = rows[i];
    if (i >= texts.size()) {  // random id sequences through decode
      const auto ids = row["decode_ids"].get<std::vector<int32_t>>();
      ++num_decode_cases;
      if (tok->decode(ids, false) != row["decoded"]) report(c, "decode(random)", row.dump());
      if (tok->decode(ids, true) != row["decoded_skip"])
        report(c, "decode(random,skip)", row.dump());
      if (streamed(*tok, ids, false) != row["decoded"]) report(c, "stream(random)", row.dump());
      continue;
    }
    const std::string& text = texts[i];
    const auto want = row["ids"].get<std::vector<int32_t>>();
    auto got = tok->encode(text, false);
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    if (*got != want) ++c.encode, report(c, "encode", text);
    const std::string decoded = row.value("decoded", text);
    const std::string skipped = row.value("decoded_skip", decoded);
    if (tok->decode(want, false) != decoded || tok->decode(want, true) != skipped) {
      ++c.decode, report(c, "decode", text);
    }
    if (streamed(*tok, want, false) != decoded || streamed(*tok, want, true) != skipped) {
      ++c.stream, report(c, "stream", text);
    }
  }
  EXPECT_EQ(c.encode, 0);
  EXPECT_EQ(c.decode, 0);
  EXPECT_EQ(c.stream, 0);
  EXPECT_EQ(num_decode_cases, 500);
  std::printf("[ %s ] %zu strings, %d random decodes: %d encode, %d decode, %d stream mismatches\n",
              name.c_str(), texts.size(), num_decode_cases, c.encode, c.decode, c.stream);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, GoldenTest,
                         ::testing::Values("qwen2.5", "qwen3", "llama3", "s4kv-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

TEST(GoldenLlama3Bos, AddSpecialTokensAppliesTemplate) {
  auto j = read_json_file(tokenizer_path("llama3"));
  ASSERT_TRUE(j.is_ok()) << j.status().message();
  (*j)["post_processor"] = Json::parse(kLlama3BosPostProcessor);
  auto tok = Tokenizer::from_json(*j);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  const auto rows = read_jsonl(kData + "/golden/llama3.jsonl");
  int checked = 0, mismatches = 0;
  for (size_t i = 0; i < corpus().size(); ++i) {
    if (!rows[i].contains("ids_special")) continue;
    ++checked;
    auto got = tok->encode(corpus()[i], true);
    ASSERT_TRUE(got.is_ok());
    if (*got != rows[i]["ids_special"].get<std::vector<int32_t>>()) ++mismatches;
    auto plain = tok->encode(corpus()[i], false);
    EXPECT_EQ(*plain, rows[i]["ids"].get<std::vector<int32_t>>());
  }
  EXPECT_EQ(checked, 500);
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace s4kv::tokenizer
