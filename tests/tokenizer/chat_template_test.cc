// Chat templates against jinja2: every conversation of tests/golden/chat/conversations.json
// rendered by each real template (Qwen2.5, Qwen3, Llama-3, the Qwen2.5 .jinja fixture, and
// s4kv-tiny's) must equal, byte for byte, what tools/make_chat_golden.py got from jinja2
// configured as transformers configures it; where jinja2 raised, we must fail too. Also:
// loading (string / named list / missing chat_template, --chat-template files) and
// special tokens.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "common/file.h"
#include "tokenizer/chat_template.h"

namespace s4kv::tokenizer {
namespace {

using s4kv::parse_ordered_json;

OrderedJson read_ordered(const std::string& path) {
  auto text = read_file(path, 64u << 20);
  EXPECT_TRUE(text.is_ok()) << text.status().message();
  auto j = parse_ordered_json(*text, path, JsonLimits{.max_depth = 128});
  EXPECT_TRUE(j.is_ok()) << j.status().message();
  return *j;
}

Result<ChatTemplate> load_named(const std::string& name) {
  if (name == "qwen2.5-instruct.jinja") {
    return ChatTemplate::load("tests/fixtures/tokenizers/qwen2.5",
                              "tests/fixtures/chat_templates/qwen2.5-instruct.jinja");
  }
  if (name == "s4kv-tiny") return ChatTemplate::load("models/s4kv-tiny");
  return ChatTemplate::load("tests/fixtures/tokenizers/" + name);
}

// Prints the first differing byte and some context around it.
std::string first_difference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  const size_t from = i > 40 ? i - 40 : 0;
  return "at byte " + std::to_string(i) +
         "\n  want: " + OrderedJson(want.substr(from, 120)).dump() +
         "\n  got:  " + OrderedJson(got.substr(from, 120)).dump();
}

class ChatGoldenTest : public testing::TestWithParam<std::string> {};

TEST_P(ChatGoldenTest, MatchesJinja2) {
  const OrderedJson conversations = read_ordered("tests/golden/chat/conversations.json");
  const OrderedJson golden = read_ordered("tests/golden/chat/" + GetParam() + ".json");
  auto tmpl = load_named(GetParam());
  ASSERT_TRUE(tmpl.is_ok()) << tmpl.status().message();
  int matched = 0, errors = 0, mismatches = 0;
  for (const OrderedJson& r : golden["renders"]) {
    const OrderedJson& conv = conversations.at(r["conversation"].get<size_t>());
    auto got = tmpl->render(conv["messages"], conv["tools"], r["add_generation_prompt"].get<bool>(),
                            conv["kwargs"]);
    const std::string where = GetParam() + " conversation " + r["conversation"].dump() +
                              " add_generation_prompt=" + r["add_generation_prompt"].dump();
    if (r.contains("error")) {
      EXPECT_FALSE(got.is_ok()) << where << ": jinja2 raised " << r["error"] << ", we rendered "
                                << OrderedJson(*got).dump();
      ++errors;
      continue;
    }
    if (!got.is_ok()) {
      ADD_FAILURE() << where << ": " << got.status().message();
      ++mismatches;
      continue;
    }
    const std::string want = r["text"].get<std::string>();
    if (*got != want) {
      ADD_FAILURE() << where << ": differs " << first_difference(want, *got);
      ++mismatches;
      continue;
    }
    ++matched;
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_GE(matched, 100)
      << "at least 50 conversations, each with and without the generation prompt";
  std::printf("%s: %d identical renderings, %d errors as in jinja2, %d mismatches\n",
              GetParam().c_str(), matched, errors, mismatches);
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatGoldenTest,
                         testing::Values("qwen2.5", "qwen3", "llama3", "qwen2.5-instruct.jinja",
                                         "s4kv-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

TEST(ChatTemplateTest, SpecialTokensOnlyWhenSet) {
  const Json config = {{"bos_token", "<s>"},
                       {"eos_token", {{"content", "</s>"}, {"lstrip", false}}},
                       {"pad_token", nullptr},
                       {"unk_token", ""},
                       {"additional_special_tokens", {"<a>", "<b>"}},
                       {"chat_template",
                        "{{ bos_token }}|{{ eos_token }}|{{ pad_token is defined }}|"
                        "{{ unk_token is defined }}|{{ additional_special_tokens|join(',') }}"}};
  auto t = ChatTemplate::from_tokenizer_config(config, "cfg");
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  auto out = t->render(OrderedJson::array(), nullptr, false);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(*out, "<s>|</s>|False|False|<a>,<b>");
}

TEST(ChatTemplateTest, NamedTemplateListUsesDefault) {
  Json config = {{"chat_template", Json::array({{{"name", "tool_use"}, {"template", "T"}},
                                                {{"name", "default"}, {"template", "D"}}})}};
  auto t = ChatTemplate::from_tokenizer_config(config, "cfg");
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ(*t->render(OrderedJson::array(), nullptr, false), "D");
  config["chat_template"].erase(1);
  auto bad = ChatTemplate::from_tokenizer_config(config, "cfg");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("none is named \"default\""), std::string::npos);
}

TEST(ChatTemplateTest, MissingTemplateIsClear) {
  auto t = ChatTemplate::from_tokenizer_config(Json{{"eos_token", "x"}}, "tokenizer_config.json");
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().message(),
            "tokenizer_config.json has no chat_template (pass --chat-template FILE)");
  auto wrong = ChatTemplate::from_tokenizer_config(Json{{"chat_template", 3}}, "c");
  ASSERT_FALSE(wrong.is_ok());
}

TEST(ChatTemplateTest, OverrideFileWinsAndSyntaxErrorsNameTheFile) {
  const std::string dir = std::getenv("S4KV_TEST_TMP") ? std::getenv("S4KV_TEST_TMP") : "/tmp";
  const std::string good = dir + "/chat_override.jinja", bad = dir + "/chat_bad.jinja";
  std::ofstream(good) << "{{ eos_token }}{% for m in messages %}[{{ m.content }}]{% endfor %}\n";
  std::ofstream(bad) << "ok\n{% for m in messages %}\n{{ m.content }\n";
  auto t = ChatTemplate::load("tests/fixtures/tokenizers/qwen2.5", good);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ(*t->render(OrderedJson::parse(R"([{"role":"user","content":"hi"}])"), nullptr, false),
            "<|im_end|>[hi]");
  auto b = ChatTemplate::load("tests/fixtures/tokenizers/qwen2.5", bad);
  ASSERT_FALSE(b.is_ok());
  EXPECT_NE(b.status().message().find(bad + ": chat template syntax error: line 3:"),
            std::string::npos)
      << b.status().message();
  EXPECT_FALSE(
      ChatTemplate::load("tests/fixtures/tokenizers/qwen2.5", dir + "/nope.jinja").is_ok());
}

TEST(ChatTemplateTest, RejectsBadArguments) {
  auto t = ChatTemplate::load("tests/fixtures/tokenizers/qwen3");
  ASSERT_TRUE(t.is_ok());
  EXPECT_FALSE(t->render(OrderedJson::object(), nullptr, false).is_ok());
  EXPECT_FALSE(t->render(OrderedJson::array(), OrderedJson::object(), false).is_ok());
}

}  // namespace
}  // namespace s4kv::tokenizer
