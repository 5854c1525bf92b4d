#include "tokenizer/jinja/template.h"

#include <exception>
#include <new>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"

namespace s4kv::tokenizer::jinja {
namespace {

// jinja2 refuses unknown filters and tests when it compiles a template; so do we.
void validate(const Expr* e);

void validate_body(const Body& body) {
  for (const StmtPtr& s : body) {
    validate(s->expr.get());
    validate(s->filter.get());
    for (const auto& [cond, b] : s->branches) {
      validate(cond.get());
      validate_body(b);
    }
    for (const auto& p : s->params) validate(p.second.get());
    validate_body(s->body);
    validate_body(s->else_body);
  }
}

void validate(const Expr* e) {
  if (!e) return;
  if (e->kind == ExprKind::kFilter && !has_filter(e->name)) {
    throw SyntaxError(e->line, "no filter named '" + e->name + "'");
  }
  if (e->kind == ExprKind::kTest && !has_test(e->name)) {
    throw SyntaxError(e->line, "no test named '" + e->name + "'");
  }
  for (const ExprPtr& a : e->args) validate(a.get());
  for (const auto& kw : e->kwargs) validate(kw.second.get());
}

}  // namespace

Result<Template> Template::parse(std::string_view source) {
  try {
    auto body = std::make_shared<Body>(jinja::parse(tokenize(source)));
    validate_body(*body);
    Template t;
    t.body_ = std::move(body);
    return t;
  } catch (const TemplateError& e) {
    return invalid_argument(std::string("chat template syntax error: ") + e.what());
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kResourceExhausted, "chat template too large to parse");
  }
}

Result<std::string> Template::render(const Variables& vars, const RenderLimits& limits) const {
  Interpreter in(limits);
  try {
    auto root = std::make_shared<Scope>();
    install_globals(*root);
    for (const auto& [name, value] : vars) root->vars[name] = value;
    return in.render(*body_, std::move(root));
  } catch (const RaisedError& e) {
    return invalid_argument("chat template raised an exception at line " +
                            std::to_string(in.line()) + ": " + e.what());
  } catch (const LimitError& e) {
    return Status(StatusCode::kResourceExhausted,
                  "chat template error at line " + std::to_string(in.line()) + ": " + e.what());
  } catch (const TemplateError& e) {
    return invalid_argument("chat template error at line " + std::to_string(in.line()) + ": " +
                            e.what());
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kResourceExhausted, "chat template rendering ran out of memory");
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal,
                  std::string("chat template rendering failed: ") + e.what());
  }
}

}  // namespace s4kv::tokenizer::jinja
