// Bounded JSON parsing: nlohmann's parser drives BoundedBuilder, a SAX handler that builds
// the value and enforces JsonLimits as the events come, so that parsing stops at the first
// violation. Invariant: every event costs O(1) amortized (plus the bytes it carries): object
// keys go through a hash map per open object, and ordered objects are appended to directly
// (nlohmann's ordered_map::emplace would scan the object for every key).
#include "common/json.h"

#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/file.h"

namespace s4kv {

namespace {

constexpr std::string_view kBom = "\xEF\xBB\xBF";

// Object types that keep document order expose their underlying vector.
template <typename Object>
concept AppendableObject = requires {
  typename Object::Container;
};

// A key as it appears in a path: shortened, so that a long key cannot make a long message.
std::string path_key(const std::string& key) {
  return key.size() <= 40 ? key : key.substr(0, 37) + "...";
}

template <typename J>
class BoundedBuilder {
 public:
  using number_integer_t = typename J::number_integer_t;
  using number_unsigned_t = typename J::number_unsigned_t;
  using number_float_t = typename J::number_float_t;
  using string_t = typename J::string_t;
  using binary_t = typename J::binary_t;

  explicit BoundedBuilder(const JsonLimits& limits) : limits_(limits) {}

  bool null() { return add(J(nullptr)) != nullptr; }
  bool boolean(bool v) { return add(J(v)) != nullptr; }
  bool number_integer(number_integer_t v) { return add(J(v)) != nullptr; }
  bool number_unsigned(number_unsigned_t v) { return add(J(v)) != nullptr; }
  bool number_float(number_float_t v, const string_t& /*text*/) { return add(J(v)) != nullptr; }
  bool string(string_t& v) { return add(J(std::move(v))) != nullptr; }
  bool binary(binary_t& v) { return add(J::binary(std::move(v))) != nullptr; }
  bool start_object(std::size_t /*size*/) { return open(J::object()); }
  bool start_array(std::size_t /*size*/) { return open(J::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(string_t& key) {
    Frame& f = frames_.back();
    if (limits_.max_object_keys > 0 && f.count >= limits_.max_object_keys) {
      return fail(describe_path(frames_.size()) + " has more than " +
                  std::to_string(limits_.max_object_keys) + " keys");
    }
    ++f.count;
    const auto [it, inserted] = f.keys.try_emplace(key, f.count - 1);
    if (!inserted) {
      if (!limits_.allow_duplicate_keys) {
        return fail("duplicate key \"" + path_key(key) + "\"" +
                    (frames_.size() > 1 ? " in " + describe_path(frames_.size()) : ""));
      }
      f.duplicate_at = it->second;
    } else {
      f.duplicate_at.reset();
    }
    f.pending_key = std::move(key);
    return true;
  }

  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& e) {
    syntax_error_ = e.what();
    return false;
  }

  J& result() { return root_; }
  const std::string& syntax_error() const { return syntax_error_; }
  const std::string& violation() const { return violation_; }
  const JsonViolation& violation_where() const { return where_; }

 private:
  struct Frame {
    J* value = nullptr;
    size_t count = 0;                    // elements or keys so far
    std::string segment;                 // how the parent names this value: "key" or "[3]"
    bool keyed = false;                  // segment is an object key (not an index)
    std::string pending_key;             // objects: the key whose value comes next
    size_t max_elements = 0;             // arrays: 0 no limit
    std::optional<size_t> duplicate_at;  // allowed duplicate: its position
    std::unordered_map<std::string, size_t> keys;  // objects: key -> position
  };

  bool open(J container) {
    if (static_cast<int>(frames_.size()) >= limits_.max_depth) {
      return fail("nesting deeper than " + std::to_string(limits_.max_depth) + " levels");
    }
    std::string segment;
    bool keyed = false;
    size_t max_elements = limits_.max_array_elements;
    if (!frames_.empty()) {
      const Frame& parent = frames_.back();
      keyed = parent.value->is_object();
      segment = keyed ? path_key(parent.pending_key) : "[" + std::to_string(parent.count) + "]";
      if (keyed && frames_.size() == 1 && container.is_array()) {
        for (const JsonFieldLimit& l : limits_.field_limits) {
          if (l.key == parent.pending_key) max_elements = l.max_elements;
        }
      }
    }
    J* v = add(std::move(container));
    if (v == nullptr) return false;
    frames_.push_back(Frame{v, 0, std::move(segment), keyed, {}, max_elements, std::nullopt, {}});
    return true;
  }

  bool close() {
    frames_.pop_back();
    return true;
  }

  // Puts v where the parser is (top level, next array element, value of the pending key);
  // null after a violation.
  J* add(J v) {
    if (frames_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& f = frames_.back();
    if (f.value->is_array()) {
      if (f.max_elements > 0 && f.count >= f.max_elements) {
        fail(describe_path(frames_.size()) + " has more than " + std::to_string(f.max_elements) +
             " elements");
        return nullptr;
      }
      ++f.count;
      auto& array = f.value->template get_ref<typename J::array_t&>();
      array.push_back(std::move(v));
      return &array.back();
    }
    auto& object = f.value->template get_ref<typename J::object_t&>();
    using Object = std::remove_reference_t<decltype(object)>;
    if constexpr (AppendableObject<Object>) {
      auto& items = static_cast<typename Object::Container&>(object);
      if (f.duplicate_at) {
        items[*f.duplicate_at].second = std::move(v);  // the last value wins, as nlohmann's
        return &items[*f.duplicate_at].second;
      }
      items.emplace_back(std::move(f.pending_key), std::move(v));
      return &items.back().second;
    } else {
      J& slot = object[std::move(f.pending_key)];
      slot = std::move(v);
      return &slot;
    }
  }

  // The path of the value opened by frames_[depth - 1]: "logit_bias", "messages[3].content".
  std::string path_of(size_t depth) const {
    std::string path;
    for (size_t i = 1; i < depth; ++i) {
      if (frames_[i].keyed && !path.empty()) path += '.';
      path += frames_[i].segment;
    }
    return path;
  }
  std::string describe_path(size_t depth) const {
    const std::string path = path_of(depth);
    return path.empty() ? "the top-level value" : path;
  }

  bool fail(std::string what) {
    violation_ = std::move(what);
    where_.path = path_of(frames_.size());
    if (frames_.size() >= 2 && frames_[1].keyed) where_.top_level_key = frames_[1].segment;
    return false;
  }

  JsonLimits limits_;
  J root_;
  std::vector<Frame> frames_;  // open containers, outermost first
  std::string syntax_error_;
  std::string violation_;
  JsonViolation where_;
};

// One parser for both key orders: J is Json or OrderedJson.
template <typename J>
Result<J> parse_json_as(std::string_view text, std::string_view source, JsonLimits limits,
                        JsonViolation* violation) {
  if (text.substr(0, kBom.size()) == kBom) {
    if (violation != nullptr) *violation = JsonViolation{};
    return invalid_argument(std::string(source) +
                            " is not valid JSON: it starts with a UTF-8 byte order mark");
  }
  BoundedBuilder<J> builder(limits);
  bool ok = false;
  try {
    ok = J::sax_parse(text.begin(), text.end(), &builder, J::input_format_t::json,
                      /*strict=*/true, /*ignore_comments=*/false);
  } catch (const typename J::exception& e) {  // not expected: the builder reports errors
    return invalid_argument(std::string(source) + " is not valid JSON: " + e.what());
  }
  if (!builder.violation().empty()) {
    if (violation != nullptr) *violation = builder.violation_where();
    return invalid_argument(std::string(source) + " is not accepted: " + builder.violation());
  }
  if (!ok) {
    std::string what = builder.syntax_error();
    // nlohmann prefixes "[json.exception.parse_error.101] "; the byte position is kept.
    if (auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
    return invalid_argument(std::string(source) + " is not valid JSON: " + what);
  }
  return std::move(builder.result());
}

}  // namespace

Result<Json> parse_json(std::string_view text, std::string_view source, JsonLimits limits,
                        JsonViolation* violation) {
  return parse_json_as<Json>(text, source, limits, violation);
}

Result<OrderedJson> parse_ordered_json(std::string_view text, std::string_view source,
                                       JsonLimits limits, JsonViolation* violation) {
  return parse_json_as<OrderedJson>(text, source, limits, violation);
}

Result<Json> read_json_file(const std::string& path, size_t max_bytes, JsonLimits limits) {
  S4KV_ASSIGN_OR_RETURN(std::string text, read_file(path, max_bytes));
  return parse_json(text, path, limits);
}

std::string json_brief(const Json& v) {
  std::string s;
  try {
    s = v.dump(-1, ' ', /*ensure_ascii=*/true, Json::error_handler_t::replace);
  } catch (const Json::exception&) {
    return "<unprintable>";
  }
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

std::string_view json_type_name(const Json& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number_float()) return "number";
  if (v.is_boolean()) return "boolean";
  if (v.is_string()) return "string";
  if (v.is_null()) return "null";
  if (v.is_array()) return "array";
  if (v.is_object()) return "object";
  return "value";
}

}  // namespace s4kv
