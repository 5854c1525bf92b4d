#include "tokenizer/jinja/parser.h"

#include <algorithm>

#include "tokenizer/jinja/parser_impl.h"

namespace s4kv::tokenizer::jinja {
namespace {

// Tags jinja2 knows that this subset does not implement: refused by name.
constexpr std::string_view kUnsupportedTags[] = {
    "include", "extends",    "import", "from",      "block",   "call",    "raw",      "with",
    "do",      "autoescape", "trans",  "pluralize", "endwith", "endcall", "endblock", "endraw"};

std::string join_tags(std::initializer_list<std::string_view> ends) {
  std::string out;
  size_t i = 0;
  for (std::string_view e : ends) {
    if (i) out += i + 1 == ends.size() ? " or " : ", ";
    out += "'" + std::string(e) + "'";
    ++i;
  }
  return out;
}

}  // namespace

DepthGuard::DepthGuard(Parser& p) : p_(p) {
  if (++p_.depth_ > kMaxParseDepth) {
    p_.fail("template nesting is deeper than " + std::to_string(kMaxParseDepth) + " levels");
  }
}

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

Body Parser::parse_template() { return parse_body({}, nullptr, nullptr); }

Body Parser::parse_body(std::initializer_list<std::string_view> ends, std::string* found,
                        const char* innermost) {
  Body body;
  while (true) {
    const Token& tok = cur();
    if (tok.type == TokenType::kText) {
      auto s = std::make_unique<Stmt>(Stmt{StmtKind::kText, tok.line});
      s->text = tok.text;
      body.push_back(std::move(s));
      next();
    } else if (tok.type == TokenType::kVarBegin) {
      auto s = std::make_unique<Stmt>(Stmt{StmtKind::kOutput, tok.line});
      next();
      s->expr = parse_tuple(true, {});
      if (cur().type != TokenType::kVarEnd) fail_unexpected("end of print statement");
      next();
      body.push_back(std::move(s));
    } else if (tok.type == TokenType::kBlockBegin) {
      const Token& name = look();
      if (name.type == TokenType::kName &&
          std::find(ends.begin(), ends.end(), std::string_view(name.text)) != ends.end()) {
        next();
        *found = next().text;
        return body;
      }
      if (name.type == TokenType::kName && innermost &&
          (name.text.starts_with("end") || name.text == "else" || name.text == "elif")) {
        pos_++;
        fail("unexpected tag '" + name.text + "'; looking for " + join_tags(ends) +
             " (the innermost open block is '" + innermost + "')");
      }
      next();
      body.push_back(parse_statement());
    } else if (tok.type == TokenType::kEof) {
      if (ends.size() > 0) {
        fail("unexpected end of template; looking for " + join_tags(ends) +
             " (the innermost open block is '" + innermost + "')");
      }
      return body;
    } else {
      fail_unexpected("template data");
    }
  }
}

StmtPtr Parser::parse_statement() {
  DepthGuard guard(*this);
  const int line = cur().line;
  if (cur().type != TokenType::kName) fail_unexpected("a tag name");
  const std::string name = next().text;
  if (name == "if") return parse_if(line);
  if (name == "for") return parse_for(line);
  if (name == "set") return parse_set(line);
  if (name == "macro") return parse_macro(line);
  if (name == "filter") return parse_filter_block(line);
  if (name == "break" || name == "continue") {
    if (loop_depth_ == 0) fail("'" + name + "' outside of a loop");
    expect_block_end();
    return std::make_unique<Stmt>(
        Stmt{name == "break" ? StmtKind::kBreak : StmtKind::kContinue, line});
  }
  if (name == "generation") {
    expect_block_end();
    auto s = std::make_unique<Stmt>(Stmt{StmtKind::kGeneration, line});
    std::string found;
    s->body = parse_body({"endgeneration"}, &found, "generation");
    expect_block_end();
    return s;
  }
  pos_--;
  if (std::find(std::begin(kUnsupportedTags), std::end(kUnsupportedTags), name) !=
      std::end(kUnsupportedTags)) {
    fail("the '" + name + "' tag is not supported in chat templates");
  }
  fail("encountered unknown tag '" + name + "'");
}

StmtPtr Parser::parse_if(int line) {
  auto s = std::make_unique<Stmt>(Stmt{StmtKind::kIf, line});
  ExprPtr cond = parse_tuple(false, {});
  expect_block_end();
  while (true) {
    std::string found;
    Body body = parse_body({"elif", "else", "endif"}, &found, "if");
    s->branches.emplace_back(std::move(cond), std::move(body));
    if (found == "elif") {
      cond = parse_tuple(false, {});
      expect_block_end();
      continue;
    }
    expect_block_end();
    if (found == "else") {
      s->else_body = parse_body({"endif"}, &found, "if");
      expect_block_end();
    }
    return s;
  }
}

StmtPtr Parser::parse_for(int line) {
  auto s = std::make_unique<Stmt>(Stmt{StmtKind::kFor, line});
  s->targets = parse_targets(true);
  if (!skip_name("in")) fail_unexpected("'in'");
  s->expr = parse_tuple(false, {"recursive"});
  if (skip_name("if")) s->filter = parse_expression();
  if (is_name("recursive")) fail("recursive loops are not supported in chat templates");
  expect_block_end();
  std::string found;
  ++loop_depth_;
  s->body = parse_body({"endfor", "else"}, &found, "for");
  --loop_depth_;
  expect_block_end();
  if (found == "else") {
    s->else_body = parse_body({"endfor"}, &found, "for");
    expect_block_end();
  }
  return s;
}

std::vector<std::string> Parser::parse_targets(bool allow_tuple) {
  std::vector<std::string> names;
  const bool paren = allow_tuple && skip_op("(");
  names.push_back(expect_name());
  while (allow_tuple && skip_op(",")) {
    if (cur().type != TokenType::kName || is_name("in")) break;
    names.push_back(expect_name());
  }
  if (paren) expect_op(")");
  return names;
}

StmtPtr Parser::parse_set(int line) {
  auto s = std::make_unique<Stmt>(Stmt{StmtKind::kSet, line});
  if (cur().type == TokenType::kName && look().type == TokenType::kOp && look().text == ".") {
    s->targets.push_back(next().text);
    next();
    s->attr = expect_name();
  } else {
    s->targets = parse_targets(true);
  }
  if (skip_op("=")) {
    s->expr = parse_tuple(true, {});
    expect_block_end();
    return s;
  }
  if (!s->attr.empty() || s->targets.size() != 1) fail_unexpected("'='");
  s->kind = StmtKind::kSetBlock;
  if (skip_op("|")) s->filter = parse_filter(nullptr);
  expect_block_end();
  std::string found;
  s->body = parse_body({"endset"}, &found, "set");
  expect_block_end();
  return s;
}

StmtPtr Parser::parse_macro(int line) {
  auto s = std::make_unique<Stmt>(Stmt{StmtKind::kMacro, line});
  s->targets.push_back(expect_name());
  expect_op("(");
  while (!skip_op(")")) {
    if (!s->params.empty()) expect_op(",");
    if (skip_op(")")) break;
    std::string param = expect_name();
    ExprPtr def;
    if (skip_op("=")) {
      def = parse_expression();
    } else if (!s->params.empty() && s->params.back().second) {
      fail("non-default argument '" + param + "' follows default argument");
    }
    s->params.emplace_back(std::move(param), std::move(def));
  }
  expect_block_end();
  const int saved_loops = loop_depth_;
  loop_depth_ = 0;
  ++macro_depth_;
  std::string found;
  s->body = parse_body({"endmacro"}, &found, "macro");
  --macro_depth_;
  loop_depth_ = saved_loops;
  expect_block_end();
  return s;
}

StmtPtr Parser::parse_filter_block(int line) {
  auto s = std::make_unique<Stmt>(Stmt{StmtKind::kFilterBlock, line});
  s->filter = parse_filter(nullptr);
  expect_block_end();
  std::string found;
  s->body = parse_body({"endfilter"}, &found, "filter");
  expect_block_end();
  return s;
}

bool Parser::skip_op(std::string_view op) {
  if (!is_op(op)) return false;
  next();
  return true;
}

bool Parser::skip_name(std::string_view n) {
  if (!is_name(n)) return false;
  next();
  return true;
}

void Parser::expect_op(std::string_view op) {
  if (!skip_op(op)) fail_unexpected(("'" + std::string(op) + "'").c_str());
}

std::string Parser::expect_name() {
  if (cur().type != TokenType::kName) fail_unexpected("a name");
  return next().text;
}

void Parser::expect_block_end() {
  if (cur().type != TokenType::kBlockEnd) fail_unexpected("end of statement block");
  next();
}

void Parser::fail(const std::string& message) const { throw SyntaxError(cur().line, message); }

void Parser::fail_unexpected(const char* expected) const {
  fail(std::string("expected ") + expected + ", got " + describe(cur()));
}

ExprPtr Parser::make(ExprKind kind, int line) const {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

}  // namespace s4kv::tokenizer::jinja
