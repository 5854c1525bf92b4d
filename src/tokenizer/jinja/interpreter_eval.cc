// Expression evaluation half of the interpreter.
#include "common/check.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"

namespace s4kv::tokenizer::jinja {

Value Interpreter::eval(const Expr& e) {
  step();
  line_ = e.line;
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.value;
    case ExprKind::kName:
      return lookup(e.name);
    case ExprKind::kList:
    case ExprKind::kTuple:
    case ExprKind::kDict:
      return eval_literal_container(e);
    case ExprKind::kGetAttr:
      return get_attr(eval(*e.args[0]), e.name);
    case ExprKind::kGetItem: {
      const Value obj = eval(*e.args[0]);
      return get_item(obj, eval(*e.args[1]));
    }
    case ExprKind::kSlice: {
      const Value obj = eval(*e.args[0]);
      Value parts[3];
      for (int i = 0; i < 3; ++i) parts[i] = e.args[i + 1] ? eval(*e.args[i + 1]) : Value::none();
      return slice_value(obj, parts[0], parts[1], parts[2]);
    }
    case ExprKind::kCall:
      return eval_call(e);
    case ExprKind::kFilter:
      return eval_filter(e, nullptr);
    case ExprKind::kTest:
      return eval_test(e);
    case ExprKind::kNeg:
      return negate(eval(*e.args[0]));
    case ExprKind::kPos: {
      Value v = eval(*e.args[0]);
      require_defined(v);
      if (!v.is_number())
        throw TemplateError("bad operand type for unary +: '" + v.type_name() + "'");
      return v;
    }
    case ExprKind::kNot:
      return Value::boolean(!eval(*e.args[0]).truthy());
    case ExprKind::kBinary: {
      const Value a = eval(*e.args[0]);
      return binary_op(*this, e.name, a, eval(*e.args[1]));
    }
    case ExprKind::kAnd: {
      Value a = eval(*e.args[0]);
      return a.truthy() ? eval(*e.args[1]) : a;
    }
    case ExprKind::kOr: {
      Value a = eval(*e.args[0]);
      return a.truthy() ? a : eval(*e.args[1]);
    }
    case ExprKind::kCompare:
      return eval_compare(e);
    case ExprKind::kConcat: {
      std::string out;
      for (const ExprPtr& a : e.args) {
        out += eval(*a).to_str();
        check_size(out.size());
      }
      return Value::string(std::move(out));
    }
    case ExprKind::kCond:
      if (eval(*e.args[0]).truthy()) return eval(*e.args[1]);
      if (e.args[2]) return eval(*e.args[2]);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
  }
  return Value();
}

Value Interpreter::eval_literal_container(const Expr& e) {
  if (e.kind == ExprKind::kDict) {
    auto d = std::make_shared<DictData>();
    for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
      const Value k = eval(*e.args[i]);
      if (!k.is_string()) throw TemplateError("dict keys must be strings in chat templates");
      d->set(k.str(), eval(*e.args[i + 1]));
    }
    return Value::dict(std::move(d));
  }
  std::vector<Value> items;
  items.reserve(e.args.size());
  for (const ExprPtr& a : e.args) items.push_back(eval(*a));
  return Value::list(std::move(items), e.kind == ExprKind::kTuple);
}

CallArgs Interpreter::eval_args(const Expr& e, size_t first) {
  CallArgs args;
  for (size_t i = first; i < e.args.size(); ++i) args.args.push_back(eval(*e.args[i]));
  for (const auto& [k, v] : e.kwargs) args.kwargs.emplace_back(k, eval(*v));
  return args;
}

Value Interpreter::eval_call(const Expr& e) {
  const Value callee = eval(*e.args[0]);
  CallArgs args = eval_args(e, 1);
  line_ = e.line;
  return call(callee, args);
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.kind() == Kind::kCallable) return callee.fn().fn(*this, args);
  require_defined(callee);
  throw TemplateError("'" + callee.type_name() + "' object is not callable");
}

Value Interpreter::eval_filter(const Expr& e, const Value* input) {
  Value v;
  const Expr* inner = e.args[0].get();
  if (!inner) {
    S4KV_CHECK(input != nullptr, "filter block without input");
    v = *input;
  } else if (inner->kind == ExprKind::kFilter) {
    v = eval_filter(*inner, input);
  } else {
    v = eval(*inner);
  }
  CallArgs args = eval_args(e, 1);
  step();
  line_ = e.line;
  return apply_filter(*this, e.name, v, args);
}

Value Interpreter::eval_test(const Expr& e) {
  const Value v = eval(*e.args[0]);
  CallArgs args = eval_args(e, 1);
  line_ = e.line;
  const bool r = apply_test(*this, e.name, v, args);
  return Value::boolean(e.negated ? !r : r);
}

Value Interpreter::eval_compare(const Expr& e) {
  Value left = eval(*e.args[0]);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.args[i + 1]);
    const std::string& op = e.ops[i];
    bool r = false;
    if (op == "==")
      r = equal(left, right);
    else if (op == "!=")
      r = !equal(left, right);
    else if (op == "<")
      r = less(left, right);
    else if (op == ">")
      r = less(right, left);
    else if (op == "<=")
      r = less(left, right) || equal(left, right);
    else if (op == ">=")
      r = less(right, left) || equal(left, right);
    else if (op == "in")
      r = contains(right, left);
    else if (op == "notin")
      r = !contains(right, left);
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

}  // namespace s4kv::tokenizer::jinja
