// Internal to the parser (parser.cc: statements, parser_expr.cc: expressions).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace s4kv::tokenizer::jinja {

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body parse_template();

 private:
  friend class DepthGuard;
  // Statements (parser.cc).
  Body parse_body(std::initializer_list<std::string_view> ends, std::string* found,
                  const char* innermost);
  StmtPtr parse_statement();
  StmtPtr parse_if(int line);
  StmtPtr parse_for(int line);
  StmtPtr parse_set(int line);
  StmtPtr parse_macro(int line);
  StmtPtr parse_filter_block(int line);
  std::vector<std::string> parse_targets(bool allow_tuple);

  // Expressions (parser_expr.cc).
  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_ends,
                      bool explicit_parens = false);
  ExprPtr parse_expression(bool with_condexpr = true);
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_list_or_dict(bool is_dict);
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_filter(ExprPtr node);
  ExprPtr parse_test(ExprPtr node);
  void parse_call_args(Expr& call);

  // Token helpers.
  const Token& cur() const { return t_[pos_]; }
  const Token& look() const { return t_[pos_ + 1 < t_.size() ? pos_ + 1 : pos_]; }
  const Token& next() { return t_[pos_ < t_.size() - 1 ? pos_++ : pos_]; }
  bool is_op(std::string_view op) const { return cur().type == TokenType::kOp && cur().text == op; }
  bool is_name(std::string_view n) const {
    return cur().type == TokenType::kName && cur().text == n;
  }
  bool skip_op(std::string_view op);
  bool skip_name(std::string_view n);
  void expect_op(std::string_view op);
  std::string expect_name();
  void expect_block_end();
  [[noreturn]] void fail(const std::string& message) const;
  [[noreturn]] void fail_unexpected(const char* expected) const;
  ExprPtr make(ExprKind kind, int line) const;

  const std::vector<Token>& t_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  int macro_depth_ = 0;
};

// Counts nesting; refuses templates nested deeper than kMaxParseDepth.
class DepthGuard {
 public:
  explicit DepthGuard(Parser& p);
  ~DepthGuard() { --p_.depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  Parser& p_;
};

}  // namespace s4kv::tokenizer::jinja
