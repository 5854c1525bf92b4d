// What templates can reach besides their variables: attribute and item access (with the
// sandbox's refusals), the methods of str/dict/list that chat templates use, filters, tests
// and globals. Each behaves as its jinja2/Python counterpart; all throw TemplateError.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/value.h"

namespace s4kv::tokenizer::jinja {

// Binds call arguments to named parameters, as a Python signature would.
class ArgReader {
 public:
  ArgReader(CallArgs& args, std::string fname) : a_(args), fname_(std::move(fname)) {}
  // The parameter at position pos (among the positional args) or by keyword; nullopt if absent.
  std::optional<Value> get(size_t pos, const char* name);
  Value get_or(size_t pos, const char* name, Value fallback);
  Value require(size_t pos, const char* name);
  // Fails on arguments no get() consumed.
  void finish();

 private:
  CallArgs& a_;
  std::string fname_;
  size_t max_pos_ = 0;
  std::vector<std::string> used_;
};

// environment.getattr / getitem of jinja2's ImmutableSandboxedEnvironment (methods.cc).
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step);
// The items a for loop (or a filter) iterates: list items, dict keys, string characters;
// nothing for Undefined. Throws for values Python cannot iterate.
std::vector<Value> iterate(const Value& v);
std::string expect_string(const Value& v, const char* what);
int64_t expect_int(const Value& v, const char* what);

// filters.cc, tests.cc, globals.cc.
bool has_filter(const std::string& name);
Value apply_filter(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);
bool has_test(const std::string& name);
bool apply_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);
void install_globals(Scope& root);

}  // namespace s4kv::tokenizer::jinja
