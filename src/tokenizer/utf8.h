// UTF-8 helpers for the tokenizer: validation, code point stepping, the Unicode White_Space
// and "word character" classes Hugging Face's added-token matching uses, and lossy decoding
// with the replacement rules of Rust's String::from_utf8_lossy (one U+FFFD per maximal
// ill-formed subpart), which the ByteLevel decoder applies. Pure functions, no allocation
// beyond the output string.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace s4kv::tokenizer {

// Offset of the first byte that does not start a well-formed UTF-8 sequence, or npos.
size_t find_invalid_utf8(std::string_view s);

// Decodes the code point at s[i] (s must be valid UTF-8); advances i past it.
char32_t next_code_point(std::string_view s, size_t& i);

// Decodes the code point that ends at s[end) (s valid UTF-8); sets start to its first byte.
char32_t prev_code_point(std::string_view s, size_t end, size_t& start);

// Appends the UTF-8 encoding of cp.
void append_utf8(char32_t cp, std::string& out);

// Unicode White_Space (what Rust's char::is_whitespace and regex `\s` match).
bool is_unicode_whitespace(char32_t cp);

// Rust regex `\w` (Unicode): letters, marks, decimal digits, letter numbers, connector
// punctuation, ZWNJ/ZWJ.
bool is_word_char(char32_t cp);

// Appends bytes to out as text: well-formed sequences are copied, each maximal ill-formed
// subpart becomes U+FFFD. With final == false a trailing sequence that could still be
// completed by more bytes is left unconsumed. Returns the number of bytes consumed.
size_t append_utf8_lossy(std::string_view bytes, std::string& out, bool final);

}  // namespace s4kv::tokenizer
