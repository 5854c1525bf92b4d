#include "tokenizer/jinja/interpreter.h"

#include <optional>

#include "common/check.h"
#include "tokenizer/jinja/builtins.h"

namespace s4kv::tokenizer::jinja {
namespace {

// Restores the interpreter's scope when a block ends (normally or by an exception).
class ScopeSwap {
 public:
  ScopeSwap(std::shared_ptr<Scope>& slot, std::shared_ptr<Scope> next)
      : slot_(slot), saved_(std::move(slot)) {
    slot_ = std::move(next);
  }
  ~ScopeSwap() { slot_ = std::move(saved_); }
  ScopeSwap(const ScopeSwap&) = delete;
  ScopeSwap& operator=(const ScopeSwap&) = delete;

 private:
  std::shared_ptr<Scope>& slot_;
  std::shared_ptr<Scope> saved_;
};

std::shared_ptr<Scope> child_of(const std::shared_ptr<Scope>& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

Value make_loop(size_t i, const std::vector<Value>& items) {
  const auto n = static_cast<int64_t>(items.size());
  const auto k = static_cast<int64_t>(i);
  auto d = std::make_shared<DictData>();
  d->set("index", Value::integer(k + 1));
  d->set("index0", Value::integer(k));
  d->set("revindex", Value::integer(n - k));
  d->set("revindex0", Value::integer(n - k - 1));
  d->set("first", Value::boolean(k == 0));
  d->set("last", Value::boolean(k == n - 1));
  d->set("length", Value::integer(n));
  d->set("depth", Value::integer(1));
  d->set("depth0", Value::integer(0));
  d->set("previtem", k > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
  d->set("nextitem", k + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
  d->set("cycle", Value::callable("cycle", [k](Interpreter&, CallArgs& a) {
           if (a.args.empty()) throw TemplateError("no items for cycling given");
           return a.args[static_cast<size_t>(k) % a.args.size()];
         }));
  return Value::dict(std::move(d));
}

}  // namespace

const Value* Scope::lookup(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

Interpreter::~Interpreter() {
  for (auto& weak : namespaces_) {
    if (auto ns = weak.lock()) {
      ns->items.clear();
      ns->index.clear();
    }
  }
}

std::string Interpreter::render(const Body& body, std::shared_ptr<Scope> root) {
  ScopeSwap swap(scope_, std::move(root));
  std::string out;
  exec_body(body, out);
  return out;
}

void Interpreter::step(int64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps) {
    throw LimitError("step budget exceeded: the template ran more than " +
                     std::to_string(limits_.max_steps) + " steps");
  }
}

void Interpreter::check_size(size_t size) const {
  if (size > limits_.max_output_bytes) {
    throw LimitError("output size cap exceeded: more than " +
                     std::to_string(limits_.max_output_bytes) + " bytes");
  }
}

void Interpreter::append(std::string& out, const std::string& text) {
  check_size(out.size() + text.size());
  out += text;
  step(static_cast<int64_t>(text.size() >> 10));  // copying costs
}

Interpreter::Flow Interpreter::exec_body(const Body& body, std::string& out) {
  for (const StmtPtr& s : body) {
    const Flow f = exec(*s, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, std::string& out) {
  step();
  line_ = s.line;
  switch (s.kind) {
    case StmtKind::kText:
      append(out, s.text);
      break;
    case StmtKind::kOutput:
      append(out, eval(*s.expr).to_str());
      break;
    case StmtKind::kIf:
      for (const auto& [cond, body] : s.branches) {
        if (eval(*cond).truthy()) return exec_body(body, out);
      }
      return exec_body(s.else_body, out);
    case StmtKind::kFor:
      exec_for(s, out);
      break;
    case StmtKind::kSet:
      exec_set(s, eval(*s.expr));
      break;
    case StmtKind::kSetBlock: {
      std::string buf;
      const Flow f = exec_body(s.body, buf);
      Value v = Value::string(std::move(buf));
      if (s.filter) v = eval_filter(*s.filter, &v);
      scope_->vars[s.targets[0]] = std::move(v);
      return f;
    }
    case StmtKind::kMacro:
      scope_->vars[s.targets[0]] = make_macro(s);
      break;
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
    case StmtKind::kFilterBlock: {
      std::string buf;
      const Flow f = exec_body(s.body, buf);
      const Value v = Value::string(std::move(buf));
      append(out, eval_filter(*s.filter, &v).to_str());
      return f;
    }
    case StmtKind::kGeneration:
      return exec_body(s.body, out);
  }
  return Flow::kNormal;
}

void Interpreter::exec_set(const Stmt& s, Value v) {
  if (!s.attr.empty()) {
    const Value target = lookup(s.targets[0]);
    if (!target.is_dict() || !target.dict().is_namespace) {
      throw TemplateError("can only assign attributes of a namespace object, not of '" +
                          s.targets[0] + "'");
    }
    target.mutable_dict().set(s.attr, std::move(v));
    return;
  }
  if (s.targets.size() == 1) {
    scope_->vars[s.targets[0]] = std::move(v);
    return;
  }
  const std::vector<Value> items = iterate(v);
  if (items.size() != s.targets.size()) {
    throw TemplateError("cannot unpack " + std::to_string(items.size()) + " values into " +
                        std::to_string(s.targets.size()) + " names");
  }
  for (size_t i = 0; i < items.size(); ++i) scope_->vars[s.targets[i]] = items[i];
}

void Interpreter::exec_for(const Stmt& s, std::string& out) {
  std::vector<Value> items = iterate(eval(*s.expr));
  auto bind = [&](Scope& sc, const Value& item) {
    if (s.targets.size() == 1) {
      sc.vars[s.targets[0]] = item;
      return;
    }
    const std::vector<Value> parts = iterate(item);
    if (parts.size() != s.targets.size()) {
      throw TemplateError("cannot unpack " + std::to_string(parts.size()) + " values into " +
                          std::to_string(s.targets.size()) + " loop variables");
    }
    for (size_t i = 0; i < parts.size(); ++i) sc.vars[s.targets[i]] = parts[i];
  };
  if (s.filter) {
    std::vector<Value> kept;
    for (const Value& item : items) {
      step();
      ScopeSwap swap(scope_, child_of(scope_));
      bind(*scope_, item);
      if (eval(*s.filter).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    step();
    ScopeSwap swap(scope_, child_of(scope_));
    bind(*scope_, items[i]);
    scope_->vars["loop"] = make_loop(i, items);
    if (exec_body(s.body, out) == Flow::kBreak) break;
  }
  if (items.empty()) exec_body(s.else_body, out);
}

Value Interpreter::make_macro(const Stmt& s) {
  // A weak reference: the macro lives in the scope it captures; a strong one would leak both.
  std::weak_ptr<Scope> defined_in = scope_;
  const Stmt* stmt = &s;
  return Value::callable(s.targets[0], [stmt, defined_in](Interpreter& in, CallArgs& args) {
    auto scope = defined_in.lock();
    if (!scope) throw TemplateError("macro '" + stmt->targets[0] + "' called outside its scope");
    return in.call_macro(*stmt, scope, args);
  });
}

Value Interpreter::call_macro(const Stmt& s, const std::shared_ptr<Scope>& defined_in,
                              CallArgs& args) {
  const std::string& name = s.targets[0];
  if (depth_ >= limits_.max_recursion_depth) {
    throw LimitError("maximum recursion depth exceeded: more than " +
                     std::to_string(limits_.max_recursion_depth) + " nested macro calls");
  }
  if (args.args.size() > s.params.size()) {
    throw TemplateError("macro '" + name + "' takes not more than " +
                        std::to_string(s.params.size()) + " argument(s)");
  }
  ScopeSwap swap(scope_, child_of(defined_in));
  ++depth_;
  for (size_t i = 0; i < s.params.size(); ++i) {
    const auto& [param, def] = s.params[i];
    std::optional<Value> v;
    if (i < args.args.size()) v = args.args[i];
    for (auto& [k, kv] : args.kwargs) {
      if (k != param) continue;
      if (v)
        throw TemplateError("macro '" + name + "' got multiple values for argument '" + k + "'");
      v = kv;
    }
    if (!v) v = def ? eval(*def) : Value::undefined("parameter '" + param + "' was not provided");
    scope_->vars[param] = std::move(*v);
  }
  for (auto& [k, kv] : args.kwargs) {
    if (!scope_->vars.contains(k)) {
      throw TemplateError("macro '" + name + "' takes no keyword argument '" + k + "'");
    }
  }
  std::string out;
  exec_body(s.body, out);
  --depth_;
  return Value::string(std::move(out));
}

Value Interpreter::lookup(const std::string& name) const {
  const Value* v = scope_->lookup(name);
  return v ? *v : Value::undefined("'" + name + "' is undefined");
}

}  // namespace s4kv::tokenizer::jinja
