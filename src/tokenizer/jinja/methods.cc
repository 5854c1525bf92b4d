// Attribute and item access as jinja2's ImmutableSandboxedEnvironment does it, and the
// whitelisted methods of str, dict and list. Dunder attributes and mutating methods come
// back as an Undefined that raises a security error when used: the sandbox's unsafe_undefined.
#include <algorithm>
#include <cctype>
#include <set>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/utf8.h"

namespace s4kv::tokenizer::jinja {
namespace {

std::string object_type_repr(const Value& obj) {
  return obj.is_none() ? "None" : obj.type_name() + " object";
}

Value no_attribute(const Value& obj, const std::string& name) {
  return Value::undefined("'" + object_type_repr(obj) + "' has no attribute '" + name + "'");
}

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined("access to attribute '" + name + "' of '" + obj.type_name() +
                          "' object is unsafe.");
}

bool is_mutating(const Value& obj, const std::string& name) {
  static const std::set<std::string> kDict = {"pop", "popitem", "setdefault", "update", "clear"};
  static const std::set<std::string> kList = {"append", "extend",  "insert", "pop",
                                              "remove", "reverse", "sort",   "clear"};
  return obj.is_dict() ? kDict.contains(name) : obj.is_list() && kList.contains(name);
}

std::string ascii_map(std::string s, int (*f)(int)) {
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(f(c));
  }
  return s;
}

std::string py_title(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    const bool alpha =
        std::isalpha(static_cast<unsigned char>(c)) && static_cast<unsigned char>(c) < 0x80;
    if (alpha) c = static_cast<char>(prev_cased ? std::tolower(c) : std::toupper(c));
    prev_cased = alpha;
  }
  return out;
}

std::optional<std::string> opt_string(const std::optional<Value>& v, const char* what) {
  if (!v || v->is_none()) return std::nullopt;
  return expect_string(*v, what);
}

bool starts_or_ends(const std::string& s, const Value& arg, bool start) {
  auto test = [&](const Value& p) {
    const std::string& x = expect_string(p, start ? "startswith" : "endswith");
    return start ? s.starts_with(x) : s.ends_with(x);
  };
  if (arg.is_list() && arg.list().is_tuple) {
    return std::any_of(arg.list().items.begin(), arg.list().items.end(), test);
  }
  return test(arg);
}

Value string_list(std::vector<std::string> parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::list(std::move(out));
}

Value call_str_method(Interpreter& in, const std::string& s, const std::string& m, CallArgs& a) {
  ArgReader r(a, m);
  Value out;
  if (m == "startswith" || m == "endswith") {
    out = Value::boolean(starts_or_ends(s, r.require(0, "prefix"), m == "startswith"));
  } else if (m == "strip" || m == "lstrip" || m == "rstrip") {
    const auto chars = opt_string(r.get(0, "chars"), m.c_str());
    out = Value::string(py_strip(s, chars, m != "rstrip", m != "lstrip"));
  } else if (m == "split" || m == "rsplit") {
    const auto sep = opt_string(r.get(0, "sep"), m.c_str());
    const int64_t maxsplit = expect_int(r.get_or(1, "maxsplit", Value::integer(-1)), "maxsplit");
    if (sep && sep->empty()) throw TemplateError("empty separator");
    if (m == "rsplit" && maxsplit >= 0)
      throw TemplateError("rsplit with maxsplit is not supported");
    out = string_list(py_split(s, sep, maxsplit));
  } else if (m == "replace") {
    const std::string old = expect_string(r.require(0, "old"), "replace");
    const std::string repl = expect_string(r.require(1, "new"), "replace");
    const std::string res =
        py_replace(s, old, repl, expect_int(r.get_or(2, "count", Value::integer(-1)), "count"));
    in.check_size(res.size());
    out = Value::string(res);
  } else if (m == "upper" || m == "lower") {
    out = Value::string(ascii_map(s, m == "upper" ? ::toupper : ::tolower));
  } else if (m == "title") {
    out = Value::string(py_title(s));
  } else if (m == "capitalize") {
    std::string c = ascii_map(s, ::tolower);
    if (!c.empty()) c[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(c[0])));
    out = Value::string(c);
  } else if (m == "find" || m == "rfind" || m == "count") {
    const std::string sub = expect_string(r.require(0, "sub"), m.c_str());
    if (m == "count") {
      int64_t n = 0;
      if (sub.empty()) n = static_cast<int64_t>(utf8_length(s)) + 1;
      for (size_t p = sub.empty() ? std::string::npos : s.find(sub); p != std::string::npos;
           p = s.find(sub, p + sub.size()))
        ++n;
      out = Value::integer(n);
    } else {
      const size_t p = m == "find" ? s.find(sub) : s.rfind(sub);
      out = Value::integer(
          p == std::string::npos ? -1 : static_cast<int64_t>(utf8_length(s.substr(0, p))));
    }
  } else if (m == "join") {
    std::string res;
    const std::vector<Value> items = iterate(r.require(0, "iterable"));
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) res += s;
      res += expect_string(items[i], "join");
      in.check_size(res.size());
    }
    out = Value::string(std::move(res));
  } else if (m == "splitlines") {
    std::vector<std::string> lines = py_split(s, std::string("\n"), -1);
    if (!lines.empty() && lines.back().empty()) lines.pop_back();
    out = string_list(std::move(lines));
  } else {  // isdigit, isalpha, isalnum, isspace, islower, isupper
    const std::u32string u = utf8_decode(s);
    bool ok = !u.empty();
    bool cased = false;
    for (char32_t c : u) {
      const bool ascii = c < 0x80;
      if (m == "isspace")
        ok = ok && is_py_space(c);
      else if (m == "isdigit")
        ok = ok && ascii && std::isdigit(static_cast<int>(c));
      else if (m == "isalpha")
        ok = ok && ascii && std::isalpha(static_cast<int>(c));
      else if (m == "isalnum")
        ok = ok && ascii && std::isalnum(static_cast<int>(c));
      else if (m == "islower")
        ok = ok && !(ascii && std::isupper(static_cast<int>(c))),
        cased |= ascii && std::islower(static_cast<int>(c));
      else
        ok = ok && !(ascii && std::islower(static_cast<int>(c))),
        cased |= ascii && std::isupper(static_cast<int>(c));
    }
    if (m == "islower" || m == "isupper") ok = ok && cased;
    out = Value::boolean(ok);
  }
  r.finish();
  return out;
}

