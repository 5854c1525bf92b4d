#include "tokenizer/jinja/lexer.h"

#include <algorithm>
#include <charconv>
#include <optional>

#include "tokenizer/jinja/utf8.h"

namespace s4kv::tokenizer::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Newlines to "\n"; one trailing newline dropped (keep_trailing_newline=False).
std::string normalize(std::string_view src, bool keep_trailing_newline) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out.push_back(src[i]);
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's unicode-escape decoding of a string literal's body (what jinja2 applies).
std::string decode_string(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\') {
      out.push_back(body[i]);
      continue;
    }
    if (i + 1 >= body.size()) throw SyntaxError(line, "string literal ends with a backslash");
    const char c = body[++i];
    switch (c) {
      case '\n':
        break;  // line continuation
      case '\\':
        out.push_back('\\');
        break;
      case '\'':
        out.push_back('\'');
        break;
      case '"':
        out.push_back('"');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        char32_t cp = 0;
        for (size_t k = 1; k <= n; ++k) {
          const int h = i + k < body.size() ? hex_value(body[i + k]) : -1;
          if (h < 0)
            throw SyntaxError(line, std::string("truncated \\") + c + " escape in string literal");
          cp = cp * 16 + static_cast<char32_t>(h);
        }
        if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
          throw SyntaxError(line, "escape in string literal is not a valid code point");
        }
        utf8_append(out, cp);
        i += n;
        break;
      }
      default:
        if (c >= '0' && c <= '7') {
          char32_t cp = static_cast<char32_t>(c - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k) {
            cp = cp * 8 + static_cast<char32_t>(body[++i] - '0');
          }
          utf8_append(out, cp);
        } else {
          out.push_back('\\');  // unknown escapes stay as written
          out.push_back(c);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string src, const LexerOptions& o) : src_(std::move(src)), o_(o) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t start = find_tag(pos_);
      std::string text = src_.substr(pos_, start - pos_);
      if (start == src_.size()) {
        emit_text(std::move(text));
        advance_to(start);
        break;
      }
      const char kind = src_[start + 1];  // '{', '%' or '#'
      const char sign = start + 2 < src_.size() ? src_[start + 2] : '\0';
      strip_before(text, kind, sign);
      emit_text(std::move(text));
      advance_to(start);
      pos_ = start + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      if (kind == '#') {
        lex_comment();
      } else {
        lex_tag(kind == '{');
      }
    }
    tokens_.push_back(Token{TokenType::kEof, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    }
    return src_.size();
  }

  // Moves the line counter over src_[pos_, to).
  void advance_to(size_t to) {
    line_ += static_cast<int>(std::count(src_.begin() + static_cast<long>(pos_),
                                         src_.begin() + static_cast<long>(to), '\n'));
    pos_ = to;
  }

  void strip_before(std::string& text, char kind, char sign) {
    if (sign == '-') {
      text = py_strip(text, std::nullopt, false, true);
      return;
    }
    if (sign == '+' || !o_.lstrip_blocks || kind == '{') return;
    const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
    if (l_pos == 0 && !line_starting_) return;
    if (l_pos == text.size()) return;
    for (size_t i = l_pos; i < text.size(); ++i) {
      if (!is_space(text[i])) return;
    }
    text.resize(l_pos);
  }

  void emit_text(std::string text) {
    if (!text.empty()) tokens_.push_back(Token{TokenType::kText, std::move(text), line_});
  }

  // After a tag's end marker: '-' strips all whitespace; a block/comment end eats one newline.
  void after_end(bool strip, bool plus, bool is_block) {
    size_t p = pos_;
    if (strip) {
      while (p < src_.size() && is_space(src_[p])) ++p;
    } else if (is_block && !plus && o_.trim_blocks && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    line_starting_ = p > 0 && src_[p - 1] == '\n';
    advance_to(p);
  }

  void lex_comment() {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) throw SyntaxError(line_, "missing end of comment tag");
    const char before = end > pos_ ? src_[end - 1] : '\0';
    advance_to(end + 2);
    after_end(before == '-', before == '+', true);
  }

  void lex_tag(bool is_var) {
    const int begin_line = line_;
    tokens_.push_back(Token{is_var ? TokenType::kVarBegin : TokenType::kBlockBegin, "", line_});
    std::vector<char> stack;
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) advance_to(pos_ + 1);
      if (pos_ >= src_.size()) {
        throw SyntaxError(begin_line, std::string("unexpected end of template, expected end of ") +
                                          (is_var ? "print statement" : "statement block"));
      }
      if (stack.empty() && try_end(is_var)) return;
      lex_token(stack);
    }
  }

  bool try_end(bool is_var) {
    const std::string_view rest = std::string_view(src_).substr(pos_);
    const std::string_view end = is_var ? "}}" : "%}";
    const bool minus = rest.size() > 2 && rest[0] == '-' && rest.substr(1, 2) == end;
    const bool plus = !is_var && rest.size() > 2 && rest[0] == '+' && rest.substr(1, 2) == end;
    if (!minus && !plus && rest.substr(0, 2) != end) return false;
    tokens_.push_back(Token{is_var ? TokenType::kVarEnd : TokenType::kBlockEnd, "", line_});
    advance_to(pos_ + (minus || plus ? 3 : 2));
    after_end(minus, plus, !is_var);
    return true;
  }

  void lex_token(std::vector<char>& stack) {
    const char c = src_[pos_];
    if (is_name_start(c)) {
      size_t e = pos_;
      while (e < src_.size() && is_name_char(src_[e])) ++e;
      tokens_.push_back(Token{TokenType::kName, src_.substr(pos_, e - pos_), line_});
      pos_ = e;
    } else if (is_digit(c)) {
      lex_number();
    } else if (c == '\'' || c == '"') {
      lex_string(c);
    } else {
      lex_operator(stack);
    }
  }

  void lex_number() {
    size_t e = pos_;
    auto digits = [&] {
      while (e < src_.size() && (is_digit(src_[e]) ||
                                 (src_[e] == '_' && e + 1 < src_.size() && is_digit(src_[e + 1]))))
        ++e;
    };
    digits();
    bool is_float = false;
    const bool after_dot =
        !tokens_.empty() && tokens_.back().type == TokenType::kOp && tokens_.back().text == ".";
    if (!after_dot && e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
      ++e, digits(), is_float = true;
    }
    if (!after_dot && e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t f = e + 1;
      if (f < src_.size() && (src_[f] == '+' || src_[f] == '-')) ++f;
      if (f < src_.size() && is_digit(src_[f])) e = f, digits(), is_float = true;
    }
    std::string text = src_.substr(pos_, e - pos_);
    std::erase(text, '_');
    Token t{is_float ? TokenType::kFloat : TokenType::kInt, text, line_};
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), t.int_value);
      if (ec != std::errc()) throw SyntaxError(line_, "integer literal out of range: " + text);
    }
    tokens_.push_back(std::move(t));
    pos_ = e;
  }

  void lex_string(char quote) {
    size_t e = pos_ + 1;
    while (e < src_.size() && src_[e] != quote) e += src_[e] == '\\' ? 2 : 1;
    if (e >= src_.size()) throw SyntaxError(line_, "unexpected end of string literal");
    const int line = line_;
    std::string body = decode_string(std::string_view(src_).substr(pos_ + 1, e - pos_ - 1), line);
    tokens_.push_back(Token{TokenType::kString, std::move(body), line});
    advance_to(e + 1);
  }

  void lex_operator(std::vector<char>& stack) {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    const std::string_view rest = std::string_view(src_).substr(pos_);
    for (std::string_view op : kTwo) {
      if (rest.substr(0, 2) == op) {
        tokens_.push_back(Token{TokenType::kOp, std::string(op), line_});
        pos_ += 2;
        return;
      }
    }
    const char c = rest[0];
    if (std::string_view("+-/*%~[](){}<>=.:|,;").find(c) == std::string_view::npos) {
      throw SyntaxError(line_, std::string("unexpected char '") + c + "'");
    }
    if (c == '(' || c == '[' || c == '{') stack.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    if (c == ')' || c == ']' || c == '}') {
      if (stack.empty() || stack.back() != c)
        throw SyntaxError(line_, std::string("unexpected '") + c + "'");
      stack.pop_back();
    }
    tokens_.push_back(Token{TokenType::kOp, std::string(1, c), line_});
    ++pos_;
  }

  std::string src_;
  LexerOptions o_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  if (!is_valid_utf8(source)) throw SyntaxError(1, "template is not valid UTF-8");
  return Lexer(normalize(source, options.keep_trailing_newline), options).run();
}

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::kText:
      return "template data";
    case TokenType::kVarBegin:
      return "begin of print statement";
    case TokenType::kVarEnd:
      return "end of print statement";
    case TokenType::kBlockBegin:
      return "begin of statement block";
    case TokenType::kBlockEnd:
      return "end of statement block";
    case TokenType::kEof:
      return "end of template";
    default:
      return "'" + t.text + "'";
  }
}

}  // namespace s4kv::tokenizer::jinja
