// The filters chat templates use, with jinja2's behaviour (and transformers' tojson).
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/json_value.h"
#include "tokenizer/jinja/utf8.h"

namespace s4kv::tokenizer::jinja {
namespace {

using Filter = std::function<Value(Interpreter&, const Value&, ArgReader&, CallArgs&)>;

Value do_tojson(const Value& v, ArgReader& r) {
  JsonDumpOptions o;
  o.ensure_ascii = r.get_or(0, "ensure_ascii", Value::boolean(false)).truthy();
  const Value indent = r.get_or(1, "indent", Value::none());
  if (indent.is_string()) {
    o.indent = indent.str();
  } else if (!indent.is_none()) {
    o.indent = std::string(static_cast<size_t>(std::max<int64_t>(
                               0, std::min<int64_t>(expect_int(indent, "indent"), 64))),
                           ' ');
  }
  const Value seps = r.get_or(2, "separators", Value::none());
  if (!seps.is_none()) {
    if (!seps.is_list() || seps.list().items.size() != 2)
      throw TemplateError("tojson: separators must be a pair of strings");
    o.separators = {expect_string(seps.list().items[0], "separators"),
                    expect_string(seps.list().items[1], "separators")};
  }
  o.sort_keys = r.get_or(3, "sort_keys", Value::boolean(false)).truthy();
  return Value::string(dump_json(v, o));
}

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return 0;
    case Kind::kString:
      return static_cast<int64_t>(utf8_length(v.str()));
    case Kind::kList:
      return static_cast<int64_t>(v.list().items.size());
    case Kind::kDict:
      if (!v.dict().is_namespace) return static_cast<int64_t>(v.dict().items.size());
      break;
    default:
      break;
  }
  throw TemplateError("object of type '" + v.type_name() + "' has no len()");
}

// Applies a test named by a filter's arguments (select/reject) or the truthiness.
bool passes(Interpreter& in, const Value& item, CallArgs& a, size_t first) {
  if (a.args.size() <= first) return item.truthy();
  const std::string test = expect_string(a.args[first], "test name");
  CallArgs rest;
  rest.args.assign(a.args.begin() + static_cast<long>(first) + 1, a.args.end());
  return apply_test(in, test, item, rest);
}

Value attribute_of(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    v = digits ? get_item(v, Value::integer(std::stoll(part))) : get_item(v, Value::string(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

Value select_items(Interpreter& in, const Value& v, CallArgs& a, bool want, bool by_attr) {
  std::vector<Value> out;
  const std::string attr =
      by_attr ? expect_string(a.args.empty() ? Value() : a.args[0], "attribute") : "";
  for (const Value& item : iterate(v)) {
    in.step();
    const Value subject = by_attr ? attribute_of(item, attr) : item;
    if (passes(in, subject, a, by_attr ? 1 : 0) == want) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value do_map(Interpreter& in, const Value& v, CallArgs& a) {
  std::vector<Value> out;
  ArgReader r(a, "map");
  const auto attr = r.get(99, "attribute");
  const Value fallback = r.get_or(99, "default", Value());
  for (const Value& item : iterate(v)) {
    in.step();
    if (attr) {
      Value x = attribute_of(item, expect_string(*attr, "attribute"));
      out.push_back(x.is_undefined() && !fallback.is_undefined() ? fallback : x);
    } else {
      if (a.args.empty()) throw TemplateError("map() needs a filter name or attribute=");
      CallArgs rest;
      rest.args.assign(a.args.begin() + 1, a.args.end());
      out.push_back(apply_filter(in, expect_string(a.args[0], "filter name"), item, rest));
    }
  }
  return Value::list(std::move(out));
}

Value do_sort(Interpreter& in, const Value& v, ArgReader& r) {
  const bool reverse = r.get_or(0, "reverse", Value::boolean(false)).truthy();
  const bool case_sensitive = r.get_or(1, "case_sensitive", Value::boolean(false)).truthy();
  const auto attr = r.get(2, "attribute");
  std::vector<Value> items = iterate(v);
  auto key = [&](const Value& x) {
    Value k = attr ? attribute_of(x, expect_string(*attr, "attribute")) : x;
    if (!case_sensitive && k.is_string()) {
      std::string s = k.str();
      for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return Value::string(s);
    }
    return k;
  };
  in.step(static_cast<int64_t>(items.size()));
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? less(key(y), key(x)) : less(key(x), key(y));
  });
  return Value::list(std::move(items));
}

Value do_indent(const Value& v, ArgReader& r) {
  const Value w = r.get_or(0, "width", Value::integer(4));
  const std::string pad =
      w.is_string()
          ? w.str()
          : std::string(static_cast<size_t>(std::clamp<int64_t>(expect_int(w, "width"), 0, 256)),
                        ' ');
  const bool first = r.get_or(1, "first", Value::boolean(false)).truthy();
  const bool blank = r.get_or(2, "blank", Value::boolean(false)).truthy();
  std::vector<std::string> lines = py_split(v.to_str() + "", std::string("\n"), -1);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += "\n";
    const bool indent =
        (i > 0 || first) && (blank || !py_strip(lines[i], std::nullopt, true, true).empty());
    out += (indent ? pad : "") + lines[i];
  }
  return Value::string(out);
}

Value do_escape(const Value& v) {
  std::string out;
  for (char c : v.to_str()) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return Value::string(out);
}

Value number_filter(const Value& v, ArgReader& r, bool to_int) {
  const Value fallback = r.get_or(0, "default", to_int ? Value::integer(0) : Value::number(0));
  if (v.is_number())
    return to_int ? Value::integer(static_cast<int64_t>(v.as_float()))
                  : Value::number(v.as_float());
  if (!v.is_string()) return fallback;
  const std::string s = py_strip(v.str(), std::nullopt, true, true);
  char* end = nullptr;
  if (to_int) {
    const long long i = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && end == s.c_str() + s.size()) return Value::integer(i);
  }
  const double f = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) return fallback;
  return to_int ? Value::integer(static_cast<int64_t>(f)) : Value::number(f);
}

