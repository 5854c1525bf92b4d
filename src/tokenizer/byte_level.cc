#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace s4kv::tokenizer {
namespace {

bool shown_as_itself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<char32_t, 256> byte_to_cp{};
  std::array<int, 512> cp_to_byte{};  // every alphabet code point is below U+0144

  Tables() {
    cp_to_byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = shown_as_itself(b) ? static_cast<char32_t>(b) : 256 + n++;
      byte_to_cp[b] = cp;
      cp_to_byte[cp] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_code_point(unsigned char b) { return tables().byte_to_cp[b]; }

int code_point_to_byte(char32_t cp) {
  return cp < tables().cp_to_byte.size() ? tables().cp_to_byte[cp] : -1;
}

std::optional<std::string> byte_level_to_bytes(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const int b = code_point_to_byte(next_code_point(s, i));
    if (b < 0) return std::nullopt;
    out.push_back(static_cast<char>(b));
  }
  return out;
}

std::string byte_level_decode_token(std::string_view s) {
  auto bytes = byte_level_to_bytes(s);
  return bytes ? std::move(*bytes) : std::string(s);
}

}  // namespace s4kv::tokenizer
