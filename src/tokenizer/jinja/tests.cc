// Jinja tests (`x is defined`, `x is string` ...) with jinja2's definitions, and the globals
// a chat template may call: range (capped as the sandbox caps it), namespace, dict,
// raise_exception and strftime_now (transformers' additions).
#include <cctype>
#include <ctime>
#include <functional>
#include <map>

#include "tokenizer/jinja/builtins.h"

namespace s4kv::tokenizer::jinja {
namespace {

using Test = std::function<bool(const Value&, const std::optional<Value>&)>;

bool is_int(const Value& v) { return v.kind() == Kind::kInt; }

bool all_case(const Value& v, bool upper) {
  if (!v.is_string()) return false;
  bool cased = false;
  for (char c : v.str()) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x80) continue;
    if (upper ? std::islower(u) : std::isupper(u)) return false;
    cased |= upper ? std::isupper(u) != 0 : std::islower(u) != 0;
  }
  return cased;
}

const Value& arg(const std::optional<Value>& a) {
  if (!a) throw TemplateError("this test needs an argument");
  return *a;
}

const std::map<std::string, Test>& tests() {
  static const std::map<std::string, Test> k = {
      {"defined", [](const Value& v, const auto&) { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, const auto&) { return v.is_undefined(); }},
      {"none", [](const Value& v, const auto&) { return v.is_none(); }},
      {"boolean", [](const Value& v, const auto&) { return v.kind() == Kind::kBool; }},
      {"true", [](const Value& v, const auto&) { return v.kind() == Kind::kBool && v.as_bool(); }},
      {"false",
       [](const Value& v, const auto&) { return v.kind() == Kind::kBool && !v.as_bool(); }},
      {"integer", [](const Value& v, const auto&) { return is_int(v); }},
      {"float", [](const Value& v, const auto&) { return v.kind() == Kind::kFloat; }},
      {"number", [](const Value& v, const auto&) { return v.is_number(); }},
      {"string", [](const Value& v, const auto&) { return v.is_string(); }},
      {"mapping",
       [](const Value& v, const auto&) { return v.is_dict() && !v.dict().is_namespace; }},
      {"iterable",
       [](const Value& v, const auto&) {
         return v.is_undefined() || v.is_string() || v.is_list() ||
                (v.is_dict() && !v.dict().is_namespace);
       }},
      {"sequence",
       [](const Value& v, const auto&) {
         return v.is_undefined() || v.is_string() || v.is_list() ||
                (v.is_dict() && !v.dict().is_namespace);
       }},
      {"callable", [](const Value& v, const auto&) { return v.kind() == Kind::kCallable; }},
      {"sameas",
       [](const Value& v, const auto& a) {
         const Value& o = arg(a);
         if (v.kind() != o.kind()) return false;
         return (v.is_none() || v.kind() == Kind::kBool || v.is_undefined()) && equal(v, o);
       }},
      {"eq", [](const Value& v, const auto& a) { return equal(v, arg(a)); }},
      {"ne", [](const Value& v, const auto& a) { return !equal(v, arg(a)); }},
      {"lt", [](const Value& v, const auto& a) { return less(v, arg(a)); }},
      {"le", [](const Value& v, const auto& a) { return less(v, arg(a)) || equal(v, arg(a)); }},
      {"gt", [](const Value& v, const auto& a) { return less(arg(a), v); }},
      {"ge", [](const Value& v, const auto& a) { return less(arg(a), v) || equal(v, arg(a)); }},
      {"in", [](const Value& v, const auto& a) { return contains(arg(a), v); }},
      {"odd", [](const Value& v, const auto&) { return expect_int(v, "odd") % 2 != 0; }},
      {"even", [](const Value& v, const auto&) { return expect_int(v, "even") % 2 == 0; }},
      {"divisibleby",
       [](const Value& v, const auto& a) {
         const int64_t d = expect_int(arg(a), "divisibleby");
         if (d == 0) throw TemplateError("integer division or modulo by zero");
         return expect_int(v, "divisibleby") % d == 0;
       }},
      {"lower", [](const Value& v, const auto&) { return all_case(v, false); }},
      {"upper", [](const Value& v, const auto&) { return all_case(v, true); }},
  };
  return k;
}

