// UTF-8 helpers for Python string semantics: str indices, len() and slices count code points,
// and str.strip()/split() treat Unicode whitespace as Python does. Inputs are valid UTF-8
// (Template and the JSON parser validate them); decoding never reads past the end.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace s4kv::tokenizer::jinja {

bool is_valid_utf8(std::string_view s);
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
void utf8_append(std::string& out, char32_t c);
size_t utf8_length(std::string_view s);  // in code points
bool is_ascii(std::string_view s);

// Python's str.isspace() for one code point.
bool is_py_space(char32_t c);
// Python str.strip/lstrip/rstrip: whitespace when chars is nullopt, else any of chars.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right);
// Python str.split(): by runs of whitespace when sep is nullopt; maxsplit < 0 means all.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit);
// Python str.replace(old, new, count); count < 0 means all.
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       int64_t count);

}  // namespace s4kv::tokenizer::jinja
