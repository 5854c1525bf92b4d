// The Jinja lexer: splits template source into text and tag tokens, applying whitespace
// control exactly as jinja2's lexer does with the settings transformers uses
// (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False): `{%-`/`-%}` strip all
// whitespace on that side, `+` disables lstrip/trim for that tag, a block or comment tag
// eats one newline after it, and indentation before a block or comment tag on its own line
// is dropped. Comments are removed here. Newlines are normalized to "\n" first.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace s4kv::tokenizer::jinja {

// A malformed template: the message names the line ("line 3: unexpected ...").
class SyntaxError : public TemplateError {
 public:
  SyntaxError(int line, const std::string& message)
      : TemplateError("line " + std::to_string(line) + ": " + message), line_(line) {}
  int line() const { return line_; }

 private:
  int line_;
};

enum class TokenType {
  kText,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEof
};

struct Token {
  TokenType type;
  std::string text;  // text, name, decoded string literal, or operator
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Throws SyntaxError. The last token is kEof.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options = {});

// Human name of a token for messages: "end of print statement", "'foo'" ...
std::string describe(const Token& t);

}  // namespace s4kv::tokenizer::jinja