std::string canonical(const std::string& name) {
  static const std::map<std::string, std::string> kAliases = {
      {"equalto", "eq"}, {"==", "eq"},          {"!=", "ne"}, {"lessthan", "lt"}, {"<", "lt"},
      {"<=", "le"},      {"greaterthan", "gt"}, {">", "gt"},  {">=", "ge"}};
  auto it = kAliases.find(name);
  return it == kAliases.end() ? name : it->second;
}

Value make_range(Interpreter& in, CallArgs& a) {
  ArgReader r(a, "range");
  const int64_t x = expect_int(r.require(0, "start"), "range");
  const auto y = r.get(1, "stop");
  const int64_t step = expect_int(r.get_or(2, "step", Value::integer(1)), "range");
  r.finish();
  const int64_t start = y ? x : 0, stop = y ? expect_int(*y, "range") : x;
  if (step == 0) throw TemplateError("range() arg 3 must not be zero");
  const int64_t n = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                             : (start > stop ? (start - stop - step - 1) / -step : 0);
  if (n > 100000) {
    throw TemplateError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  in.step(n);
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) items.push_back(Value::integer(start + i * step));
  return Value::list(std::move(items));
}

std::shared_ptr<DictData> make_dict(CallArgs& a, bool is_namespace, const char* fname) {
  auto d = std::make_shared<DictData>();
  d->is_namespace = is_namespace;
  if (a.args.size() > 1)
    throw TemplateError(std::string(fname) + "() takes at most 1 positional argument");
  if (!a.args.empty()) {
    const Value& init = a.args[0];
    if (!init.is_dict() || init.dict().is_namespace) {
      throw TemplateError(std::string(fname) + "() positional argument must be a mapping");
    }
    for (const auto& [k, v] : init.dict().items) d->set(k, v);
  }
  for (auto& [k, v] : a.kwargs) d->set(k, v);
  return d;
}

Value strftime_now(CallArgs& a) {
  ArgReader r(a, "strftime_now");
  const std::string fmt = expect_string(r.require(0, "format"), "strftime_now");
  r.finish();
  if (fmt.size() > 256) throw TemplateError("strftime_now: format longer than 256 bytes");
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[1024];
  const size_t n = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
  return Value::string(std::string(buf, n));
}

}  // namespace

bool has_test(const std::string& name) { return tests().contains(canonical(name)); }

bool apply_test(Interpreter&, const std::string& name, const Value& v, CallArgs& args) {
  auto it = tests().find(canonical(name));
  if (it == tests().end()) throw TemplateError("no test named '" + name + "'");
  ArgReader r(args, name);
  const std::optional<Value> a = r.get(0, "other");
  r.finish();
  return it->second(v, a);
}

void install_globals(Scope& root) {
  root.vars["range"] = Value::callable("range", make_range);
  root.vars["dict"] = Value::callable(
      "dict", [](Interpreter&, CallArgs& a) { return Value::dict(make_dict(a, false, "dict")); });
  root.vars["namespace"] = Value::callable("namespace", [](Interpreter& in, CallArgs& a) {
    auto ns = make_dict(a, true, "namespace");
    in.track_namespace(ns);
    return Value::dict(std::move(ns));
  });
  root.vars["raise_exception"] =
      Value::callable("raise_exception", [](Interpreter&, CallArgs& a) -> Value {
        throw RaisedError(a.args.empty() ? std::string() : a.args[0].to_str());
      });
  root.vars["strftime_now"] =
      Value::callable("strftime_now", [](Interpreter&, CallArgs& a) { return strftime_now(a); });
}

}  // namespace s4kv::tokenizer::jinja
