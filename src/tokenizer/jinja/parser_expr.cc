// Expression half of the parser (see parser.h for the grammar).
#include <algorithm>

#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/parser_impl.h"

namespace s4kv::tokenizer::jinja {

ExprPtr Parser::parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_ends,
                            bool explicit_parens) {
  const int line = cur().line;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  auto at_end = [&] {
    const TokenType t = cur().type;
    if (t == TokenType::kVarEnd || t == TokenType::kBlockEnd || is_op(")")) return true;
    return t == TokenType::kName && std::find(extra_ends.begin(), extra_ends.end(),
                                              std::string_view(cur().text)) != extra_ends.end();
  };
  while (true) {
    if (!items.empty()) expect_op(",");
    if (at_end()) break;
    items.push_back(parse_expression(with_condexpr));
    if (is_op(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) fail_unexpected("an expression");
  }
  ExprPtr t = make(ExprKind::kTuple, line);
  t->args = std::move(items);
  return t;
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  DepthGuard guard(*this);
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr Parser::parse_condexpr() {
  ExprPtr expr = parse_or();
  while (is_name("if")) {
    const int line = next().line;
    ExprPtr cond = parse_or();
    ExprPtr otherwise = skip_name("else") ? parse_condexpr() : nullptr;
    ExprPtr c = make(ExprKind::kCond, line);
    c->args.push_back(std::move(cond));
    c->args.push_back(std::move(expr));
    c->args.push_back(std::move(otherwise));
    expr = std::move(c);
  }
  return expr;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    ExprPtr e = make(ExprKind::kOr, next().line);
    e->args.push_back(std::move(left));
    e->args.push_back(parse_and());
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    ExprPtr e = make(ExprKind::kAnd, next().line);
    e->args.push_back(std::move(left));
    e->args.push_back(parse_not());
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    DepthGuard guard(*this);
    ExprPtr e = make(ExprKind::kNot, next().line);
    e->args.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const int line = cur().line;
  ExprPtr first = parse_math1();
  ExprPtr e;
  while (true) {
    std::string op;
    if (cur().type == TokenType::kOp &&
        (is_op("==") || is_op("!=") || is_op("<") || is_op("<=") || is_op(">") || is_op(">="))) {
      op = next().text;
    } else if (skip_name("in")) {
      op = "in";
    } else if (is_name("not") && look().type == TokenType::kName && look().text == "in") {
      next(), next();
      op = "notin";
    } else {
      break;
    }
    if (!e) {
      e = make(ExprKind::kCompare, line);
      e->args.push_back(std::move(first));
    }
    e->ops.push_back(op);
    e->args.push_back(parse_math1());
  }
  return e ? std::move(e) : std::move(first);
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    ExprPtr e = make(ExprKind::kBinary, cur().line);
    e->name = next().text;
    e->args.push_back(std::move(left));
    e->args.push_back(parse_concat());
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  const int line = cur().line;
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  ExprPtr e = make(ExprKind::kConcat, line);
  e->args.push_back(std::move(first));
  while (skip_op("~")) e->args.push_back(parse_math2());
  return e;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    ExprPtr e = make(ExprKind::kBinary, cur().line);
    e->name = next().text;
    e->args.push_back(std::move(left));
    e->args.push_back(parse_pow());
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (is_op("**")) {
    ExprPtr e = make(ExprKind::kBinary, cur().line);
    e->name = next().text;
    e->args.push_back(std::move(left));
    e->args.push_back(parse_unary(true));
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  DepthGuard guard(*this);
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    node = make(is_op("-") ? ExprKind::kNeg : ExprKind::kPos, cur().line);
    next();
    node->args.push_back(parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::parse_primary() {
  const Token& tok = cur();
  ExprPtr e = make(ExprKind::kLiteral, tok.line);
  if (tok.type == TokenType::kName) {
    const std::string& n = tok.text;
    if (n == "true" || n == "True")
      e->value = Value::boolean(true);
    else if (n == "false" || n == "False")
      e->value = Value::boolean(false);
    else if (n == "none" || n == "None")
      e->value = Value::none();
    else
      e->kind = ExprKind::kName, e->name = n;
    next();
  } else if (tok.type == TokenType::kString) {
    std::string s;
    while (cur().type == TokenType::kString) s += next().text;  // adjacent literals join
    e->value = Value::string(std::move(s));
  } else if (tok.type == TokenType::kInt) {
    e->value = Value::integer(next().int_value);
  } else if (tok.type == TokenType::kFloat) {
    e->value = Value::number(next().float_value);
  } else if (is_op("(")) {
    next();
    e = parse_tuple(true, {}, true);
    expect_op(")");
  } else if (is_op("[") || is_op("{")) {
    e = parse_list_or_dict(is_op("{"));
  } else {
    fail_unexpected("an expression");
  }
  return e;
}

ExprPtr Parser::parse_list_or_dict(bool is_dict) {
  ExprPtr e = make(is_dict ? ExprKind::kDict : ExprKind::kList, next().line);
  const char* close = is_dict ? "}" : "]";
  while (!is_op(close)) {
    if (!e->args.empty()) {
      expect_op(",");
      if (is_op(close)) break;
    }
    e->args.push_back(parse_expression());
    if (is_dict) {
      expect_op(":");
      e->args.push_back(parse_expression());
    }
  }
  next();
  return e;
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".")) {
      const int line = next().line;
      if (cur().type == TokenType::kName) {
        ExprPtr e = make(ExprKind::kGetAttr, line);
        e->name = next().text;
        e->args.push_back(std::move(node));
        node = std::move(e);
      } else if (cur().type == TokenType::kInt) {
        ExprPtr e = make(ExprKind::kGetItem, line);
        e->args.push_back(std::move(node));
        e->args.push_back(make(ExprKind::kLiteral, line));
        e->args.back()->value = Value::integer(next().int_value);
        node = std::move(e);
      } else {
        fail_unexpected("an attribute name");
      }
    } else if (is_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (is_op("(")) {
      ExprPtr e = make(ExprKind::kCall, cur().line);
      e->args.push_back(std::move(node));
      parse_call_args(*e);
      node = std::move(e);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const int line = next().line;  // '['
  ExprPtr parts[3];
  int colons = 0;
  while (!is_op("]")) {
    if (is_op(":")) {
      if (++colons > 2) fail_unexpected("']'");
      next();
      continue;
    }
    if (parts[colons]) fail_unexpected("':' or ']'");
    parts[colons] = parse_expression();
  }
  next();
  if (colons == 0) {
    if (!parts[0]) fail("expected a subscript");
    ExprPtr e = make(ExprKind::kGetItem, line);
    e->args.push_back(std::move(node));
    e->args.push_back(std::move(parts[0]));
    return e;
  }
  ExprPtr e = make(ExprKind::kSlice, line);
  e->args.push_back(std::move(node));
  for (auto& p : parts) e->args.push_back(std::move(p));
  return e;
}

void Parser::parse_call_args(Expr& call) {
  expect_op("(");
  bool first = true;
  while (!skip_op(")")) {
    if (!first) {
      expect_op(",");
      if (skip_op(")")) break;
    }
    first = false;
    if (cur().type == TokenType::kName && look().type == TokenType::kOp && look().text == "=") {
      std::string key = next().text;
      next();
      call.kwargs.emplace_back(std::move(key), parse_expression());
    } else {
      if (!call.kwargs.empty()) fail("positional argument follows keyword argument");
      call.args.push_back(parse_expression());
    }
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op("|")) {
      next();
      node = parse_filter(std::move(node));
    } else if (is_name("is")) {
      node = parse_test(std::move(node));
    } else if (is_op("(")) {
      ExprPtr e = make(ExprKind::kCall, cur().line);
      e->args.push_back(std::move(node));
      parse_call_args(*e);
      node = std::move(e);
    } else {
      return node;
    }
  }
}

// One filter, and the rest of a chain when node is null (filter blocks, set blocks).
ExprPtr Parser::parse_filter(ExprPtr node) {
  const bool chain = node == nullptr;
  do {
    ExprPtr e = make(ExprKind::kFilter, cur().line);
    e->name = expect_name();
    while (is_op(".")) next(), e->name += "." + expect_name();
    e->args.push_back(std::move(node));
    if (is_op("(")) parse_call_args(*e);
    node = std::move(e);
  } while (chain && skip_op("|"));
  return node;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  ExprPtr e = make(ExprKind::kTest, next().line);  // 'is'
  e->negated = skip_name("not");
  e->name = expect_name();
  while (is_op(".")) next(), e->name += "." + expect_name();
  e->args.push_back(std::move(node));
  const TokenType t = cur().type;
  if (is_op("(")) {
    parse_call_args(*e);
  } else if ((t == TokenType::kName || t == TokenType::kString || t == TokenType::kInt ||
              t == TokenType::kFloat || is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail("you cannot chain multiple tests with is");
    e->args.push_back(parse_postfix(parse_primary()));
  }
  return e;
}

}  // namespace s4kv::tokenizer::jinja
