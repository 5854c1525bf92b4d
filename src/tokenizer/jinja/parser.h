// The Jinja parser: tokens to a syntax tree, following jinja2's grammar and operator
// precedence (condexpr < or < and < not < compare < + - < ~ < * / // % < ** < unary <
// postfix/filters/tests). Statements: if/elif/else, for (with else, an `if` filter and tuple
// targets), set (plain, tuple, namespace attribute, block), macro, break/continue (the
// loopcontrols extension), filter blocks and transformers' generation block. Anything else
// (include, extends, import, call, raw, recursive loops ...) is refused with a SyntaxError
// naming the line. Nesting is bounded so hostile templates cannot exhaust the stack.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace s4kv::tokenizer::jinja {

// Deepest nesting of expressions and blocks the parser accepts.
inline constexpr int kMaxParseDepth = 128;

// Throws SyntaxError.
Body parse(const std::vector<Token>& tokens);

}  // namespace s4kv::tokenizer::jinja
