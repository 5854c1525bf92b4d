// A parsed Jinja template and its sandboxed rendering: the public face of jinja/. Parsing
// and rendering never throw and never abort on bad input: malformed templates, templates that
// raise, undefined values used wrongly and exhausted limits all come back as a Status whose
// message names the template line. A Template is immutable and may be rendered concurrently.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/value.h"

namespace s4kv::tokenizer::jinja {

using Variables = std::vector<std::pair<std::string, Value>>;

class Template {
 public:
  // Lexes and parses with transformers' settings; checks that every filter and test exists.
  static Result<Template> parse(std::string_view source);

  // Renders with vars (plus the globals range, namespace, dict, raise_exception,
  // strftime_now). Errors: kInvalidArgument (template errors, raise_exception),
  // kResourceExhausted (step budget, output cap, recursion depth).
  Result<std::string> render(const Variables& vars, const RenderLimits& limits = {}) const;

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace s4kv::tokenizer::jinja
