// GPT-2's byte-level alphabet: each of the 256 byte values is shown as one printable code
// point (printable Latin-1 bytes as themselves, the others from U+0100 on). Vocabulary
// strings in tokenizer.json are written in this alphabet; S4 KV converts them back to raw
// bytes once at load time, so encoding works on the text's bytes directly.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace s4kv::tokenizer {

// The code point that shows byte b.
char32_t byte_to_code_point(unsigned char b);

// The byte a code point shows, or -1 when it is not in the alphabet.
int code_point_to_byte(char32_t cp);

// The raw bytes of a byte-level token string, or nullopt when a character is outside the
// alphabet (s must be valid UTF-8).
std::optional<std::string> byte_level_to_bytes(std::string_view s);

// Hugging Face's ByteLevel decoder on one token: the raw bytes when every character is in
// the alphabet, the token's own UTF-8 otherwise (added tokens such as "<|im_end|>" are
// ASCII, which the alphabet shows as itself).
std::string byte_level_decode_token(std::string_view s);

}  // namespace s4kv::tokenizer
