// Arithmetic and membership with Python semantics: int/float promotion, floor division and
// modulo following the divisor's sign, str/list concatenation and repetition (size-capped).
// Integers are 64-bit: where Python would grow a big integer we raise an overflow error.
#include <cmath>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"

namespace s4kv::tokenizer::jinja {
namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  if (op == "+" && a.is_string()) {
    throw TemplateError("can only concatenate str (not \"" + b.type_name() + "\") to str");
  }
  throw TemplateError("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
                      b.type_name() + "'");
}

[[noreturn]] void overflow() {
  throw TemplateError("integer overflow (S4 KV integers are 64-bit)");
}

Value repeat(Interpreter& in, const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value::string("") : Value::list({}, seq.list().is_tuple);
  const size_t unit = seq.is_string() ? seq.str().size() : seq.list().items.size();
  if (unit != 0 && static_cast<uint64_t>(n) > in.limits().max_output_bytes / unit) {
    in.check_size(in.limits().max_output_bytes + 1);
  }
  in.step(n + static_cast<int64_t>((unit * static_cast<size_t>(n)) >> 10));
  if (seq.is_string()) {
    std::string out;
    out.reserve(unit * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value::string(std::move(out));
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i)
    out.insert(out.end(), seq.list().items.begin(), seq.list().items.end());
  return Value::list(std::move(out), seq.list().is_tuple);
}

int64_t int_pow(int64_t base, int64_t exp) {
  int64_t r = 1;
  while (exp > 0) {
    if ((exp & 1) && __builtin_mul_overflow(r, base, &r)) overflow();
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) overflow();
  }
  return r;
}

Value numeric(const std::string& op, const Value& a, const Value& b) {
  const bool floats = a.kind() == Kind::kFloat || b.kind() == Kind::kFloat;
  if (op == "/") {
    if (b.as_float() == 0) throw TemplateError("division by zero");
    return Value::number(a.as_float() / b.as_float());
  }
  if (floats) {
    const double x = a.as_float(), y = b.as_float();
    if (op == "+") return Value::number(x + y);
    if (op == "-") return Value::number(x - y);
    if (op == "*") return Value::number(x * y);
    if (op == "**") return Value::number(std::pow(x, y));
    if (y == 0) throw TemplateError("float division by zero");
    if (op == "//") return Value::number(std::floor(x / y));
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value::number(m);
  }
  const int64_t x = a.as_int(), y = b.as_int();
  int64_t r = 0;
  if (op == "+") return __builtin_add_overflow(x, y, &r) ? (overflow(), a) : Value::integer(r);
  if (op == "-") return __builtin_sub_overflow(x, y, &r) ? (overflow(), a) : Value::integer(r);
  if (op == "*") return __builtin_mul_overflow(x, y, &r) ? (overflow(), a) : Value::integer(r);
  if (op == "**") {
    if (y < 0) return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
    return Value::integer(int_pow(x, y));
  }
  if (y == 0) throw TemplateError("integer division or modulo by zero");
  if (x == INT64_MIN && y == -1) overflow();
  int64_t q = x / y, m = x % y;
  if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;
  return Value::integer(op == "//" ? q : m);
}

}  // namespace

Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b) {
  require_defined(a);
  require_defined(b);
  if (a.is_number() && b.is_number()) return numeric(op, a, b);
  if (op == "+" && a.is_string() && b.is_string()) {
    in.check_size(a.str().size() + b.str().size());
    in.step(static_cast<int64_t>((a.str().size() + b.str().size()) >> 10));  // copying costs
    return Value::string(a.str() + b.str());
  }
  if (op == "+" && a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple) {
    in.check_size(a.list().items.size() + b.list().items.size());
    std::vector<Value> items = a.list().items;
    items.insert(items.end(), b.list().items.begin(), b.list().items.end());
    return Value::list(std::move(items), a.list().is_tuple);
  }
  if (op == "*") {
    const bool a_seq = a.is_string() || a.is_list(), b_seq = b.is_string() || b.is_list();
    const bool a_int = a.kind() == Kind::kInt || a.kind() == Kind::kBool;
    const bool b_int = b.kind() == Kind::kInt || b.kind() == Kind::kBool;
    if (a_seq && b_int) return repeat(in, a, b.as_int());
    if (b_seq && a_int) return repeat(in, b, a.as_int());
  }
  unsupported(op, a, b);
}

Value negate(const Value& v) {
  require_defined(v);
  if (v.kind() == Kind::kFloat) return Value::number(-v.as_float());
  if (v.is_number()) {
    if (v.as_int() == INT64_MIN) overflow();
    return Value::integer(-v.as_int());
  }
  throw TemplateError("bad operand type for unary -: '" + v.type_name() + "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kUndefined:
      return false;
    case Kind::kString:
      if (!item.is_string()) {
        throw TemplateError("'in <string>' requires string as left operand, not " +
                            item.type_name());
      }
      return container.str().find(item.str()) != std::string::npos;
    case Kind::kList:
      for (const Value& v : container.list().items) {
        if (equal(v, item)) return true;
      }
      return false;
    case Kind::kDict:
      return item.is_string() && container.dict().find(item.str()) != nullptr;
    default:
      throw TemplateError("argument of type '" + container.type_name() + "' is not iterable");
  }
}

}  // namespace s4kv::tokenizer::jinja