const std::set<std::string>& str_methods() {
  static const std::set<std::string> k = {
      "startswith", "endswith", "strip",   "lstrip",     "rstrip",  "split",   "rsplit", "replace",
      "upper",      "lower",    "title",   "capitalize", "find",    "rfind",   "count",  "join",
      "splitlines", "isdigit",  "isalpha", "isalnum",    "isspace", "islower", "isupper"};
  return k;
}

Value items_of(const DictData& d) {
  std::vector<Value> out;
  out.reserve(d.items.size());
  for (const auto& [k, v] : d.items) out.push_back(Value::list({Value::string(k), v}, true));
  return Value::list(std::move(out));
}

Value call_dict_method(const Value& obj, const std::string& m, CallArgs& a) {
  ArgReader r(a, m);
  Value out;
  const DictData& d = obj.dict();
  if (m == "items") {
    out = items_of(d);
  } else if (m == "keys" || m == "values") {
    std::vector<Value> items;
    for (const auto& [k, v] : d.items) items.push_back(m == "keys" ? Value::string(k) : v);
    out = Value::list(std::move(items));
  } else {  // get
    const Value key = r.require(0, "key");
    const Value* v = key.is_string() ? d.find(key.str()) : nullptr;
    out = v ? *v : r.get_or(1, "default", Value::none());
  }
  r.finish();
  return out;
}

Value call_list_method(const Value& obj, const std::string& m, CallArgs& a) {
  ArgReader r(a, m);
  const Value x = r.require(0, "value");
  r.finish();
  const auto& items = obj.list().items;
  if (m == "count") {
    return Value::integer(
        std::count_if(items.begin(), items.end(), [&](const Value& v) { return equal(v, x); }));
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (equal(items[i], x)) return Value::integer(static_cast<int64_t>(i));
  }
  throw TemplateError(x.repr() + " is not in list");
}

// A bound method: the object is captured by value (values are immutable).
Value bound(const Value& obj, const std::string& name) {
  return Value::callable(name, [obj, name](Interpreter& in, CallArgs& a) -> Value {
    if (obj.is_string()) return call_str_method(in, obj.str(), name, a);
    if (obj.is_dict()) return call_dict_method(obj, name, a);
    return call_list_method(obj, name, a);
  });
}

