// The syntax tree of a parsed template. Expressions and statements are plain structs owned
// through unique_ptr; the field comments say which fields each kind uses. A tree is
// immutable after parsing and may be rendered by many threads at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace s4kv::tokenizer::jinja {

enum class ExprKind {
  kLiteral,  // value
  kName,     // name
  kList,     // args: elements
  kTuple,    // args: elements
  kDict,     // args: key0, value0, key1, value1 ...
  kGetAttr,  // args[0] object, name: attribute
  kGetItem,  // args[0] object, args[1] key
  kSlice,    // args[0] object, args[1..3] start, stop, step (each may be null)
  kCall,     // args[0] callee, args[1..] positional, kwargs
  kFilter,   // args[0] value, name: filter, args[1..] positional, kwargs
  kTest,     // args[0] value, name: test, args[1..] positional, kwargs, negated
  kNeg,      // args[0]
  kPos,      // args[0]
  kNot,      // args[0]
  kBinary,   // name: + - * / // % **, args[0] and args[1]
  kAnd,      // args[0], args[1]
  kOr,       // args[0], args[1]
  kCompare,  // args[0..n], ops[0..n-1]: == != < <= > >= in notin
  kConcat,   // args: operands of ~
  kCond,     // args[0] condition, args[1] then, args[2] else (may be null)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

enum class StmtKind {
  kText,      // text
  kOutput,    // expr
  kIf,        // branches (condition, body); else_body
  kFor,       // targets, expr: iterable, filter (may be null), body, else_body
  kSet,       // targets (one name, or several to unpack) or targets[0] + attr; expr
  kSetBlock,  // targets[0], body, filter (kFilter with null args[0], may be null)
  kMacro,     // targets[0]: name, params, body
  kBreak,
  kContinue,
  kFilterBlock,  // filter (kFilter chain with null innermost value), body
  kGeneration,   // body (transformers' {% generation %}: renders as its body)
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  std::string attr;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters and defaults
};

}  // namespace s4kv::tokenizer::jinja