const std::map<std::string, Filter>& filters() {
  static const std::map<std::string, Filter> k = {
      {"tojson",
       [](Interpreter&, const Value& v, ArgReader& r, CallArgs&) { return do_tojson(v, r); }},
      {"trim",
       [](Interpreter&, const Value& v, ArgReader& r, CallArgs&) {
         const Value chars = r.get_or(0, "chars", Value::none());
         return Value::string(
             py_strip(v.to_str(),
                      chars.is_none() ? std::nullopt
                                      : std::optional<std::string>(expect_string(chars, "trim")),
                      true, true));
       }},
      {"length", [](Interpreter&, const Value& v, ArgReader&,
                    CallArgs&) { return Value::integer(length_of(v)); }},
      {"items",
       [](Interpreter& in, const Value& v, ArgReader&, CallArgs& a) {
         if (v.is_undefined()) return Value::list({});
         if (!v.is_dict() || v.dict().is_namespace)
           throw TemplateError("Can only get item pairs from a mapping.");
         return in.call(get_attr(v, "items"), a);
       }},
      {"join",
       [](Interpreter& in, const Value& v, ArgReader& r, CallArgs&) {
         const std::string sep = r.get_or(0, "d", Value::string("")).to_str();
         const auto attr = r.get(1, "attribute");
         std::string out;
         const std::vector<Value> items = iterate(v);
         for (size_t i = 0; i < items.size(); ++i) {
           if (i) out += sep;
           out += (attr ? attribute_of(items[i], expect_string(*attr, "attribute")) : items[i])
                      .to_str();
           in.check_size(out.size());
         }
         return Value::string(std::move(out));
       }},
      {"default",
       [](Interpreter&, const Value& v, ArgReader& r, CallArgs&) {
         const Value fallback = r.get_or(0, "default_value", Value::string(""));
         const bool boolean = r.get_or(1, "boolean", Value::boolean(false)).truthy();
         return v.is_undefined() || (boolean && !v.truthy()) ? fallback : v;
       }},
      {"upper",
       [](Interpreter& in, const Value& v, ArgReader&, CallArgs& a) {
         return in.call(get_attr(Value::string(v.to_str()), "upper"), a);
       }},
      {"lower",
       [](Interpreter& in, const Value& v, ArgReader&, CallArgs& a) {
         return in.call(get_attr(Value::string(v.to_str()), "lower"), a);
       }},
      {"capitalize",
       [](Interpreter& in, const Value& v, ArgReader&, CallArgs& a) {
         return in.call(get_attr(Value::string(v.to_str()), "capitalize"), a);
       }},
      {"title",
       [](Interpreter& in, const Value& v, ArgReader&, CallArgs& a) {
         return in.call(get_attr(Value::string(v.to_str()), "title"), a);
       }},
      {"replace",
       [](Interpreter& in, const Value& v, ArgReader&, CallArgs& a) {
         return in.call(get_attr(Value::string(v.to_str()), "replace"), a);
       }},
      {"string", [](Interpreter&, const Value& v, ArgReader&,
                    CallArgs&) { return Value::string(v.to_str()); }},
      {"safe", [](Interpreter&, const Value& v, ArgReader&, CallArgs&) { return v; }},
      {"escape", [](Interpreter&, const Value& v, ArgReader&, CallArgs&) { return do_escape(v); }},
      {"list",
       [](Interpreter&, const Value& v, ArgReader&, CallArgs&) { return Value::list(iterate(v)); }},
      {"first",
       [](Interpreter&, const Value& v, ArgReader&, CallArgs&) {
         auto items = iterate(v);
         return items.empty() ? Value::undefined("No first item, sequence was empty.")
                              : items.front();
       }},
      {"last",
       [](Interpreter&, const Value& v, ArgReader&, CallArgs&) {
         auto items = iterate(v);
         return items.empty() ? Value::undefined("No last item, sequence was empty.")
                              : items.back();
       }},
      {"reverse",
       [](Interpreter&, const Value& v, ArgReader&, CallArgs&) {
         if (v.is_string()) {
           std::u32string u = utf8_decode(v.str());
           std::reverse(u.begin(), u.end());
           return Value::string(utf8_encode(u));
         }
         auto items = iterate(v);
         std::reverse(items.begin(), items.end());
         return Value::list(std::move(items));
       }},
      {"int", [](Interpreter&, const Value& v, ArgReader& r,
                 CallArgs&) { return number_filter(v, r, true); }},
      {"float", [](Interpreter&, const Value& v, ArgReader& r,
                   CallArgs&) { return number_filter(v, r, false); }},
      {"abs",
       [](Interpreter&, const Value& v, ArgReader&, CallArgs&) {
         return v.kind() == Kind::kFloat
                    ? Value::number(std::fabs(v.as_float()))
                    : (v.as_int() < 0 ? negate(v) : Value::integer(v.as_int()));
       }},
      {"select", [](Interpreter& in, const Value& v, ArgReader&,
                    CallArgs& a) { return select_items(in, v, a, true, false); }},
      {"reject", [](Interpreter& in, const Value& v, ArgReader&,
                    CallArgs& a) { return select_items(in, v, a, false, false); }},
      {"selectattr", [](Interpreter& in, const Value& v, ArgReader&,
                        CallArgs& a) { return select_items(in, v, a, true, true); }},
      {"rejectattr", [](Interpreter& in, const Value& v, ArgReader&,
                        CallArgs& a) { return select_items(in, v, a, false, true); }},
      {"map",
       [](Interpreter& in, const Value& v, ArgReader&, CallArgs& a) { return do_map(in, v, a); }},
      {"sort",
       [](Interpreter& in, const Value& v, ArgReader& r, CallArgs&) { return do_sort(in, v, r); }},
      {"unique",
       [](Interpreter&, const Value& v, ArgReader&, CallArgs&) {
         std::vector<Value> out;
         for (const Value& x : iterate(v)) {
           if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equal(x, y); }))
             out.push_back(x);
         }
         return Value::list(std::move(out));
       }},
      {"indent",
       [](Interpreter&, const Value& v, ArgReader& r, CallArgs&) { return do_indent(v, r); }},
  };
  return k;
}

// Filters whose arguments are free-form (select, map ...) read CallArgs themselves.
bool reads_raw_args(const std::string& name) {
  return name == "items" || name == "upper" || name == "lower" || name == "capitalize" ||
         name == "title" || name == "replace" || name == "select" || name == "reject" ||
         name == "selectattr" || name == "rejectattr" || name == "map";
}

std::string canonical(const std::string& name) {
  if (name == "count") return "length";
  if (name == "d") return "default";
  if (name == "e") return "escape";
  return name;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().contains(canonical(name)); }

Value apply_filter(Interpreter& in, const std::string& name, const Value& v, CallArgs& args) {
  const std::string n = canonical(name);
  auto it = filters().find(n);
  if (it == filters().end()) throw TemplateError("no filter named '" + name + "'");
  ArgReader r(args, name);
  Value out = it->second(in, v, r, args);
  if (!reads_raw_args(n)) r.finish();
  return out;
}

}  // namespace s4kv::tokenizer::jinja
