// The value model of the Jinja subset: Python's data types as templates see them (Undefined,
// None, bool, int, float, str, list/tuple, dict, jinja2's Namespace, callables), with Python
// semantics for truthiness, equality, ordering, str() and repr(), so renderings match jinja2.
// Strings are UTF-8 (validated on the way in); lists and dicts are shared and, except for a
// Namespace, never mutated after construction (the immutable sandbox). Dicts keep insertion
// order and have string keys only. TemplateError is the interpreter's internal error: it
// never leaves jinja/ (Template turns it into a Status).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace s4kv::tokenizer::jinja {

// Raised inside the interpreter for every template-level failure (what jinja2 raises as
// UndefinedError, TypeError, SecurityError, TemplateError ...). Caught by Template.
class TemplateError : public std::runtime_error {
 public:
  explicit TemplateError(const std::string& message) : std::runtime_error(message) {}
};

// raise_exception(...) from a template: kept apart so the message can say so.
class RaisedError : public TemplateError {
 public:
  explicit RaisedError(const std::string& message) : TemplateError(message) {}
};

// Deepest nesting of lists/dicts that repr(), ==, < and tojson walk (Python would hit its
// recursion limit; we refuse well before the C++ stack is at risk).
inline constexpr int kMaxNesting = 256;

// A sandbox limit was hit: the step budget, the output cap or the recursion depth.
class LimitError : public TemplateError {
 public:
  explicit LimitError(const std::string& message) : TemplateError(message) {}
};

enum class Kind : uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kDict,
  kCallable
};

class Value;
class Interpreter;

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;
};

struct DictData {
  std::vector<std::pair<std::string, Value>> items;  // insertion order
  std::unordered_map<std::string, size_t> index;     // key -> position in items
  bool is_namespace = false;                         // jinja2's namespace(): attributes settable

  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value value);
};

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

using NativeFn = std::function<Value(Interpreter&, CallArgs&)>;

struct Callable {
  std::string name;
  NativeFn fn;
};

class Value {
 public:
  Value() = default;  // Undefined without a hint
  static Value undefined(std::string hint);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);
  static Value string(std::string s);
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value dict(std::shared_ptr<DictData> d);
  static Value callable(std::string name, NativeFn fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_number() const {
    return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat;
  }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double as_float() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(as_int()); }
  const std::string& str() const { return *s_; }  // kString only
  const ListData& list() const { return *l_; }
  const DictData& dict() const { return *d_; }
  DictData& mutable_dict() const { return *d_; }
  const Callable& fn() const { return *c_; }
  // The message to raise when an Undefined is used where a value is needed.
  std::string undefined_message() const;

  bool truthy() const;
  // Python's str(): what {{ value }} prints (Undefined prints nothing).
  std::string to_str() const;
  // Python's repr(), as str() of containers prints their items.
  std::string repr() const;
  // jinja2 messages name types as Python does: 'str', 'dict', 'NoneType' ...
  std::string type_name() const;

 private:
  std::string repr_at(int depth) const;

  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;  // string, or an Undefined's hint
  std::shared_ptr<ListData> l_;
  std::shared_ptr<DictData> d_;
  std::shared_ptr<Callable> c_;
};

// Python ==.
bool equal(const Value& a, const Value& b);
// Python <; throws TemplateError for unordered types.
bool less(const Value& a, const Value& b);
// Python's repr() of a float: shortest round trip, '1.0', '1e+16', '1e-05', 'inf', 'nan'.
std::string float_repr(double f);
// Raises the Undefined's error (jinja2's _fail_with_undefined_error) when v is Undefined.
void require_defined(const Value& v);

}  // namespace s4kv::tokenizer::jinja