// getattr() without the dict-key fallback: methods, namespace attributes, refusals.
std::optional<Value> python_attr(const Value& obj, const std::string& name) {
  if (name.starts_with("__")) return unsafe(obj, name);
  if (is_mutating(obj, name)) return unsafe(obj, name);
  if (obj.is_string() && str_methods().contains(name)) return bound(obj, name);
  if (obj.is_dict() && !obj.dict().is_namespace &&
      (name == "items" || name == "keys" || name == "values" || name == "get")) {
    return bound(obj, name);
  }
  if (obj.is_list() && (name == "index" || name == "count")) return bound(obj, name);
  if (obj.is_dict() && obj.dict().is_namespace) {
    const Value* v = obj.dict().find(name);
    if (v) return *v;
  }
  return std::nullopt;
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  require_defined(obj);
  if (auto v = python_attr(obj, name)) return *v;
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().find(name)) return *v;
  }
  return no_attribute(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  require_defined(obj);
  if (obj.is_dict() && !obj.dict().is_namespace && key.is_string()) {
    if (const Value* v = obj.dict().find(key.str())) return *v;
  }
  const bool int_key = key.kind() == Kind::kInt || key.kind() == Kind::kBool;
  if ((obj.is_list() || obj.is_string()) && int_key) {
    const bool is_str = obj.is_string();
    const std::u32string chars = is_str ? utf8_decode(obj.str()) : std::u32string();
    const auto n = static_cast<int64_t>(is_str ? chars.size() : obj.list().items.size());
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (!is_str) return obj.list().items[static_cast<size_t>(i)];
      return Value::string(utf8_encode(std::u32string(1, chars[static_cast<size_t>(i)])));
    }
  }
  if (key.is_string()) {
    if (auto v = python_attr(obj, key.str())) return *v;
    return no_attribute(obj, key.str());
  }
  return Value::undefined(object_type_repr(obj) + " has no element " + key.repr());
}

Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  require_defined(obj);
  auto index = [](const Value& v, int64_t fallback) {
    if (v.is_none()) return fallback;
    if (v.kind() != Kind::kInt && v.kind() != Kind::kBool) {
      throw TemplateError("slice indices must be integers or None");
    }
    return v.as_int();
  };
  const int64_t st = index(step, 1);
  if (st == 0) throw TemplateError("slice step cannot be zero");
  if (!obj.is_string() && !obj.is_list()) {
    throw TemplateError("'" + obj.type_name() + "' object is not subscriptable");
  }
  const std::u32string chars = obj.is_string() ? utf8_decode(obj.str()) : std::u32string();
  const auto n = static_cast<int64_t>(obj.is_string() ? chars.size() : obj.list().items.size());
  const int64_t lower = st > 0 ? 0 : -1, upper = st > 0 ? n : n - 1;
  auto clamp = [&](const Value& v, int64_t fallback) {
    if (v.is_none()) return fallback;
    int64_t i = index(v, 0);
    if (i < 0) return std::max(i + n, lower);
    return std::min(i, upper);
  };
  const int64_t b = clamp(start, st > 0 ? lower : upper), e = clamp(stop, st > 0 ? upper : lower);
  std::u32string s;
  std::vector<Value> items;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
    if (obj.is_string())
      s.push_back(chars[static_cast<size_t>(i)]);
    else
      items.push_back(obj.list().items[static_cast<size_t>(i)]);
  }
  if (obj.is_string()) return Value::string(utf8_encode(s));
  return Value::list(std::move(items), obj.list().is_tuple);
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return {};
    case Kind::kList:
      return v.list().items;
    case Kind::kDict: {
      if (v.dict().is_namespace) break;
      std::vector<Value> keys;
      for (const auto& [k, _] : v.dict().items) keys.push_back(Value::string(k));
      return keys;
    }
    case Kind::kString: {
      std::vector<Value> chars;
      for (char32_t c : utf8_decode(v.str()))
        chars.push_back(Value::string(utf8_encode(std::u32string(1, c))));
      return chars;
    }
    default:
      break;
  }
  throw TemplateError("'" + v.type_name() + "' object is not iterable");
}

std::string expect_string(const Value& v, const char* what) {
  require_defined(v);
  if (!v.is_string())
    throw TemplateError(std::string(what) + ": expected a string, got '" + v.type_name() + "'");
  return v.str();
}

int64_t expect_int(const Value& v, const char* what) {
  require_defined(v);
  if (v.kind() != Kind::kInt && v.kind() != Kind::kBool) {
    throw TemplateError(std::string(what) + ": expected an integer, got '" + v.type_name() + "'");
  }
  return v.as_int();
}

std::optional<Value> ArgReader::get(size_t pos, const char* name) {
  std::optional<Value> out;
  if (pos < a_.args.size()) {
    out = a_.args[pos];
    max_pos_ = std::max(max_pos_, pos + 1);
  }
  for (auto& [k, v] : a_.kwargs) {
    if (k != name) continue;
    if (out) throw TemplateError(fname_ + "() got multiple values for argument '" + k + "'");
    out = v;
    used_.push_back(k);
  }
  return out;
}

Value ArgReader::get_or(size_t pos, const char* name, Value fallback) {
  auto v = get(pos, name);
  return v ? *v : std::move(fallback);
}

Value ArgReader::require(size_t pos, const char* name) {
  auto v = get(pos, name);
  if (!v) throw TemplateError(fname_ + "() missing required argument '" + name + "'");
  return *v;
}

void ArgReader::finish() {
  if (a_.args.size() > max_pos_) {
    throw TemplateError(fname_ + "() takes " + std::to_string(max_pos_) +
                        " positional argument(s) but " + std::to_string(a_.args.size()) +
                        " were given");
  }
  for (auto& [k, v] : a_.kwargs) {
    if (std::find(used_.begin(), used_.end(), k) == used_.end()) {
      throw TemplateError(fname_ + "() got an unexpected keyword argument '" + k + "'");
    }
  }
}

}  // namespace s4kv::tokenizer::jinja
