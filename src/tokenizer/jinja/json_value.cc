#include "tokenizer/jinja/json_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <vector>

#include "tokenizer/jinja/utf8.h"

namespace s4kv::tokenizer::jinja {
namespace {

template <typename J>
Value from_json_impl(const J& j) {
  switch (j.type()) {
    case J::value_t::null:
      return Value::none();
    case J::value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case J::value_t::number_integer:
      return Value::integer(j.template get<int64_t>());
    case J::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
      return Value::number(static_cast<double>(u));
    }
    case J::value_t::number_float:
      return Value::number(j.template get<double>());
    case J::value_t::string:
      return Value::string(j.template get<std::string>());
    case J::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_impl(e));
      return Value::list(std::move(items));
    }
    case J::value_t::object: {
      auto d = std::make_shared<DictData>();
      for (const auto& [k, e] : j.items()) d->set(k, from_json_impl(e));
      return Value::dict(std::move(d));
    }
    default:
      return Value::none();  // binary / discarded: never produced by the parser
  }
}

void escape_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  char buf[16];
  for (char32_t c : utf8_decode(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7f)) {
      if (c >= 0x10000) {
        const char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xd800 + (v >> 10)),
                      static_cast<unsigned>(0xdc00 + (v & 0x3ff)));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      utf8_append(out, c);
    }
  }
  out.push_back('"');
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonDumpOptions& o) : o_(o) {
    if (o.separators) {
      item_sep_ = o.separators->first;
      key_sep_ = o.separators->second;
    } else {
      item_sep_ = o.indent ? "," : ", ";
      key_sep_ = ": ";
    }
  }

  void write(const Value& v, int depth) {
    if (depth > kMaxNesting) throw TemplateError("maximum recursion depth exceeded in tojson");
    switch (v.kind()) {
      case Kind::kNone:
        out_ += "null";
        return;
      case Kind::kBool:
        out_ += v.as_bool() ? "true" : "false";
        return;
      case Kind::kInt:
        out_ += std::to_string(v.as_int());
        return;
      case Kind::kFloat:
        write_float(v.as_float());
        return;
      case Kind::kString:
        escape_json_string(out_, v.str(), o_.ensure_ascii);
        return;
      case Kind::kList:
        write_list(v.list(), depth);
        return;
      case Kind::kDict:
        if (!v.dict().is_namespace) {
          write_dict(v.dict(), depth);
          return;
        }
        break;
      default:
        break;
    }
    throw TemplateError("Object of type " + v.type_name() + " is not JSON serializable");
  }

  std::string take() { return std::move(out_); }

 private:
  void write_float(double f) {
    if (std::isnan(f))
      out_ += "NaN";
    else if (std::isinf(f))
      out_ += f < 0 ? "-Infinity" : "Infinity";
    else
      out_ += float_repr(f);
  }

  void newline(int depth) {
    if (!o_.indent) return;
    out_.push_back('\n');
    for (int i = 0; i < depth; ++i) out_ += *o_.indent;
  }

  void write_list(const ListData& l, int depth) {
    if (l.items.empty()) {
      out_ += "[]";
      return;
    }
    out_.push_back('[');
    for (size_t i = 0; i < l.items.size(); ++i) {
      if (i) out_ += item_sep_;
      newline(depth + 1);
      write(l.items[i], depth + 1);
    }
    newline(depth);
    out_.push_back(']');
  }

  void write_dict(const DictData& d, int depth) {
    if (d.items.empty()) {
      out_ += "{}";
      return;
    }
    std::vector<size_t> order(d.items.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (o_.sort_keys) {
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return d.items[a].first < d.items[b].first; });
    }
    out_.push_back('{');
    for (size_t i = 0; i < order.size(); ++i) {
      if (i) out_ += item_sep_;
      newline(depth + 1);
      escape_json_string(out_, d.items[order[i]].first, o_.ensure_ascii);
      out_ += key_sep_;
      write(d.items[order[i]].second, depth + 1);
    }
    newline(depth);
    out_.push_back('}');
  }

  const JsonDumpOptions& o_;
  std::string item_sep_, key_sep_;
  std::string out_;
};

}  // namespace

Value from_json(const OrderedJson& j) { return from_json_impl(j); }
Value from_json(const Json& j) { return from_json_impl(j); }

std::string dump_json(const Value& v, const JsonDumpOptions& options) {
  JsonWriter w(options);
  w.write(v, 0);
  return w.take();
}

}  // namespace s4kv::tokenizer::jinja
