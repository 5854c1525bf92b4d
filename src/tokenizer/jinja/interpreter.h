// The tree-walking interpreter. Sandboxed: a template sees only the variables it is given
// plus a few globals (range, namespace, dict, raise_exception, strftime_now); values expose
// only whitelisted, non-mutating methods; dunder attributes are refused. Every statement,
// expression and loop iteration costs one step of a budget; output buffers and built
// strings/lists are capped; macro recursion is bounded. Exceeding any limit raises a
// TemplateError that Template turns into a Status. One Interpreter renders one template
// once, on one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace s4kv::tokenizer::jinja {

struct RenderLimits {
  int64_t max_steps = 5'000'000;        // statements + expressions + loop iterations
  size_t max_output_bytes = 64u << 20;  // rendered text, and any one string or list built
  int max_recursion_depth = 64;         // nested macro calls
};

// Variables of one block level. Loops give each iteration its own scope, macros each call.
struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;

  const Value* lookup(const std::string& name) const;
};

class Interpreter {
 public:
  explicit Interpreter(const RenderLimits& limits) : limits_(limits) {}
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Renders body in scope root (the template's variables and globals). Throws TemplateError.
  std::string render(const Body& body, std::shared_ptr<Scope> root);

  Value eval(const Expr& e);
  Value call(const Value& callee, CallArgs& args);
  // Costs n steps of the budget.
  void step(int64_t n = 1);
  // Refuses a string or list of `size` bytes/items when over the output cap.
  void check_size(size_t size) const;
  const RenderLimits& limits() const { return limits_; }
  // The template line being executed, for error messages.
  int line() const { return line_; }
  // Runs a macro's body with its parameters bound.
  Value call_macro(const Stmt& s, const std::shared_ptr<Scope>& defined_in, CallArgs& args);
  // Namespaces are mutable and may come to hold themselves; the interpreter empties every
  // namespace it made when it is destroyed, so such cycles cannot leak.
  void track_namespace(const std::shared_ptr<DictData>& ns) { namespaces_.push_back(ns); }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_body(const Body& body, std::string& out);
  Flow exec(const Stmt& s, std::string& out);
  void exec_for(const Stmt& s, std::string& out);
  void exec_set(const Stmt& s, Value v);
  Value make_macro(const Stmt& s);
  void append(std::string& out, const std::string& text);
  Value lookup(const std::string& name) const;
  Value eval_call(const Expr& e);
  Value eval_filter(const Expr& e, const Value* input);
  Value eval_test(const Expr& e);
  Value eval_compare(const Expr& e);
  Value eval_literal_container(const Expr& e);
  CallArgs eval_args(const Expr& e, size_t first);

  RenderLimits limits_;
  std::shared_ptr<Scope> scope_;
  int64_t steps_ = 0;
  int depth_ = 0;
  int line_ = 0;
  std::vector<std::weak_ptr<DictData>> namespaces_;
};

// Operators with Python semantics (operators.cc). Throw TemplateError on type errors.
Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b);
Value negate(const Value& v);
bool contains(const Value& container, const Value& item);

}  // namespace s4kv::tokenizer::jinja
