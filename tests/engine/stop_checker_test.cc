// StopChecker: stop strings across token boundaries with withheld text, stop ids, EOS,
// min_tokens, ignore_eos, max_tokens.
#include "engine/stop_checker.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace s4kv::engine {
namespace {

constexpr int32_t kEos = 99;

struct Fed {
  std::vector<std::string> deltas;  // one per token
  StopUpdate last;
  std::string streamed;  // concatenated deltas
};

// Feeds (token, piece) pairs until the checker finishes or the pieces run out.
Fed feed(StopChecker& c, const std::vector<std::pair<int32_t, std::string>>& tokens) {
  Fed run;
  for (const auto& [id, piece] : tokens) {
    run.last = c.append(id, piece);
    run.deltas.push_back(run.last.text);
    run.streamed += run.last.text;
    if (run.last.finished()) break;
  }
  return run;
}

StopChecker make(const SamplingParams& p, int64_t max_tokens = 100) {
  const std::vector<int32_t> eos = {kEos};
  return StopChecker(p, eos, max_tokens);
}

TEST(StopChecker, StopStringSplitAcrossTokens) {
  SamplingParams p;
  p.stop = {"ll"};
  StopChecker c = make(p);
  const Fed r = feed(c, {{1, "He"}, {2, "llo"}, {3, " world"}});
  ASSERT_TRUE(r.last.finished());
  EXPECT_EQ(r.last.finish_reason, FinishReason::kStop);
  EXPECT_EQ(r.last.stop_str, "ll");
  EXPECT_EQ(r.deltas, (std::vector<std::string>{"He", ""}));
  EXPECT_EQ(c.output_text(), "He");
  EXPECT_EQ(finish_reason_name(*r.last.finish_reason), "stop");
}

TEST(StopChecker, PossiblePrefixIsWithheldThenReleased) {
  SamplingParams p;
  p.stop = {"END"};
  StopChecker c = make(p);
  const Fed r = feed(c, {{1, "abE"}, {2, "N"}, {3, "x"}, {4, "yE"}});
  EXPECT_EQ(r.deltas, (std::vector<std::string>{"ab", "", "ENx", "y"}));
  EXPECT_FALSE(r.last.finished());
  // The stop completes inside a token that carries text after it: that text is dropped too.
  const StopUpdate u = c.append(5, "ND tail");
  EXPECT_EQ(u.text, "");
  EXPECT_EQ(u.stop_str, "END");
  EXPECT_EQ(c.output_text(), "abENxy");
}

TEST(StopChecker, OverlappingPrefixes) {
  // "aab": after "aa" the text "aa" is withheld only as far as a prefix could still match.
  SamplingParams p;
  p.stop = {"aab"};
  StopChecker c = make(p);
  const Fed r = feed(c, {{1, "a"}, {2, "a"}, {3, "a"}, {4, "b"}});
  EXPECT_EQ(r.deltas, (std::vector<std::string>{"", "", "a", ""}));
  EXPECT_EQ(r.last.stop_str, "aab");
  EXPECT_EQ(c.output_text(), "a");
}

TEST(StopChecker, MultipleStopStringsFirstCompletedWins) {
  SamplingParams p;
  p.stop = {"abcd", "bc", "zz"};
  StopChecker c = make(p);
  const Fed r = feed(c, {{1, "xab"}, {2, "cd"}});
  EXPECT_EQ(r.last.stop_str, "bc");
  EXPECT_EQ(c.output_text(), "xa");
  EXPECT_EQ(r.streamed, "xa");
}

TEST(StopChecker, StopStringWithinOneToken) {
  SamplingParams p;
  p.stop = {"\n\n"};
  StopChecker c = make(p);
  const Fed r = feed(c, {{1, "Hi"}, {2, ".\n\nNext"}});
  EXPECT_EQ(r.last.stop_str, "\n\n");
  EXPECT_EQ(r.streamed, "Hi.");
}

TEST(StopChecker, IncludeStopStrInOutput) {
  SamplingParams p;
  p.stop = {"ll"};
  p.include_stop_str_in_output = true;
  StopChecker c = make(p);
  const Fed r = feed(c, {{1, "He"}, {2, "llo"}});
  EXPECT_EQ(r.deltas, (std::vector<std::string>{"He", "ll"}));  // nothing withheld, "o" cut
  EXPECT_EQ(c.output_text(), "Hell");
  EXPECT_EQ(r.last.stop_str, "ll");
}

TEST(StopChecker, StopTokenIdsAndEos) {
  SamplingParams p;
  p.stop_token_ids = {7};
  StopChecker a = make(p);
  Fed r = feed(a, {{1, "x"}, {7, "<stop>"}});
  EXPECT_EQ(r.last.finish_reason, FinishReason::kStop);
  EXPECT_EQ(r.last.stop_token_id, 7);
  EXPECT_EQ(a.output_text(), "x");  // the stop token's text is not output
  StopChecker b = make(p);
  r = feed(b, {{1, "x"}, {kEos, "</s>"}});
  EXPECT_EQ(r.last.finish_reason, FinishReason::kStop);
  EXPECT_FALSE(r.last.stop_token_id.has_value());
  EXPECT_EQ(b.output_text(), "x");
  p.include_stop_str_in_output = true;
  StopChecker d = make(p);
  feed(d, {{1, "x"}, {7, "<stop>"}});
  EXPECT_EQ(d.output_text(), "x<stop>");
}

TEST(StopChecker, MinTokensDelaysEveryStop) {
  SamplingParams p;
  p.min_tokens = 2;
  p.stop = {"!"};
  StopChecker c = make(p);
  Fed r = feed(c, {{kEos, ""}, {1, "!"}, {2, "a"}});  // tokens 1 and 2 cannot stop
  EXPECT_FALSE(r.last.finished());
  EXPECT_EQ(r.streamed, "!a");
  r = feed(c, {{kEos, ""}});
  EXPECT_EQ(r.last.finish_reason, FinishReason::kStop);
  EXPECT_EQ(c.num_output_tokens(), 4);
}

TEST(StopChecker, IgnoreEos) {
  SamplingParams p;
  p.ignore_eos = true;
  StopChecker c = make(p, 3);
  const Fed r = feed(c, {{kEos, "a"}, {kEos, "b"}, {kEos, "c"}});
  EXPECT_EQ(r.last.finish_reason, FinishReason::kLength);
  EXPECT_EQ(c.output_text(), "abc");
}

TEST(StopChecker, MaxTokensFlushesWithheldText) {
  SamplingParams p;
  p.stop = {"xyz"};
  StopChecker c = make(p, 2);
  const Fed r = feed(c, {{1, "ab"}, {2, "xy"}});
  EXPECT_EQ(r.last.finish_reason, FinishReason::kLength);
  EXPECT_EQ(finish_reason_name(*r.last.finish_reason), "length");
  EXPECT_EQ(r.deltas, (std::vector<std::string>{"ab", "xy"}));
  EXPECT_EQ(c.output_text(), "abxy");
}

TEST(StopChecker, StopStringBeatsLengthOnTheSameToken) {
  SamplingParams p;
  p.stop = {"b"};
  StopChecker c = make(p, 1);
  const Fed r = feed(c, {{1, "ab"}});
  EXPECT_EQ(r.last.finish_reason, FinishReason::kStop);
  EXPECT_EQ(c.output_text(), "a");
}

TEST(StopChecker, MultibyteTextIsCutOnCharacterBoundaries) {
  SamplingParams p;
  p.stop = {"é!"};
  StopChecker c = make(p);
  const Fed r = feed(c, {{1, "café"}, {2, "!"}});
  EXPECT_EQ(r.deltas, (std::vector<std::string>{"caf", ""}));
  EXPECT_EQ(c.output_text(), "caf");
}

}  // namespace
}  // namespace s4kv::engine
