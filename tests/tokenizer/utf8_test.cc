// UTF-8 helpers and the byte-level alphabet: lossy decoding follows Rust's from_utf8_lossy
// (one U+FFFD per maximal ill-formed subpart), streaming holds back only completable tails.
#include <gtest/gtest.h>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace s4kv::tokenizer {
namespace {

const std::string kR = "\xEF\xBF\xBD";

std::string lossy(std::string_view s) {
  std::string out;
  EXPECT_EQ(append_utf8_lossy(s, out, true), s.size());
  return out;
}

TEST(Utf8, LossyMatchesRustRules) {
  EXPECT_EQ(lossy("abc"), "abc");
  EXPECT_EQ(lossy("\xC3\xA9"), "\xC3\xA9");
  EXPECT_EQ(lossy("\xFF"), kR);
  EXPECT_EQ(lossy("\xE0\x80"), kR + kR);                    // E0 needs A0..BF next: two subparts
  EXPECT_EQ(lossy("\xE6\x97"), kR);                         // truncated at the end: one
  EXPECT_EQ(lossy("\xF0\x9F\x98x"), kR + "x");              // broken 4-byte: one, then x
  EXPECT_EQ(lossy("\xED\xA0\x80"), kR + kR + kR);           // surrogate: each byte
  EXPECT_EQ(lossy("\xC0\xAF"), kR + kR);                    // overlong
  EXPECT_EQ(lossy("\xF4\x90\x80\x80"), kR + kR + kR + kR);  // above U+10FFFF
}

TEST(Utf8, StreamingHoldsCompletableTail) {
  std::string out;
  EXPECT_EQ(append_utf8_lossy("a\xF0\x9F", out, false), 1u);
  EXPECT_EQ(out, "a");
  out.clear();
  EXPECT_EQ(append_utf8_lossy("a\xF0\x41", out, false), 3u);  // cannot complete: replaced
  EXPECT_EQ(out, "a" + kR + "A");
}

TEST(Utf8, Validation) {
  EXPECT_EQ(find_invalid_utf8("héllo 日本 😀"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("ab\x80"), 2u);
  EXPECT_EQ(find_invalid_utf8("\xE6\x97"), 0u);
  EXPECT_TRUE(is_unicode_whitespace(0x3000));
  EXPECT_FALSE(is_unicode_whitespace(0x180E));
  EXPECT_FALSE(is_unicode_whitespace(0x200B));
  EXPECT_TRUE(is_word_char(0x0301));
  EXPECT_FALSE(is_word_char('-'));
}

TEST(ByteLevel, AlphabetIsABijection) {
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(code_point_to_byte(byte_to_code_point(static_cast<unsigned char>(b))), b);
  }
  EXPECT_EQ(byte_to_code_point(' '), U'\u0120');   // Ġ
  EXPECT_EQ(byte_to_code_point('\n'), U'\u010A');  // Ċ
  EXPECT_EQ(byte_to_code_point('A'), U'A');
  EXPECT_EQ(byte_level_to_bytes("\xC4\xA0hi"), std::string(" hi"));
  EXPECT_FALSE(byte_level_to_bytes("a b").has_value());  // a space is not in the alphabet
  EXPECT_EQ(byte_level_decode_token("<|im_end|>"), "<|im_end|>");
  EXPECT_EQ(byte_level_decode_token("a b"), "a b");  // not byte-level: its own UTF-8
}

}  // namespace
}  // namespace s4kv::tokenizer
